#!/usr/bin/env python3
"""Routing quality: do the cache-aware strategies find the warm engine?

For each strategy in turn (random, round_robin, cache_aware,
precise_cache_aware), the benchmark starts a fresh fleet of `rolter fake-llm`
engines (cold prefix caches, KV events on) and a fresh `rolter serve` whose
rolter.toml has one route per strategy over all the engines, then replays the
same seeded multi-turn chat workload through that strategy's route:

  - tenants, each with a long system prompt that every one of its
    conversations starts with;
  - users per tenant, each with a profile that opens their first message;
  - conversations of several turns: each turn appends the user's message and
    then the engine's answer to the history, so every request's prompt
    extends the previous turn's.

A fixed number of workers (the concurrency) each take the next conversation
and play its turns in order. For every request the worker asks an engine's
`POST /tokenize` for the prompt's token ids (every engine tokenizes alike),
sends `POST /v1/chat/completions` with `stream: true` and the ids in
`x-rolter-token-ids` (what `precise_cache_aware` hashes; every strategy gets
the same request), and measures at the client:

  - time to first token: request sent to the first SSE chunk carrying the
    assistant's role or content. The engines make that
    `ttft_ms + uncached prompt tokens * prefill_us_per_token`, so cache hits
    show here;
  - the prefix-hit rate: `usage.prompt_tokens_details.cached_tokens` over
    `usage.prompt_tokens` of the final usage chunk, summed over requests;
  - the engine that answered (`x-rolter-target`).

It prints one table (strategy, requests, TTFT p50/p90/p99, hit rate, requests
per engine), compares the cache-aware strategies with the load-only ones,
writes load-tests/results/quality-<timestamp>.json and .md, stops every
process it started, and exits:

  0  every request succeeded and each cache-aware strategy beat the best
     load-only one clearly (see `clear_win`);
  1  a request failed, or a cache-aware strategy did not win clearly;
  2  the run could not be set up (no rolter binary, a process did not start);
  130 interrupted.

`quality.py --overload [overload.py's options]` runs the overload benchmark
instead (overload.py): more load than the fleet can run, flow control off
and on.

Its parts: quality_workload.py (settings, the seeded workload),
quality_fleet.py (engines and gateway), quality_client.py (the workers),
quality_report.py (numbers, verdict, tables); processes are started and
stopped with fleet.py's helpers.

Python 3.11, standard library only. Builds nothing: pass `--rolter`, or it
takes target/release/rolter, else target/debug/rolter (measure with the
release build).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from fleet import REPO, Processes, SetupError, wait_until
from quality_client import play
from quality_fleet import QualityGateway, calibrate, start_engines, subscribers_connected
from quality_report import (
    DIAGNOSTICS, HEADER, clear_win, diagnostic_rows, engine_stats, fmt_ms, fmt_rate,
    index_agreement, markdown, quality_targets, summarize, table_rows, text_table,
)
from quality_workload import BLOCK_SIZE, Settings, Workload, build_workload

DEFAULT_RESULTS = REPO / "load-tests" / "results"
DEMO_TOKENIZER = REPO / "conf" / "demo-tokenizer"
STRATEGIES = ["random", "round_robin", "cache_aware", "precise_cache_aware"]

EXIT_OK, EXIT_FAIL, EXIT_SETUP, EXIT_INTERRUPTED = 0, 1, 2, 130


class Interrupted(Exception):
    """SIGINT or SIGTERM reached the runner."""


def run_strategy(strategy: str, rolter: Path, work: Path, workload: Workload, s: Settings,
                 admin_token: str, stop: threading.Event, start: float) -> tuple[dict, dict]:
    """One strategy on a fresh fleet and gateway: (summary, gateway evidence)."""
    work.mkdir(parents=True)
    processes = Processes()
    try:
        engines = start_engines(rolter, work, processes, s)
        gateway = QualityGateway(rolter, work, processes, admin_token, grace_period_s=1)
        gateway.write_pingora_yaml()
        gateway.write_routes(engines, s.strategies, s.tokenizer if s.text_only else None,
                             s.cache_aware_min_load)
        gateway.start()
        if not wait_until(15, lambda: subscribers_connected(gateway, engines), interval_s=0.2):
            log(start, f"{strategy}: warning: KV-event subscribers not all connected: "
                       f"{json.dumps(gateway.kv_indexes())[:400]}")
        log(start, f"{strategy}: {len(engines)} engines and the gateway ready on {gateway.url}")
        began = time.monotonic()
        began_pc = time.perf_counter()
        records = play(workload, strategy, gateway, engines, s.concurrency, stop, s.text_only)
        elapsed = time.monotonic() - began
        if stop.is_set():
            raise Interrupted("stopped")
        summary = summarize(strategy, records, engines, elapsed)
        summary["engines"] = engine_stats(engines)
        routes = gateway.admin_json("/admin/routes") or {}
        route = next((r for r in routes.get("routes", []) if r.get("model") == strategy), None)
        evidence = {"kv_indexes": gateway.kv_indexes(), "route": route}
        summary["kv_index"] = index_agreement(evidence["kv_indexes"], summary["engines"])
        summary["samples"] = [
            {k: r.get(k) for k in ("conversation", "turn", "target", "prompt_tokens",
                                    "cached_tokens", "ceiling_cached", "ttft_ms", "latency_ms",
                                    "queue_ms", "error")}
            for r in records
        ]
        for sample, record in zip(summary["samples"], records):
            for k in ("ttft_ms", "latency_ms"):
                if sample[k] is not None:
                    sample[k] = round(sample[k], 2)
            if "sent" in record:
                sample["sent_s"] = round(record["sent"] - began_pc, 4)
        return summary, evidence
    finally:
        processes.stop_all()


def log(start: float, message: str) -> None:
    print(f"[{time.monotonic() - start:6.1f}s] {message}", flush=True)


def find_rolter(given: str | None) -> Path:
    if given:
        path = Path(given)
        if not path.is_file():
            raise SetupError(f"--rolter {given}: no such file")
        return path.resolve()
    for candidate in (REPO / "target/release/rolter", REPO / "target/debug/rolter"):
        if candidate.is_file():
            return candidate
    raise SetupError("no rolter binary: build one (`cargo build --release`) or pass --rolter PATH")


def settings_from(args: argparse.Namespace) -> Settings:
    quick = args.quick

    def pick(value, full, short):
        return value if value is not None else (short if quick else full)

    strategies = [x.strip() for x in args.strategies.split(",") if x.strip()]
    return Settings(
        strategies=strategies,
        engines=args.engines,
        tenants=pick(args.tenants, 12, 8),
        system_tokens=pick(args.system_tokens, 1500, 800),
        users_per_tenant=pick(args.users_per_tenant, 4, 2),
        profile_tokens=pick(args.profile_tokens, 120, 60),
        turns_min=2,
        turns_max=pick(args.turns_max, 8, 5),
        message_tokens_min=40,
        message_tokens_max=pick(args.message_tokens_max, 250, 120),
        answer_tokens_min=16,
        answer_tokens_max=64,
        requests=pick(args.requests, 800, 160),
        concurrency=pick(args.concurrency, 16, 8),
        seed=args.seed,
        ttft_ms=args.ttft_ms,
        prefill_us_per_token=args.prefill_us_per_token,
        token_delay_ms=args.token_delay_ms,
        kv_blocks=pick(args.kv_blocks, 3000, 1000),
        block_size=BLOCK_SIZE,
        quick=quick,
        prefill_slots=args.prefill_slots,
        decode_slowdown_pct=args.decode_slowdown_pct,
        tenant_skew=args.tenant_skew,
        preamble_tokens=pick(args.preamble_tokens, 300, 150),
        tokenizer=None if args.tokenizer == "simulated" else str(Path(args.tokenizer).resolve()),
        text_only=args.text_only,
        cache_aware_min_load=args.cache_aware_min_load,
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Routing-quality benchmark: the same shared-prefix multi-turn chat workload "
        "through each strategy, on a fresh fleet of fake engines each.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="a small run, under a minute")
    p.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated, run in this order")
    p.add_argument("--rolter", help="rolter binary (default target/release/rolter, else target/debug/rolter)")
    p.add_argument("--engines", type=int, default=4, help="fake engines behind every route")
    p.add_argument("--requests", type=int, help="chat completions per strategy (default 800; quick 160)")
    p.add_argument("--concurrency", type=int, help="requests in flight (default 16; quick 8)")
    p.add_argument("--tenants", type=int, help="tenants (default 12; quick 8)")
    p.add_argument("--system-tokens", type=int, help="tokens of a tenant's system prompt (default 1500; quick 800)")
    p.add_argument("--users-per-tenant", type=int, help="users of a tenant (default 4; quick 2)")
    p.add_argument("--profile-tokens", type=int, help="tokens of a user's profile (default 120; quick 60)")
    p.add_argument("--turns-max", type=int, help="turns of the longest conversation (default 8; quick 5); the shortest has 2")
    p.add_argument("--message-tokens-max", type=int, help="tokens of the longest user message (default 250; quick 120); the shortest has 40")
    p.add_argument("--seed", type=int, default=7, help="seed of the workload")
    p.add_argument("--ttft-ms", type=int, default=5, help="engines' fixed time to first token")
    p.add_argument("--prefill-us-per-token", type=int, default=200, help="engines' prefill cost of an uncached prompt token")
    p.add_argument("--token-delay-ms", type=int, default=2, help="engines' delay between output tokens")
    p.add_argument("--kv-blocks", type=int, help=f"engines' prefix cache, in blocks of {BLOCK_SIZE} tokens (default 3000; quick 1000)")
    p.add_argument("--prefill-slots", type=int, default=2, help="engines' concurrent prefills; the rest queue (0: unlimited)")
    p.add_argument("--decode-slowdown-pct", type=int, default=5, help="engines' per-token slowdown per other decoding sequence, in percent")
    p.add_argument("--tenant-skew", type=float, default=1.0, help="tenant popularity 1/(t+1)^skew (0: uniform)")
    p.add_argument("--preamble-tokens", type=int, help="tokens of a preamble shared by every tenant's system prompt (default 300; quick 150)")
    p.add_argument("--tokenizer", default=str(DEMO_TOKENIZER),
                   help="the model directory the engines tokenize with; "
                        "`simulated`: the fake engine's own word tokenizer")
    p.add_argument("--cache-aware-min-load", type=int,
                   help="the cache_aware route's `cache_guard.min_load` (default: the strategy's, 2); "
                        "an engine prefilling k requests at once queues a new one only past k")
    p.add_argument("--text-only", action="store_true",
                   help="clients send text only; the routes tokenize with --tokenizer (not `simulated`)")
    p.add_argument("--results", default=str(DEFAULT_RESULTS), help="directory for the JSON and Markdown results")
    p.add_argument("--keep-workdir", action="store_true", help="keep the temporary directory (logs, configs)")
    args = p.parse_args(argv)
    unknown = [x for x in args.strategies.split(",") if x.strip() and x.strip() not in STRATEGIES]
    if unknown:
        p.error(f"--strategies: unknown {', '.join(unknown)} (known: {', '.join(STRATEGIES)})")
    if args.engines < 1:
        p.error("--engines must be >= 1")
    if args.text_only and args.tokenizer == "simulated":
        p.error("--text-only needs a model directory in --tokenizer: the gateway cannot tokenize like the simulated one")
    return args


def on_signal(signum, _frame) -> None:
    raise Interrupted(signal.Signals(signum).name)


def run(args: argparse.Namespace) -> int:
    rolter = find_rolter(args.rolter)
    s = settings_from(args)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    results_dir = Path(args.results)
    results_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rolter-quality-"))
    try:
        s.tokens_per_word = calibrate(rolter, work / "calibration", s)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    workload = build_workload(s)
    admin_token = secrets.token_urlsafe(24)
    stop = threading.Event()
    start = time.monotonic()
    results: dict[str, dict] = {}
    evidence: dict[str, dict] = {}
    failed = False
    print(
        f"rolter quality: rolter={rolter} work={work} strategies={','.join(s.strategies)}\n"
        f"workload: {s.tenants} tenants x ~{s.system_tokens}-token system prompt, "
        f"{s.users_per_tenant} users each, {len(workload.conversations)} conversations, "
        f"{workload.requests()} requests per strategy, concurrency {s.concurrency}, seed {s.seed}; "
        f"sizes in the engines' tokens ({s.tokens_per_word:.2f} per word of the text)",
        flush=True,
    )
    try:
        for strategy in s.strategies:
            summary, seen = run_strategy(
                strategy, rolter, work / strategy, workload, s, admin_token, stop, start
            )
            results[strategy] = summary
            evidence[strategy] = seen
            t = summary["ttft_ms"]
            log(
                start,
                f"{strategy}: {summary['ok']}/{summary['requests']} ok in {summary['elapsed_s']} s, "
                f"TTFT p50 {fmt_ms(t['p50'])} ms, hit rate {fmt_rate(summary['hit_rate'])}",
            )
            k = summary["kv_index"]
            log(
                start,
                f"{strategy}: gateway KV index usable for {k['usable']}/{k['indexes']} engines, "
                f"{k['blocks_held']} blocks held for the engines' {k['engine_blocks']}, "
                f"{k['gaps']} gaps, {k['unknown_parent_drops']} unplaceable chains, "
                f"{k['decode_errors']} unreadable batches",
            )
            if summary["errors"]:
                failed = True
                log(start, f"{strategy}: first errors: {summary['first_errors'][:3]}")
    except BaseException:
        stop.set()
        raise
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if failed or args.keep_workdir:
            logs = results_dir / f"quality-{stamp}-logs"
            shutil.copytree(work, logs, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.sock"))
            print(f"logs kept in {logs}")
        shutil.rmtree(work, ignore_errors=True)

    verdicts = clear_win(results)
    print()
    print(text_table(HEADER, table_rows(results)))
    print()
    print(text_table(DIAGNOSTICS, diagnostic_rows(results)))
    print()
    for strategy, v in verdicts.items():
        print(
            f"{strategy} vs best load-only: {'clear win' if v['clear_win'] else 'NO clear win'}"
            f" (hit rate {v['hit_rate_points_over_best_load_only']:+} points,"
            f" TTFT p50 x{v['ttft_p50_vs_best_load_only']})"
        )
    for t in quality_targets(results):
        print(f"target: {t['target']}: {t['measured']}, {'met' if t['met'] else 'MISSED'}")
    md_path = results_dir / f"quality-{stamp}.md"
    json_path = results_dir / f"quality-{stamp}.json"
    md_path.write_text(markdown(results, verdicts, s, workload, stamp, rolter))
    json_path.write_text(json.dumps(
        {
            "stamp": stamp,
            "rolter": str(rolter),
            "settings": dataclasses.asdict(s),
            "workload": {
                "conversations": len(workload.conversations),
                "requests": workload.requests(),
            },
            "results": results,
            "verdicts": verdicts,
            "targets": quality_targets(results),
            "gateway": evidence,
            "elapsed_s": round(time.monotonic() - start, 1),
        },
        indent=1,
    ))
    print(f"results: {md_path}\n         {json_path}")
    won = all(v["clear_win"] for v in verdicts.values())
    return EXIT_OK if not failed and won else EXIT_FAIL


def main(argv: list[str]) -> int:
    if argv[:1] == ["--overload"]:
        # The overload run: offered load above the fleet's capacity, flow
        # control off and on (overload.py, which takes the rest of the
        # arguments).
        import overload
        return overload.main(argv[1:])
    args = parse_args(argv)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        return run(args)
    except SetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_SETUP
    except Interrupted as e:
        print(f"interrupted ({e}); every process started was stopped", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
