#!/usr/bin/env python3
"""Where a proxy's added latency goes at a fixed rate, leg by leg, next to
nginx's and the bare Pingora's: the profile behind compare.py's fixed-rate
rows.

A proxied request crosses the proxy's core twice: the client's request in,
out to the engine (leg 1); the engine's answer in, out to the client (leg
2). Each leg starts with the proxy's thread woken from idle and ends with
the write that hands the bytes on. For each proxy (pinned and configured as
in compare.py: proxy on core 1, fake-llm and k6 on core 0, k6 at RATE
chat completions per second), two trace windows while k6 drives it:

  1. `perf record -C <proxy core> -e sched:sched_switch -e raw_syscalls:*`:
     every time the proxy's thread runs from idle, the time from switching
     in to the first read, from the read to the write that ends the leg,
     and the write itself; medians per leg, told apart by what the write
     wrote (the engine's request is shorter than a 16-token answer);
  2. `perf record -a -e sched:sched_waking -e sched:sched_switch -e
     net:net_dev_queue -e net:netif_receive_skb`: for each wakeup of the
     proxy's thread, the time from the packet that woke it (sent on the
     other core) to its delivery, to the wakeup, and to the thread running.

The tracepoints slow every system call and switch they record, so traced
times run above untraced ones (a proxy that makes more calls is slowed
more): read the proxies against each other within one run.
Output: a table on stdout and load-tests/results/legs-<time>.md.
Needs `perf` (Debian `linux-perf`) and root or perf_event_paranoid <= 1.
Python 3.11, standard library only; builds nothing (`make bench-gateway`
builds what it runs).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from compare_targets import (
    BarePingora,
    Nginx,
    Rolter,
    bench_server,
    find_nginx,
    pinned,
    start_fake_llm,
)
from fleet import REPO, SetupError
from gateway_profile import perf_run_setup, start_k6_load
from run import EXIT_INTERRUPTED, EXIT_SETUP, Interrupted, find_k6, find_rolter

READS = {"read", "readv", "recvfrom", "recvmsg"}
WRITES = {"write", "writev", "sendto", "sendmsg"}
WAITS = {"epoll_wait", "epoll_pwait", "epoll_pwait2"}
# x86_64 numbers of the calls a leg is told by.
SYSCALLS = {0: "read", 1: "write", 19: "readv", 20: "writev", 39: "getpid", 44: "sendto",
            45: "recvfrom", 46: "sendmsg", 47: "recvmsg", 55: "getsockopt", 232: "epoll_wait",
            281: "epoll_pwait", 441: "epoll_pwait2"}
EVENT = re.compile(r"^\s*(.+?)\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+([\w:]+):\s*(.*)$")


def events(text: str):
    for line in text.splitlines():
        m = EVENT.match(line)
        if m:
            yield int(m.group(2)), int(m.group(3)), float(m.group(4)), m.group(5), m.group(6)


def median_us(values: list[float]) -> float:
    return statistics.median(values) * 1e6 if values else float("nan")


def activations(text: str, tids: set[int]) -> list[dict]:
    """Each run of a proxy thread on the traced core: its system calls,
    entered and left, with their times."""
    done, current = [], None
    for tid, _cpu, t, event, rest in events(text):
        if event == "sched:sched_switch":
            m = re.search(r"prev_pid=(\d+).*next_pid=(\d+)", rest)
            prev, following = int(m.group(1)), int(m.group(2))
            if current and prev == current["tid"]:
                current["end"] = t
                done.append(current)
                current = None
            if following in tids:
                current = {"tid": following, "start": t, "calls": []}
        elif current and tid == current["tid"]:
            m = re.search(r"NR (\d+)(?: = (-?\d+))?", rest)
            if m:
                name = SYSCALLS.get(int(m.group(1)), m.group(1))
                returned = int(m.group(2)) if m.group(2) else None
                current["calls"].append((event.endswith("enter"), name, t, returned))
    return done


def legs(runs: list[dict]) -> dict[str, dict]:
    """Median times of the activations that read, then wrote: leg 1 when
    the write went to the engine, leg 2 when to the client."""
    timed = []
    for run in runs:
        calls = run["calls"]
        entered = [name for enters, name, _, _ in calls if enters]
        if not entered or entered[0] not in READS:
            continue
        write = next(((name, t) for enters, name, t, _ in calls if enters and name in WRITES), None)
        if write is None:
            continue
        woke = next((t for enters, name, t, _ in calls if not enters and name in WAITS), run["start"])
        read_in = next(t for enters, name, t, _ in calls if enters and name in READS)
        read_out = next((t for enters, name, t, _ in calls if not enters and name in READS), read_in)
        write_out, written = next(((t, n) for enters, name, t, n in calls
                                   if not enters and name == write[0] and t > write[1]), (write[1], 0))
        timed.append((written or 0, (woke - run["start"], read_in - woke, read_out - read_in,
                                     write[1] - read_out, write_out - write[1], write[1] - run["start"])))
    # Two sizes of write: the engine's request, the client's answer.
    sizes = sorted(written for written, _ in timed)
    split = (sizes[len(sizes) // 10] + sizes[len(sizes) * 9 // 10]) / 2 if sizes else 0
    by_leg: dict[str, list[tuple]] = {"leg 1 (request to engine)": [], "leg 2 (answer to client)": []}
    for written, times in timed:
        by_leg["leg 1 (request to engine)" if written < split else "leg 2 (answer to client)"].append(times)
    return {leg: {"n": len(rows), **dict(zip(
        ("switch to wait's return", "to the read", "read", "read to write", "write", "switch to write"),
        (median_us(list(col)) for col in zip(*rows)) if rows else [float("nan")] * 6))}
        for leg, rows in by_leg.items()}


def wakeups(text: str, tids: set[int], core: int) -> dict:
    """For each time a proxy thread ran from idle on its core: the packet
    sent to it, that packet's delivery, the wakeup, the switch."""
    last: dict[str, float] = {}
    waking: dict[int, tuple] = {}
    rows = []
    for _tid, cpu, t, event, rest in events(text):
        if event == "net:net_dev_queue":
            last["queued"] = t
        elif event == "net:netif_receive_skb":
            last["delivered"] = t
        elif event == "sched:sched_waking":
            pid = int(re.search(r"pid=(\d+)", rest).group(1))
            if pid in tids:
                waking[pid] = (t, last.get("queued"), last.get("delivered"))
        elif event == "sched:sched_switch" and cpu == core:
            m = re.search(r"prev_pid=(\d+).*next_pid=(\d+)", rest)
            prev, following = int(m.group(1)), int(m.group(2))
            if prev == 0 and following in waking:
                woken, queued, delivered = waking.pop(following)
                if queued and delivered and t - queued < 0.001:
                    rows.append((delivered - queued, woken - delivered, t - woken))
    columns = list(zip(*rows)) or [[], [], []]
    return {"n": len(rows), "packet to delivery": median_us(list(columns[0])),
            "delivery to wakeup": median_us(list(columns[1])),
            "wakeup to running": median_us(list(columns[2]))}


def trace(proxy, ctx: dict, name: str) -> dict:
    proxy.start()
    tids = {int(t) for pid in proxy.meter.proxy_pids() for t in os.listdir(f"/proc/{pid}/task")}
    work: Path = ctx["work"]
    seconds = ctx["seconds"]
    load = start_k6_load(ctx, proxy.url, {"MODE": "latency", "RATE": ctx["rate"], "CHAT_TOKENS": 16},
                         name, work / name, 3, 2 * seconds + 6)
    summary = (work / name).with_suffix(".k6.json")
    time.sleep(2)
    core = ctx["proxy_cpu"]
    windows = {
        "calls": ["-C", str(core), "-e", "sched:sched_switch", "-e", "raw_syscalls:sys_enter",
                  "-e", "raw_syscalls:sys_exit"],
        "wakeups": ["-a", "-e", "sched:sched_waking", "-e", "sched:sched_switch", "-e",
                    "net:net_dev_queue", "-e", "net:netif_receive_skb"],
    }
    texts = {}
    for window, selection in windows.items():
        data = work / f"{name}-{window}.data"
        perf = subprocess.run(pinned(ctx["client_cpus"], ["perf", "record", "-q", *selection, "-o", str(data),
                                                          "--", "sleep", str(seconds)]),
                              capture_output=True, timeout=seconds + 60)
        if perf.returncode != 0:
            raise SetupError(f"perf record failed: {perf.stderr.decode()[-800:]}")
        texts[window] = subprocess.run(["perf", "script", "--ns", "-i", str(data), "-F",
                                        "comm,tid,cpu,time,event,trace"],
                                       capture_output=True, text=True, timeout=600).stdout
        data.unlink()
    load.wait_exit(2 * seconds + 60)
    proxy.stop()
    k6_p50 = None
    if summary.exists():
        duration = json.loads(summary.read_text())["metrics"]["http_req_duration"]
        k6_p50 = duration.get("values", duration)["med"] * 1000
    return {"legs": legs(activations(texts["calls"], tids)),
            "wakeups": wakeups(texts["wakeups"], tids, core), "k6_p50_us": k6_p50}


def report(results: dict[str, dict], ctx: dict, command: str, stamp: dt.datetime) -> str:
    names = list(results)
    lines = [f"# Where the fixed-rate latency goes, {stamp:%Y-%m-%d %H:%M} UTC", "",
             f"- command: `{command}`",
             f"- k6 at {ctx['rate']:,} chat completions/s (compare.py's `latency` workload); proxy on core "
             f"{ctx['proxy_cpu']}, fake-llm and k6 on {ctx['client_cpus']}; two {ctx['seconds']} s trace "
             "windows per proxy (calls on the proxy's core, then wakeups on every core)",
             f"- machine: {os.uname().release}, {os.cpu_count()} cores; medians in µs", "",
             "| | " + " | ".join(names) + " |", "| --- |" + " ---: |" * len(names)]
    row = lambda label, values: lines.append(f"| {label} | " + " | ".join(values) + " |")
    row("k6 p50 (whole request)", [f"{r['k6_p50_us']:.0f}" if r["k6_p50_us"] else "—" for r in results.values()])
    for key in ("packet to delivery", "delivery to wakeup", "wakeup to running"):
        row(f"proxy woken: {key}", [f"{r['wakeups'][key]:.1f}" for r in results.values()])
    for leg in next(iter(results.values()))["legs"]:
        for key in ("switch to wait's return", "to the read", "read", "read to write", "write",
                    "switch to write"):
            row(f"{leg}: {key}", [f"{r['legs'][leg][key]:.1f}" for r in results.values()])
        row(f"{leg}: activations", [f"{r['legs'][leg]['n']:,}" for r in results.values()])
    lines += ["", "- **proxy woken**: from the packet that wakes the proxy's thread (queued on the "
              "sending core) to its delivery, to the thread's wakeup, to the thread running on its core: "
              "the last is the idle core's way back (a halted virtual CPU, on this kind of machine)",
              "- **switch to write**: the proxy's own time on a leg's critical path, from running to the "
              "system call that hands the bytes on (its parts: the return from the event wait, the time "
              "to the read, the read, the work from the read to the write)",
              "- **write**: the system call that hands the bytes on; the receiver is woken inside it"]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description="Where the fixed-rate latency goes, leg by leg.")
    p.add_argument("--proxies", default="nginx,pingora,rolter", help="comma-separated: nginx, pingora, rolter")
    p.add_argument("--rate", type=int, default=1000, help="chat completions per second")
    p.add_argument("--seconds", type=int, default=3, help="length of each trace window")
    p.add_argument("--proxy-cpu", type=int, default=1)
    p.add_argument("--client-cpus", default="0")
    p.add_argument("--rolter"), p.add_argument("--k6"), p.add_argument("--nginx")
    p.add_argument("--results", default=str(REPO / "load-tests" / "results"))
    args = p.parse_args(argv)
    try:
        client_cpus, processes, work, stamp = perf_run_setup(args.client_cpus, "rolter-legs-")
    except SetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_SETUP
    results = {}
    try:
        rolter = find_rolter(args.rolter or str(REPO / "target/pgo/rolter"))
        k6 = find_k6(args.k6)
        if k6 is None:
            raise SetupError("k6 not found (make deps)")
        ctx = {"processes": processes, "k6": k6, "client_cpus": client_cpus, "proxy_cpu": args.proxy_cpu,
               "seconds": args.seconds, "rate": args.rate, "work": work}
        engine = start_fake_llm(rolter, work, processes, client_cpus, "engine", 0)
        engines, pids = [engine], [engine.process.pid]
        for name in filter(None, args.proxies.split(",")):
            proxy = {
                "nginx": lambda: Nginx("nginx", find_nginx(args.nginx), work, processes, [args.proxy_cpu],
                                       engines, pids, True),
                "pingora": lambda: BarePingora("pingora", bench_server("bare-pingora"), work, processes,
                                               [args.proxy_cpu], engines, pids),
                "rolter": lambda: Rolter("rolter", rolter, work, processes, [args.proxy_cpu], engines, pids),
            }[name]()
            print(f"[{name}] ...", flush=True)
            results[name] = trace(proxy, ctx, name)
    except SetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_SETUP
    except Interrupted:
        return EXIT_INTERRUPTED
    finally:
        processes.stop_all()
        shutil.rmtree(work, ignore_errors=True)
    text = report(results, ctx, "python3 load-tests/latency_legs.py" + "".join(f" {a}" for a in argv), stamp)
    out = Path(args.results) / f"legs-{stamp:%Y%m%d-%H%M%S}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
