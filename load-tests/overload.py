#!/usr/bin/env python3
"""Overload: offered load above the fleet's capacity, flow control off and on.

Starts `rolter fake-llm` engines that run at most `--max-num-seqs` sequences
at once (the rest wait in the engine's own queue, reported as
`vllm:num_requests_waiting`), and for each mode a fresh `rolter serve` with
one `power_of_two` route over them, `max_concurrency` set to the engines'
batch and `[providers.engine_metrics]` on:

  off  `[flow_control] enabled = false`: every request is dispatched at once
       and waits in whichever engine's queue it was sent to;
  on   `[flow_control] enabled = true`: requests beyond the fleet's batch wait
       in the gateway and go to the first engine with a free place.

More client workers than the fleet has places (`--concurrency`, default
three times the places) replay the same seeded requests in a closed loop:
mostly short answers with a share of long ones, so an engine's queue can sit
behind a long answer while another engine frees up. A client that gets 429
waits its `Retry-After` and sends again (counted, not lost). It measures at
the client: time to first token of each admitted request (request sent to
the first content chunk of the stream that was served), and samples every
engine's waiting queue every 100 ms.

Prints one table, writes load-tests/results/overload-<timestamp>.json and
.md, stops every process it started, and exits 0 when no request was lost
in either mode and flow control lowered both the TTFT p99 of admitted
requests and the engines' mean queue; 1 otherwise; 2 when it could not be
set up.

Python 3.11, standard library only; pass `--rolter`, or it takes
target/release/rolter, else target/debug/rolter.
"""
from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import random
import secrets
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from fleet import REPO, Gateway, Processes, SetupError, wait_until
from fleet import http as get

RESULTS = REPO / "load-tests" / "results"
EXIT_OK, EXIT_FAIL, EXIT_SETUP = 0, 1, 2


def find_rolter(given: str | None) -> Path:
    for candidate in ([Path(given)] if given else []) + [
        REPO / "target" / "release" / "rolter",
        REPO / "target" / "debug" / "rolter",
    ]:
        if candidate.is_file():
            return candidate
    raise SetupError("no rolter binary: build it (cargo build --release) or pass --rolter")


def start_engines(rolter: Path, work: Path, processes: Processes, args) -> list[tuple[str, str]]:
    engines = []
    for i in range(args.engines):
        name = f"engine-{i + 1}"
        out = work / f"{name}.out"
        process = processes.spawn(
            name,
            [str(rolter), "fake-llm", "--listen", "127.0.0.1:0", "--name", name,
             "--max-num-seqs", str(args.max_num_seqs), "--ttft-ms", "5",
             "--prefill-us-per-token", "0", "--token-delay-ms", str(args.token_delay_ms)],
            work / f"{name}.log",
            stdout=out,
        )
        if not wait_until(10, lambda: "\n" in out.read_text() or not process.alive()):
            raise SetupError(f"{name} did not start:\n" + "\n".join(process.log_tail(20)))
        url = out.read_text().split("http://", 1)[1].split()[0]
        engines.append((name, f"http://{url}"))
    return engines


def write_config(gateway: Gateway, engines: list[tuple[str, str]], args, flow: bool) -> None:
    providers = "".join(
        f'[[providers]]\nname = "{name}"\nbase_url = "{url}"\nmax_concurrency = {args.max_num_seqs}\n'
        f"[providers.engine_metrics]\npoll_interval_ms = 100\n\n"
        for name, url in engines
    )
    targets = ", ".join(f'{{ provider = "{name}" }}' for name, _ in engines)
    gateway.toml.write_text(
        "# Written by load-tests/overload.py.\n"
        f'[server]\nlisten = ["{gateway.listen}"]\nadmin_listen = "{gateway.admin}"\nrequire_api_key = false\n\n'
        f"{providers}"
        f'[[routes]]\nmodel = "chat"\nstrategy = "power_of_two"\ntargets = [{targets}]\n\n'
        "[health]\nenabled = false\n\n"
        f"[flow_control]\nenabled = {'true' if flow else 'false'}\nmax_queued = 100000\nmax_wait_secs = 300\n\n"
        '[[admin_tokens]]\nname = "overload"\ntoken_env = "ROLTER_ADMIN_TOKEN"\nrole = "viewer"\n'
    )


def one_request(host: str, port: int, tokens: int) -> dict:
    """One streamed chat completion: status, TTFT, whether it ended whole."""
    body = json.dumps({
        "model": "chat", "stream": True, "max_tokens": tokens,
        "messages": [{"role": "user", "content": "hello"}],
    })
    connection = http.client.HTTPConnection(host, port, timeout=300)
    sent = time.perf_counter()
    try:
        connection.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            retry_after = float(response.getheader("retry-after") or 1)
            response.read()
            return {"status": response.status, "retry_after": retry_after}
        ttft = None
        done = False
        for line in response:
            if ttft is None and line.startswith(b"data: {") and b'"content"' in line:
                ttft = (time.perf_counter() - sent) * 1000
            if line.startswith(b"data: [DONE]"):
                done = True
        return {"status": 200, "ttft_ms": ttft, "done": done, "latency_ms": (time.perf_counter() - sent) * 1000}
    except (OSError, http.client.HTTPException) as e:
        return {"status": None, "error": str(e)}
    finally:
        connection.close()


def engine_waiting(url: str) -> int:
    status, text = get("GET", f"{url}/metrics", timeout_s=2)
    if status != 200:
        return 0
    for line in text.splitlines():
        if line.startswith("vllm:num_requests_waiting"):
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def run_mode(flow: bool, rolter: Path, work: Path, args, plan: list[int]) -> dict:
    work.mkdir(parents=True)
    processes = Processes()
    try:
        engines = start_engines(rolter, work, processes, args)
        gateway = Gateway(rolter, work, processes, secrets.token_hex(16), grace_period_s=1)
        gateway.write_pingora_yaml()
        write_config(gateway, engines, args, flow)
        gateway.start()
        host, port = gateway.listen.split(":")
        jobs = list(enumerate(plan))
        lock = threading.Lock()
        records: list[dict] = []
        queue_samples: list[int] = []
        finished = threading.Event()

        def worker() -> None:
            while True:
                with lock:
                    if not jobs:
                        return
                    index, tokens = jobs.pop(0)
                retries = 0
                while True:
                    result = one_request(host, int(port), tokens)
                    if result["status"] == 429 and retries < 50:
                        retries += 1
                        time.sleep(result["retry_after"])
                        continue
                    break
                result.update(index=index, tokens=tokens, retries=retries)
                with lock:
                    records.append(result)

        def sampler() -> None:
            while not finished.wait(0.1):
                queue_samples.append(sum(engine_waiting(url) for _, url in engines))

        began = time.monotonic()
        sampling = threading.Thread(target=sampler, daemon=True)
        sampling.start()
        workers = [threading.Thread(target=worker) for _ in range(args.concurrency)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        finished.set()
        sampling.join()
        elapsed = time.monotonic() - began
    finally:
        processes.stop_all()
    served = [r for r in records if r["status"] == 200 and r.get("done") and r.get("ttft_ms") is not None]
    ttfts = sorted(r["ttft_ms"] for r in served)

    def pct(p: float) -> float | None:
        return ttfts[min(len(ttfts) - 1, int(p * len(ttfts)))] if ttfts else None

    return {
        "mode": "on" if flow else "off",
        "requests": len(plan),
        "served": len(served),
        "lost": len(plan) - len(served),
        "retried_429": sum(r.get("retries", 0) for r in records),
        "ttft_p50_ms": pct(0.50),
        "ttft_p90_ms": pct(0.90),
        "ttft_p99_ms": pct(0.99),
        "engine_queue_mean": statistics.fmean(queue_samples) if queue_samples else 0.0,
        "engine_queue_max": max(queue_samples, default=0),
        "elapsed_s": elapsed,
        "throughput_rps": len(served) / elapsed if elapsed else 0.0,
    }


def fmt(value, digits=0) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(rows: list[dict]) -> str:
    head = "| flow control | requests | lost | 429 retries | TTFT p50 ms | p90 | p99 | engine queue mean | max | req/s |"
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        lines.append(
            f"| {r['mode']} | {r['requests']} | {r['lost']} | {r['retried_429']} | {fmt(r['ttft_p50_ms'])} | "
            f"{fmt(r['ttft_p90_ms'])} | {fmt(r['ttft_p99_ms'])} | {fmt(r['engine_queue_mean'], 1)} | "
            f"{r['engine_queue_max']} | {fmt(r['throughput_rps'], 1)} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--rolter", help="rolter binary")
    p.add_argument("--quick", action="store_true", help="a small run, under a minute")
    p.add_argument("--engines", type=int, default=3)
    p.add_argument("--max-num-seqs", type=int, default=4, help="each engine's running batch")
    p.add_argument("--concurrency", type=int, help="client workers (default: 3 x the fleet's places)")
    p.add_argument("--requests", type=int, help="requests per mode (default 600; quick 180)")
    p.add_argument("--short-tokens", type=int, default=6)
    p.add_argument("--long-tokens", type=int, default=80)
    p.add_argument("--long-share", type=float, default=0.15, help="share of long answers")
    p.add_argument("--token-delay-ms", type=int, default=10)
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    args.requests = args.requests or (180 if args.quick else 600)
    args.concurrency = args.concurrency or 3 * args.engines * args.max_num_seqs
    rng = random.Random(args.seed)
    plan = [args.long_tokens if rng.random() < args.long_share else args.short_tokens
            for _ in range(args.requests)]
    try:
        rolter = find_rolter(args.rolter)
    except SetupError as e:
        print(e, file=sys.stderr)
        return EXIT_SETUP
    rows = []
    with tempfile.TemporaryDirectory(prefix="rolter-overload-") as tmp:
        for flow in (False, True):
            try:
                rows.append(run_mode(flow, rolter, Path(tmp) / ("on" if flow else "off"), args, plan))
            except SetupError as e:
                print(e, file=sys.stderr)
                return EXIT_SETUP
            print(f"flow control {rows[-1]['mode']}: done in {rows[-1]['elapsed_s']:.1f} s", file=sys.stderr)
    off, on = rows
    passed = (
        off["lost"] == 0 and on["lost"] == 0
        and on["ttft_p99_ms"] is not None and off["ttft_p99_ms"] is not None
        and on["ttft_p99_ms"] < off["ttft_p99_ms"]
        and on["engine_queue_mean"] < off["engine_queue_mean"]
    )
    text = table(rows)
    verdict = ("PASS: no request lost; flow control lowered TTFT p99 and the engines' queue"
               if passed else "FAIL: a request was lost, or flow control did not lower both TTFT p99 and the engines' queue")
    settings = (f"{args.engines} engines x {args.max_num_seqs} places, {args.concurrency} clients, "
                f"{args.requests} requests ({args.long_share:.0%} of {args.long_tokens} tokens, the rest "
                f"{args.short_tokens}), {args.token_delay_ms} ms per token, rolter {rolter}")
    print(f"{settings}\n\n{text}\n\n{verdict}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    (RESULTS / f"overload-{stamp}.json").write_text(json.dumps({"settings": vars(args), "rows": rows, "passed": passed}, indent=2))
    (RESULTS / f"overload-{stamp}.md").write_text(f"# Overload run {stamp}\n\n{settings}\n\n{text}\n\n{verdict}\n")
    return EXIT_OK if passed else EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
