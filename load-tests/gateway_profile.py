#!/usr/bin/env python3
"""Where rolter's CPU time goes, next to nginx's, under the benchmark's own
workloads: the input of the hot-path work.

For each workload (`chat`: compare.py's throughput run, 32 non-streaming
completions in flight; `sse`: 1,000 concurrent streams; `large-4m`: one
4 MiB body at a time), the proxy (rolter, then nginx, pinned and configured
as in compare.py) is started and warmed up, and while k6 drives it:

  1. `perf record -e cpu-clock -F 999 --call-graph dwarf,65528 -p PID` for
     --seconds: sampled call stacks (software clock: this VM has no hardware
     counters; 64 KiB of stack per sample, so 99% of stacks reach the
     request task's root);
  2. `perf stat -e raw_syscalls:sys_enter -e syscalls:sys_enter_<name> ...`
     for 3 s: syscalls by type, divided by the requests the engine counted
     over the same 3 s (`/fake/stats`).

The stacks are folded by profile_stacks.py into: self time by kind of work
(allocation, copies, JSON, metrics, logging, Pingora, tokio, kernel...) in
share and in µs per request; rolter's phases and components (inclusive);
the top functions; who allocates, copies and runs generic code; kernel time
by syscall. Output: load-tests/results/profile-<time>.md (and the raw
`perf script` text next to it with --keep-stacks).

Then (--memory-streams, default 1,000) rolter runs under valgrind's massif
while that many SSE streams stay open, and the peak heap is folded by
allocation site (profile_memory.py): what each open stream holds.

Needs `perf` (Debian `linux-perf`) and root or perf_event_paranoid <= 1;
`valgrind` for the memory part.
Python 3.11, standard library only; builds nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import profile_memory
import profile_stacks
from compare_scenarios import ODD_TAIL
from compare_targets import Nginx, Rolter, find_nginx, nofile_limit, pinned, start_fake_llm
from fleet import REPO, Process, Processes, SetupError
from run import EXIT_INTERRUPTED, EXIT_SETUP, Interrupted, find_k6, find_rolter, on_signal

HERE = Path(__file__).resolve().parent
BENCH_JS = HERE / "bench.js"
TRACEFS = Path("/sys/kernel/tracing/events/syscalls")
SYSCALLS = [
    "read", "write", "readv", "writev", "recvfrom", "sendto", "recvmsg", "sendmsg",
    "epoll_wait", "epoll_pwait", "epoll_ctl", "futex", "accept4", "close", "shutdown",
    "setsockopt", "getsockopt", "getpeername", "getsockname", "connect", "socket",
    "ioctl", "fcntl", "mmap", "munmap", "madvise", "mprotect", "brk", "sched_yield",
    "clock_nanosleep", "getrandom", "splice",
]


@dataclasses.dataclass
class Workload:
    name: str
    title: str
    engine_delay_ms: int
    env: dict
    unit: str  # what the engine counts: a request or a stream


WORKLOADS = {
    "chat": Workload("chat", "non-streaming chat, closed loop, 32 in flight (compare.py `throughput`)",
                     0, {"MODE": "throughput", "VUS": 32, "CHAT_TOKENS": 16}, "request"),
    "sse": Workload("sse", "1,000 concurrent SSE streams, 83 chunks 50 ms apart (compare.py `sse`)",
                    50, {"MODE": "stream", "VUS": 1000, "STREAM_TOKENS": 80}, "stream"),
    "large-4m": Workload("large-4m", "4 MiB request bodies, one at a time (compare.py `large-4m`)",
                         0, {"MODE": "large", "VUS": 1, "BODY_BYTES": 4194304 + ODD_TAIL}, "request"),
    "large-4m-doc": Workload("large-4m-doc", "4 MiB documents, one at a time (compare.py `large-4m-doc`)",
                             0, {"MODE": "large", "VUS": 1, "BODY_BYTES": 4194304 + ODD_TAIL,
                                 "PROMPT": "document"},
                             "request"),
}


def engine_count(url: str) -> int:
    with urllib.request.urlopen(f"{url}/fake/stats", timeout=5) as r:
        return json.load(r)["by_path"]["/v1/chat/completions"]


def cpu_of(pids: list[int]) -> float:
    from compare_targets import cpu_seconds

    return sum(cpu_seconds(p) for p in pids)


def perf_run_setup(client_cpus: str, prefix: str) -> tuple[list[int], Processes, Path, dt.datetime]:
    """What a run under `perf` needs before it starts anything: perf
    itself, SIGINT and SIGTERM that stop it cleanly, this runner on the
    client cores (comma-separated), the descriptor limit raised, a fresh
    work directory and the run's time stamp."""
    if not shutil.which("perf"):
        raise SetupError("perf not found (Debian: apt-get install linux-perf)")
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    cpus = [int(c) for c in client_cpus.split(",")]
    os.sched_setaffinity(0, cpus)
    nofile_limit()
    return cpus, Processes(), Path(tempfile.mkdtemp(prefix=prefix)), dt.datetime.now(dt.timezone.utc)


def start_k6_load(ctx: dict, url: str, settings: dict, name: str, out: Path, warm_s: float,
                  load_s: float) -> Process:
    """bench.js on the client cores against `url` with `settings`: a
    warm-up of `warm_s` run to its end, then `load_s` of load left running
    (its summary in `out`.k6.json, its log in `out`.k6.log)."""
    env = dict(os.environ, TARGET_URL=url, K6_NO_USAGE_REPORT="true",
               **{k: str(v) for k, v in settings.items()})
    k6 = pinned(ctx["client_cpus"], [str(ctx["k6"]), "run", "--quiet", "--no-color", "--address", "",
                                     str(BENCH_JS)])
    warm = subprocess.run(k6, env={**env, "DURATION": f"{warm_s:g}s",
                          "SUMMARY_PATH": str(out.with_suffix(".warm.json"))},
                          capture_output=True, timeout=120)
    if warm.returncode != 0:
        raise SetupError(f"k6 warm-up failed: {warm.stderr.decode()[-500:]}")
    return ctx["processes"].spawn(
        f"k6-{name}", k6, out.with_suffix(".k6.log"),
        env={**env, "DURATION": f"{load_s:g}s", "SUMMARY_PATH": str(out.with_suffix(".k6.json"))},
        stop_signal=signal.SIGINT,
    )


def profile_one(proxy, workload: Workload, engine, ctx: dict, out: Path) -> dict:
    """One proxy under one workload: perf record, then perf stat."""
    proxy.start()
    pids = proxy.meter.proxy_pids()
    pid_list = ",".join(map(str, pids))
    seconds = ctx["seconds"]
    load = start_k6_load(ctx, proxy.url, workload.env, proxy.name, out, 2, seconds + 6)
    time.sleep(1.5)
    record: dict = {"proxy": proxy.name, "pids": pids}

    perf_data = out.with_suffix(".perf.data")
    count0, cpu0, t0 = engine_count(engine.url), cpu_of(pids), time.monotonic()
    perf = subprocess.run(
        pinned(ctx["client_cpus"], ["perf", "record", "-q", "-e", "cpu-clock", "-F", str(ctx["frequency"]),
                                    "--call-graph", "dwarf,65528", "-p", pid_list, "-o", str(perf_data),
                                    "--", "sleep", str(seconds)]),
        capture_output=True, timeout=seconds + 60,
    )
    count1, cpu1, t1 = engine_count(engine.url), cpu_of(pids), time.monotonic()
    if perf.returncode != 0:
        raise SetupError(f"perf record failed: {perf.stderr.decode()[-800:]}")
    record["perf_window"] = {"seconds": round(t1 - t0, 2), "units": count1 - count0,
                             "cpu_s": round(cpu1 - cpu0, 3)}

    events = ["raw_syscalls:sys_enter"] + [
        f"syscalls:sys_enter_{name}" for name in SYSCALLS if (TRACEFS / f"sys_enter_{name}").exists()
    ]
    count0, cpu0, t0 = engine_count(engine.url), cpu_of(pids), time.monotonic()
    stat = subprocess.run(
        pinned(ctx["client_cpus"], ["perf", "stat", "-x", ";", *sum((["-e", e] for e in events), []),
                                    "-p", pid_list, "--", "sleep", "3"]),
        capture_output=True, text=True, timeout=60,
    )
    count1, cpu1, t1 = engine_count(engine.url), cpu_of(pids), time.monotonic()
    units = max(1, count1 - count0)
    syscalls = {}
    for line in stat.stderr.splitlines():
        fields = line.split(";")
        if len(fields) > 2 and fields[0].strip().isdigit():
            name = fields[2].replace("syscalls:sys_enter_", "").replace("raw_syscalls:sys_enter", "(all)")
            syscalls[name] = int(fields[0]) / units
    record["stat_window"] = {"seconds": round(t1 - t0, 2), "units": count1 - count0,
                             "cpu_s": round(cpu1 - cpu0, 3),
                             "cpu_us_per_unit": round((cpu1 - cpu0) * 1e6 / units, 1)}
    record["syscalls_per_unit"] = {k: round(v, 2) for k, v in syscalls.items() if v >= 0.005}
    load.wait_exit(seconds + 90)
    proxy.stop()

    script = subprocess.run(
        ["perf", "script", "-i", str(perf_data), "-F", "comm,tid,ip,sym,dso"],
        capture_output=True, text=True, timeout=1800,
    )
    if ctx["keep_stacks"]:
        out.with_suffix(".stacks.txt").write_text(script.stdout)
    perf_data.unlink(missing_ok=True)
    samples = profile_stacks.parse(script.stdout)
    record["summary"] = profile_stacks.summarize(samples)
    return record


# --- the report ----------------------------------------------------------------------


def pct(n: int, total: int) -> str:
    return f"{n * 100 / total:.1f}%" if total else "—"


def us(n: int, total: int, cpu_us: float) -> str:
    return f"{n / total * cpu_us:.1f}" if total else "—"


def section(workload: Workload, rolter: dict, nginx: dict | None) -> str:
    rs: profile_stacks.Summary = rolter["summary"]
    r_cpu = rolter["stat_window"]["cpu_us_per_unit"]
    lines = [f"## {workload.name}: {workload.title}", ""]
    n_cpu = nginx["stat_window"]["cpu_us_per_unit"] if nginx else None
    pw = rolter["perf_window"]
    lines.append(
        f"CPU per {workload.unit} (perf stat window, no sampling): rolter **{r_cpu:.1f} µs**"
        + (f", nginx **{n_cpu:.1f} µs** ({r_cpu / n_cpu:.2f}x)" if n_cpu else "")
        + f". Samples: rolter {rs.samples:,} over {pw['seconds']} s, {pw['units']:,} {workload.unit}s"
        f" ({pw['cpu_s'] * 1e6 / max(1, pw['units']):.1f} µs per {workload.unit} while sampled)."
        f" Threads: {', '.join(f'{t} {pct(c, rs.samples)}' for t, c in rs.threads[:4])}."
    )
    lines += ["", f"### Self time by kind of work (µs per {workload.unit} = share x CPU per {workload.unit})", ""]
    ns = nginx["summary"] if nginx else None
    n_kinds = dict(ns.kinds) if ns else {}
    lines.append("| kind | rolter share | rolter µs | nginx share | nginx µs |")
    lines.append("| --- | ---: | ---: | ---: | ---: |")
    seen = set()
    for k, c in rs.kinds:
        if c * 1000 < rs.samples * 2:  # under 0.2%
            continue
        seen.add(k)
        nc = n_kinds.get(k, 0)
        lines.append(f"| {k} | {pct(c, rs.samples)} | {us(c, rs.samples, r_cpu)} | "
                     f"{pct(nc, ns.samples) if ns else '—'} | {us(nc, ns.samples, n_cpu) if ns else '—'} |")
    if ns:
        for k, c in ns.kinds:
            if k not in seen and c * 1000 >= ns.samples * 2:
                lines.append(f"| {k} | — | — | {pct(c, ns.samples)} | {us(c, ns.samples, n_cpu)} |")
    lines += ["", "### Syscalls per " + workload.unit, ""]
    r_sys = rolter["syscalls_per_unit"]
    n_sys = nginx["syscalls_per_unit"] if nginx else {}
    lines.append("| syscall | rolter | nginx |")
    lines.append("| --- | ---: | ---: |")
    for name in sorted(set(r_sys) | set(n_sys), key=lambda k: (k != "(all)", -(r_sys.get(k, 0)))):
        lines.append(f"| {name} | {r_sys.get(name, 0):.2f} | {n_sys.get(name, 0):.2f} |")
    lines += ["", "### rolter: kernel time by syscall (share of all samples) and who made the call", ""]
    lines.append("| syscall | share | µs | caller |")
    lines.append("| --- | ---: | ---: | --- |")
    for sc, c, who in rs.syscalls:
        lines.append(f"| {sc} | {pct(c, rs.samples)} | {us(c, rs.samples, r_cpu)} | {who} |")
    lines += ["", "### rolter: components (inclusive: samples with the frame anywhere in the stack)", ""]
    lines.append("| component | share | µs |")
    lines.append("| --- | ---: | ---: |")
    for label, c in rs.components:
        lines.append(f"| {label} | {pct(c, rs.samples)} | {us(c, rs.samples, r_cpu)} |")
    lines += ["", "### rolter: top functions (self)", ""]
    lines.append("| function | kind | share |")
    lines.append("| --- | --- | ---: |")
    for name, k, c in rs.top_self[:25]:
        lines.append(f"| `{name}` | {k.split(' (')[0]} | {pct(c, rs.samples)} |")
    for title, rows in (("allocation (malloc/free) on behalf of", rs.alloc_owners),
                        ("memcpy/memmove on behalf of", rs.copy_owners),
                        ("generic core/alloc/std code on behalf of", rs.generic_owners)):
        if not rows:
            continue
        lines += ["", f"### rolter: {title}", "", "| caller | share |", "| --- | ---: |"]
        for who, c in rows:
            lines.append(f"| `{who}` | {pct(c, rs.samples)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description="Profile rolter (and nginx) under the benchmark's workloads.")
    p.add_argument("--workloads", default="chat,sse,large-4m", help=f"comma-separated, of {', '.join(WORKLOADS)}")
    p.add_argument("--seconds", type=int, default=10, help="perf record time per proxy and workload")
    p.add_argument("--frequency", type=int, default=999, help="samples per second")
    p.add_argument("--no-nginx", action="store_true", help="profile rolter only")
    p.add_argument("--proxy-cpus", default="1")
    p.add_argument("--client-cpus", default="0")
    p.add_argument("--rolter"), p.add_argument("--k6"), p.add_argument("--nginx")
    p.add_argument("--heap-rolter", default=str(REPO / "target/heap-profile/release/rolter"),
                   help="the build for the heap profile: `--features heap-profile` (the system "
                        "allocator, which massif follows; it cannot see jemalloc's)")
    p.add_argument("--memory-streams", type=int, default=1000,
                   help="streams held for the heap profile (valgrind massif); 0 skips it")
    p.add_argument("--keep-stacks", action="store_true", help="keep the perf script text in results/")
    p.add_argument("--results", default=str(REPO / "load-tests" / "results"))
    args = p.parse_args(argv)
    try:
        client_cpus, processes, work, stamp = perf_run_setup(args.client_cpus, "rolter-profile-")
    except SetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_SETUP
    proxy_cpus = [int(c) for c in args.proxy_cpus.split(",")]
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    sections = []
    try:
        rolter = find_rolter(args.rolter or str(REPO / "target/release/rolter"))
        k6 = find_k6(args.k6)
        nginx = None if args.no_nginx else find_nginx(args.nginx)
        if k6 is None:
            raise SetupError("k6 not found (make deps)")
        ctx = {"processes": processes, "k6": k6, "client_cpus": client_cpus, "seconds": args.seconds,
               "frequency": args.frequency, "keep_stacks": args.keep_stacks}
        for name in filter(None, args.workloads.split(",")):
            workload = WORKLOADS[name]
            engine = start_fake_llm(rolter, work, processes, client_cpus, f"engine-{name}",
                                    workload.engine_delay_ms)
            pids = [engine.process.pid]
            out = results / f"profile-{stamp:%Y%m%d-%H%M%S}-{name}"
            print(f"[{name}] rolter ...", flush=True)
            r = profile_one(Rolter(f"rolter-{name}", rolter, work, processes, proxy_cpus, [engine], pids),
                            workload, engine, ctx, out.with_name(out.name + "-rolter"))
            n = None
            if nginx:
                print(f"[{name}] nginx ...", flush=True)
                n = profile_one(Nginx(f"nginx-{name}", nginx, work, processes, proxy_cpus, [engine], pids, True),
                                workload, engine, ctx, out.with_name(out.name + "-nginx"))
            sections.append(section(workload, r, n))
            engine.process.popen.terminate()
            engine.process.wait_exit(5)
        if args.memory_streams:
            if not shutil.which("valgrind"):
                raise SetupError("valgrind not found (apt-get install valgrind), or pass --memory-streams 0")
            print(f"[memory] rolter under massif, {args.memory_streams} streams ...", flush=True)
            heap_rolter = Path(args.heap_rolter)
            if not heap_rolter.is_file():
                raise SetupError(f"{heap_rolter} is missing: `make profile-gateway` builds it "
                                 "(cargo build --release --features heap-profile --target-dir "
                                 "target/heap-profile)")
            sections.append(profile_memory.run(
                {**ctx, "rolter": heap_rolter, "work": work, "proxy_cpus": proxy_cpus},
                args.memory_streams, work,
            ))
    except SetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_SETUP
    except Interrupted:
        return EXIT_INTERRUPTED
    finally:
        processes.stop_all()
        shutil.rmtree(work, ignore_errors=True)
        for leftover in results.glob(f"profile-{stamp:%Y%m%d-%H%M%S}-*.json"):
            leftover.unlink()
        for leftover in results.glob(f"profile-{stamp:%Y%m%d-%H%M%S}-*.log"):
            leftover.unlink()
    command = "python3 load-tests/gateway_profile.py" + "".join(f" {a}" for a in argv)
    head = (
        f"# Where rolter's CPU goes, {stamp:%Y-%m-%d %H:%M} UTC\n\n"
        f"- command: `{command}`\n"
        f"- perf: `perf record -e cpu-clock -F {args.frequency} --call-graph dwarf,65528 -p <proxy pids> "
        f"-- sleep {args.seconds}` while k6 runs the workload (after a 2 s warm-up), then "
        "`perf stat -e raw_syscalls:sys_enter -e syscalls:sys_enter_<name>... -- sleep 3`; requests "
        "counted by the engine (`/fake/stats`) over the same window\n"
        f"- pinning as compare.py: proxy on core(s) {proxy_cpus}, engine + k6 on {client_cpus}; "
        "rolter: release build, 1 thread, access log off; nginx: 1 worker, the compare.py config\n"
        "- shares are of the proxy's samples (all its threads); µs = share x the CPU per request "
        "measured without sampling; `perf` costs the sampled process some time, so the shares, "
        "not the sampled µs, are what to compare\n\n"
    )
    path = results / f"profile-{stamp:%Y%m%d-%H%M%S}.md"
    path.write_text(head + "\n".join(sections))
    print(path.read_text())
    print(f"profile: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
