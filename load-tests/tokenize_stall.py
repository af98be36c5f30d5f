#!/usr/bin/env python3
"""Does tokenizing a huge prompt stall the gateway's other requests?

One `rolter fake-llm` engine and one `rolter serve` (Pingora, 2 worker
threads) on loopback. The gateway has three routes over the same engine:

  - `small`: round robin, no tokenizer: the probe's route;
  - `huge-tokenized`: precise_cache_aware with `tokenizer` set to the
    bundled demo model directory (conf/demo-tokenizer), the default 64 KiB
    budget;
  - `huge-plain`: the same strategy without a tokenizer, the baseline: what
    a 4 MiB body costs the gateway without tokenization (reading, parsing and
    forwarding it).

A probe sends small non-streamed chat completions one after another and
times each at the client. Three phases of `--seconds` each: the probe
alone; the probe while `--huge-clients` clients send 4 MiB chat prompts
(one user message of English-like words) to `huge-plain` back to back; the
same to `huge-tokenized`. The table gives the probe's p50/p99/max per phase
and the huge requests completed. Tokenization keeps the worker threads
responsive when the tokenized phase's probe p99 is close to the plain
phase's: the gateway tokenizes at most the budget's leading bytes and does
it on tokio's blocking pool, not on a worker thread.

Release build; Python 3.11, standard library only. Exits 0 when every request
succeeded, 1 when one failed, 2 on a setup error. Stops every process it
started on every path.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from fleet import REPO, Gateway, Processes, SetupError, http, start_engines

HUGE_BYTES = 4 * 1024 * 1024
WORDS = (
    "the of and to in is was for on that with as by at from it an be this are "
    "which or his her they were have had not but one all their there been has "
    "when who will more no if out so said what up its about into than them can "
    "only other new some could time these two may then do first any my now such "
    "like our over man me even most made after also did many before must through"
).split()


def huge_prompt(seed: int) -> str:
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    while size < HUGE_BYTES:
        word = rng.choice(WORDS)
        parts.append(word)
        size += len(word) + 1
    return " ".join(parts)


def chat_body(model: str, content: str) -> bytes:
    return json.dumps({
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 1,
    }).encode()


def chat(url: str, body: bytes, timeout_s: float) -> tuple[bool, float]:
    request = urllib.request.Request(
        f"{url}/v1/chat/completions", data=body, method="POST",
        headers={"content-type": "application/json"},
    )
    began = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            response.read()
            ok = response.status == 200
    except (urllib.error.URLError, OSError):
        ok = False
    return ok, (time.perf_counter() - began) * 1000


class Phase:
    def __init__(self, name: str):
        self.name = name
        self.probe_ms: list[float] = []
        self.probe_failed = 0
        self.huge_done = 0
        self.huge_failed = 0
        self.lock = threading.Lock()


def run_phase(url: str, phase: Phase, huge_model: str | None, huge_clients: int,
              seconds: float, prompts: list[str]) -> None:
    # Encoded once: the clients share the machine's two cores with the
    # gateway and the engine.
    bodies = [chat_body(huge_model, prompt) for prompt in prompts] if huge_model else []
    deadline = time.monotonic() + seconds

    def probe() -> None:
        n = 0
        while time.monotonic() < deadline:
            ok, ms = chat(url, chat_body("small", f"ping {n}"), timeout_s=30)
            n += 1
            with phase.lock:
                if ok:
                    phase.probe_ms.append(ms)
                else:
                    phase.probe_failed += 1

    def huge(i: int) -> None:
        k = i
        while time.monotonic() < deadline:
            ok, _ = chat(url, bodies[k % len(bodies)], timeout_s=120)
            k += huge_clients
            with phase.lock:
                if ok:
                    phase.huge_done += 1
                else:
                    phase.huge_failed += 1

    threads = [threading.Thread(target=probe)]
    if huge_model:
        threads += [threading.Thread(target=huge, args=(i,)) for i in range(huge_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 180)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def write_config(gateway: Gateway, engine_url: str, tokenizer: Path) -> None:
    target = '{ provider = "engine-1", model = "fake" }'
    gateway.toml.write_text(
        "# Written by load-tests/tokenize_stall.py.\n"
        "[server]\n"
        f'listen = ["{gateway.listen}"]\n'
        f'admin_listen = "{gateway.admin}"\n'
        "require_api_key = false\n\n"
        f'[[providers]]\nname = "engine-1"\nbase_url = "{engine_url}"\n\n'
        f'[[routes]]\nmodel = "small"\nstrategy = "round_robin"\ntargets = [{target}]\n\n'
        f'[[routes]]\nmodel = "huge-plain"\nstrategy = "precise_cache_aware"\ntargets = [{target}]\n\n'
        f'[[routes]]\nmodel = "huge-tokenized"\nstrategy = "precise_cache_aware"\n'
        f'tokenizer = "{tokenizer}"\ntargets = [{target}]\n\n'
        "[[admin_tokens]]\n"
        'name = "stall"\n'
        'token_env = "ROLTER_ADMIN_TOKEN"\n'
        'role = "viewer"\n'
    )


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rolter", default=str(REPO / "target/release/rolter"))
    p.add_argument("--seconds", type=float, default=15.0, help="length of each phase")
    p.add_argument("--huge-clients", type=int, default=2, help="clients sending 4 MiB prompts back to back")
    p.add_argument("--tokenizer", default=str(REPO / "conf/demo-tokenizer"))
    args = p.parse_args(argv)
    rolter = Path(args.rolter)
    if not rolter.exists():
        print(f"no rolter binary at {rolter}: run `cargo build --release`", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="rolter-stall-"))
    processes = Processes()
    token = os.urandom(12).hex()
    try:
        # No simulated prefill: a 4 MiB prompt is ~1M tokens, 50 s at the
        # engine's default 50 us each; the gateway is what is measured.
        engines = start_engines(rolter, work, processes, count=1, token_delay_ms=0,
                                extra_args=("--prefill-us-per-token", "0",
                                            # 4 MiB prompts are answered, not refused.
                                            "--max-model-len", "16777216"))
        gateway = Gateway(rolter, work, processes, token, grace_period_s=1)
        gateway.write_pingora_yaml()
        write_config(gateway, engines[0][1], Path(args.tokenizer).resolve())
        gateway.start()
        prompts = [huge_prompt(seed) for seed in range(4)]
        phases = [
            (Phase("probe alone"), None),
            (Phase("+ 4 MiB prompts, no tokenizer"), "huge-plain"),
            (Phase("+ 4 MiB prompts, tokenized"), "huge-tokenized"),
        ]
        for phase, model in phases:
            run_phase(gateway.url, phase, model, args.huge_clients, args.seconds, prompts)
        print(f"gateway: 2 worker threads; {args.huge_clients} clients x 4 MiB prompts; "
              f"{args.seconds:.0f} s per phase")
        print(f"{'phase':32} {'probes':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'4 MiB done':>11}")
        failed = 0
        for phase, _ in phases:
            ms = phase.probe_ms
            print(f"{phase.name:32} {len(ms):7d} {statistics.median(ms) if ms else float('nan'):8.2f} "
                  f"{percentile(ms, 0.99):8.2f} {max(ms) if ms else float('nan'):8.2f} {phase.huge_done:11d}")
            failed += phase.probe_failed + phase.huge_failed
        status, text = http("GET", f"{gateway.admin_url}/metrics")
        for line in text.splitlines() if status == 200 else []:
            if line.startswith("rolter_routing_tokens_total") and "huge-tokenized" in line:
                print(line)
        if failed:
            print(f"{failed} requests failed; logs in {work}", file=sys.stderr)
            return 1
        return 0
    except SetupError as error:
        print(error, file=sys.stderr)
        return 2
    finally:
        processes.stop_all()
        if not os.environ.get("KEEP_WORKDIR"):
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
