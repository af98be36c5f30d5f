#!/usr/bin/env python3
"""The training run of rolter's profile-guided build (`scripts/build-release`).

An instrumented `rolter serve` (built with `-Cprofile-generate`) serves a
mix of what a gateway sees in production, and writes its profile when it
exits; the optimized build then lays out and inlines the code by it. Code
the run never reaches is compiled as cold, so the mix is broad rather than
the benchmark's one request: chat, completions, embeddings, Messages,
Responses and the model list, streamed and not, round robin and the load-
and cache-aware strategies (one with a tokenizer), API keys, the access
log, bodies from a few bytes to ~400 KiB, the metrics scrape, and a small
share of the errors clients make (unknown model, bad JSON, a missing
field, no key).

Two `rolter fake-llm` engines answer at once (the same instrumented binary;
their profiles are written apart and not used). Python's standard library
only, no load generator: a profile needs how often each path runs, not a
saturated core. About 30 seconds. Exits 0 when the gateway's profile was
written, 1 when the traffic did not get the answers it should have, 2 on a
setup error. Stops every process it started on every path.

    load-tests/pgo_train.py --rolter INSTRUMENTED --profiles DIR
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from http.client import HTTPConnection, HTTPException
from pathlib import Path

from compare_targets import pingora_yaml
from fleet import REPO, Processes, SetupError, free_port, http, start_engines, wait_until

CLIENTS = 8
TRAFFIC_SECONDS = 25.0
# Far below what even a debug build serves (a few hundred a second): fewer
# means the gateway or the engines were stalled, not merely slow.
MIN_SERVED_PER_SECOND = 20
KEY = "sk-pgo-training"

WORDS = "the of and to in is was for on that with as by at from it an be this are".split()


def text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def messages(rng: random.Random, turns: int) -> list[dict]:
    history = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(turns):
        history.append({"role": "user" if i % 2 == 0 else "assistant", "content": text(rng, rng.randint(3, 200))})
    return history


def requests(rng: random.Random):
    """One round of the mix: (method, path, body, with key, the status it
    must get); JSON bodies as dicts."""
    model = rng.choice(["chat", "chat", "chat", "chat-cache", "chat-least"])
    stream = rng.random() < 0.5
    for _ in range(4):
        body = {"model": model, "messages": messages(rng, rng.randint(1, 8)), "max_tokens": rng.randint(4, 24)}
        if stream:
            body["stream"] = True
            if rng.random() < 0.5:
                body["stream_options"] = {"include_usage": True}
        yield "POST", "/v1/chat/completions", body, True, 200
        stream = not stream
    yield "POST", "/v1/completions", {
        "model": "chat", "prompt": text(rng, rng.randint(5, 300)), "max_tokens": 16, "stream": rng.random() < 0.5,
    }, True, 200
    yield "POST", "/v1/embeddings", {"model": "embed", "input": [text(rng, 8), text(rng, 20)]}, True, 200
    yield "POST", "/v1/messages", {
        "model": "chat", "max_tokens": 16, "stream": rng.random() < 0.5,
        "system": "Be brief.", "messages": [{"role": "user", "content": text(rng, 30)}],
    }, True, 200
    yield "POST", "/v1/responses", {"model": "chat", "input": text(rng, 20), "max_output_tokens": 16}, True, 200
    yield "GET", "/v1/models", None, True, 200
    if rng.random() < 0.05:
        big = {"role": "user", "content": text(rng, rng.randint(12_000, 120_000))}
        yield "POST", "/v1/chat/completions", {"model": "chat", "messages": [big], "max_tokens": 4}, True, 200
    if rng.random() < 0.1:
        yield "POST", "/v1/chat/completions", {"model": "no-such-model", "messages": messages(rng, 1)}, True, 404
        yield "POST", "/v1/chat/completions", b'{"model": "chat", "messages": [', True, 400
        yield "POST", "/v1/chat/completions", {"messages": messages(rng, 1)}, True, 400
        yield "POST", "/v1/chat/completions", {"model": "chat", "messages": messages(rng, 1)}, False, 401


class Tally:
    """Answers by status, and the requests whose status was not the one the
    mix expects (a profile trained on unexpected errors would be skewed)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_status: dict[str, int] = {}
        self.unexpected: dict[str, int] = {}

    def add(self, got: str, expected: int, what: str) -> None:
        with self.lock:
            self.by_status[got] = self.by_status.get(got, 0) + 1
            if got != str(expected):
                key = f"{what}: {got}, expected {expected}"
                self.unexpected[key] = self.unexpected.get(key, 0) + 1


def client(port: int, seed: int, deadline: float, tally: Tally) -> None:
    rng = random.Random(seed)
    conn = HTTPConnection("127.0.0.1", port, timeout=30)
    while time.monotonic() < deadline:
        for method, path, body, keyed, expected in requests(rng):
            data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
            headers = {"Content-Type": "application/json"}
            if keyed:
                headers["Authorization"] = f"Bearer {KEY}"
            what = f"{method} {path}"
            try:
                conn.request(method, path, body=data, headers=headers)
                response = conn.getresponse()
                response.read()
                tally.add(str(response.status), expected, what)
                if response.will_close:
                    conn.close()
            except (OSError, HTTPException) as e:
                tally.add(type(e).__name__, expected, what)
                conn.close()
                conn = HTTPConnection("127.0.0.1", port, timeout=30)
    conn.close()


def config(work: Path, listen: int, admin: int, engines: list[tuple[str, str]]) -> Path:
    providers = "".join(f'[[providers]]\nname = "{name}"\nbase_url = "{url}"\n\n' for name, url in engines)

    def targets(model: str) -> str:
        return ",\n".join(f'  {{ provider = "{name}", model = "{model}" }}' for name, _ in engines)

    path = work / "rolter.toml"
    path.write_text(
        "# Written by load-tests/pgo_train.py.\n"
        "[server]\n"
        f'listen = ["127.0.0.1:{listen}"]\n'
        f'admin_listen = "127.0.0.1:{admin}"\n'
        "require_api_key = true\n"
        f'access_log = "{work / "access.log"}"\n\n'
        f"{providers}"
        f'[[routes]]\nmodel = "chat"\nstrategy = "round_robin"\ntargets = [\n{targets("Qwen/Qwen3-8B")},\n]\n\n'
        f'[[routes]]\nmodel = "chat-cache"\nstrategy = "cache_aware"\n'
        f'tokenizer = "{REPO / "conf/demo-tokenizer"}"\ntargets = [\n{targets("Qwen/Qwen3-8B")},\n]\n\n'
        f'[[routes]]\nmodel = "chat-least"\nstrategy = "power_of_two"\ntargets = [\n{targets("Qwen/Qwen3-8B")},\n]\n\n'
        f'[[routes]]\nmodel = "embed"\nstrategy = "round_robin"\ntargets = [\n{targets("BAAI/bge-m3")},\n]\n\n'
        f'[[api_keys]]\nname = "training"\nkey_env = "PGO_TRAINING_KEY"\n'
    )
    return path


def train(rolter: Path, profiles: Path | None, seconds: float, work: Path, processes: Processes) -> int:
    # The engines' profiles are not the gateway's: written apart, then dropped.
    os.environ["LLVM_PROFILE_FILE"] = str(work / "engine-%p.profraw")
    engines = start_engines(
        rolter, work, processes, 2, 0,
        ("--ttft-ms", "0", "--prefill-us-per-token", "0", "--max-model-len", "1048576"),
    )
    listen, admin = free_port(), free_port()
    yaml = work / "pingora.yaml"
    yaml.write_text(pingora_yaml(work, threads=2))
    # The signal service's lines say what a shutdown waits for.
    env = dict(os.environ, PGO_TRAINING_KEY=KEY, RUST_LOG="warn,rolter::signals=info")
    if profiles is not None:
        env["LLVM_PROFILE_FILE"] = str(profiles / "gateway-%p-%m.profraw")
    gateway = processes.spawn(
        "gateway",
        [str(rolter), "serve", "-c", str(yaml), "--config", str(config(work, listen, admin, engines))],
        work / "gateway.log",
        env=env,
        stop_signal=signal.SIGINT,  # Pingora's fast shutdown; the profile is written at exit
        stop_wait_s=30,
    )
    ready = wait_until(60, lambda: http("GET", f"http://127.0.0.1:{admin}/readyz")[0] == 200 or not gateway.alive())
    if not ready or not gateway.alive():
        raise SetupError("the gateway did not become ready:\n" + "\n".join(gateway.log_tail(30)))

    tally = Tally()
    deadline = time.monotonic() + seconds
    threads = [threading.Thread(target=client, args=(listen, seed, deadline, tally)) for seed in range(CLIENTS)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        http("GET", f"http://127.0.0.1:{admin}/metrics")
        time.sleep(1)
    for t in threads:
        t.join()
    print("pgo_train: answers by status:", json.dumps(dict(sorted(tally.by_status.items()))))

    gateway.popen.send_signal(signal.SIGINT)
    if gateway.wait_exit(30) is None:
        raise SetupError(
            "the gateway did not exit on SIGINT, so it wrote no profile:\n"
            + "\n".join(gateway.log_tail(30))
        )
    served = tally.by_status.get("200", 0)
    if tally.unexpected or served < MIN_SERVED_PER_SECOND * seconds:
        for what, n in sorted(tally.unexpected.items()):
            print(f"pgo_train: {n} x {what}", file=sys.stderr)
        print(
            f"pgo_train: {served} requests answered 200; the mix was not served as it must be, "
            "so a profile of it would train the build on the wrong paths",
            file=sys.stderr,
        )
        return 1
    if profiles is not None:
        written = list(profiles.glob("gateway-*.profraw"))
        if not written:
            raise SetupError(f"the gateway wrote no profile into {profiles}: was it built with -Cprofile-generate?")
        print(f"pgo_train: {served} requests answered 200, profile in {written[0]}")
    else:
        print(f"pgo_train: {served} requests answered 200")
    return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rolter", required=True, help="the rolter binary (instrumented for a profile)")
    p.add_argument("--profiles", help="directory for the gateway's .profraw files (checked to be written)")
    p.add_argument("--seconds", type=float, default=TRAFFIC_SECONDS, help="length of the traffic")
    args = p.parse_args(argv)
    profiles = None
    if args.profiles:
        profiles = Path(args.profiles).resolve()
        profiles.mkdir(parents=True, exist_ok=True)
    processes = Processes()
    with tempfile.TemporaryDirectory(prefix="rolter-pgo-") as tmp:
        try:
            return train(Path(args.rolter).resolve(), profiles, args.seconds, Path(tmp), processes)
        except SetupError as e:
            print(f"pgo_train: {e}", file=sys.stderr)
            return 2
        finally:
            processes.stop_all()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
