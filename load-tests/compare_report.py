"""The numbers of `compare.py`: per-round cells folded into one row per
workload and configuration (median of the rounds; differences and ratios
are taken within a round, then the median), the issue's targets checked
against them, and the Markdown report (one table, the verdicts, the rounds'
spread, and how, when and where it was measured)."""

from __future__ import annotations

import statistics

NGINX = "nginx"
DIRECT = "direct"
ROLTER = "rolter"
PINGORA = "pingora"



# Workloads that measure memory, not latency or throughput.
MEMORY_ROWS = ("streams-10k", "idle-10k")

def median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def cpu_us_per_unit(cell: dict) -> float | None:
    counters = cell.get("counters") or {}
    if cell["config"] == DIRECT or not cell.get("requests"):
        return None
    return counters.get("proxy_cpu_s", 0) * 1e6 / cell["requests"]


def aggregate(cells: list[dict], scenarios: list) -> list[dict]:
    """One row per (scenario, config), in the scenarios' order."""
    by_key: dict[tuple[str, str, int], dict] = {}
    for cell in cells:
        if cell.get("ok"):
            by_key[(cell["scenario"], cell["config"], cell["round"])] = cell
    rows = []
    for scenario in scenarios:
        rounds = sorted({c["round"] for c in cells if c["scenario"] == scenario.name})
        for config in scenario.configs:
            mine = [by_key.get((scenario.name, config, r)) for r in rounds]
            mine_ok = [c for c in mine if c]
            failed = [
                c for c in cells
                if c["scenario"] == scenario.name and c["config"] == config and not c.get("ok")
            ]
            row: dict = {
                "scenario": scenario.name,
                "title": scenario.title,
                "unit": scenario.unit,
                "config": config,
                "rounds": len(mine_ok),
                "failed_rounds": len(failed),
                "errors": [c.get("error") for c in failed],
            }
            if not mine_ok:
                rows.append(row)
                continue
            for key in ("rps", "p50", "p95", "p99", "requests"):
                row[key] = median([c.get(key) for c in mine_ok])
            row["cpu_us"] = median([cpu_us_per_unit(c) for c in mine_ok])
            row["peak_rss_mib"] = median(
                [c.get("peak_rss_kib", 0) / 1024 for c in mine_ok if c.get("peak_rss_kib")]
            )
            row["failures"] = sum(c.get("failures", 0) for c in mine_ok)
            row["dropped"] = sum(c.get("dropped", 0) for c in mine_ok)
            row["foreign_cores_max"] = max(
                (c.get("counters", {}).get("foreign_cores", 0) for c in mine_ok), default=0
            )
            row["proxy_busy"] = median(
                [
                    c["counters"]["proxy_cpu_s"] / c["counters"]["wall_s"]
                    for c in mine_ok
                    if c.get("counters", {}).get("wall_s") and config != DIRECT
                ]
            )
            row["per_round"] = {
                key: [c.get(key) for c in mine] for key in ("rps", "p50", "p99")
            }
            row["per_round"]["cpu_us"] = [cpu_us_per_unit(c) if c else None for c in mine]

            def paired(fn) -> float | None:
                values = []
                for r, c in zip(rounds, mine):
                    if c is None:
                        continue
                    values.append(fn(c, by_key.get((scenario.name, DIRECT, r)),
                                     by_key.get((scenario.name, NGINX, r))))
                return median([v for v in values if v is not None])

            row["added_p50"] = paired(lambda c, d, n: c["p50"] - d["p50"] if d and config != DIRECT else None)
            row["added_p99"] = paired(lambda c, d, n: c["p99"] - d["p99"] if d and config != DIRECT else None)
            row["rps_vs_nginx"] = paired(lambda c, d, n: c["rps"] / n["rps"] if n and n["rps"] else None)
            row["rps_vs_direct"] = paired(lambda c, d, n: c["rps"] / d["rps"] if d and d["rps"] else None)
            row["core_vs_nginx"] = paired(
                lambda c, d, n: cpu_us_per_unit(n) / cpu_us_per_unit(c)
                if n and cpu_us_per_unit(n) and cpu_us_per_unit(c) else None
            )
            # Extra figures some workloads have.
            for key in ("streams_at_once", "rss_per_stream_kib", "peak_rss_at_10k_kib",
                        "rss_per_connection_kib", "rss_all_idle_kib", "quiet_wakeups_per_s",
                        "idle_rss_kib", "rss_early_kib", "rss_late_kib", "stream_p99",
                        "first_event_p50", "first_event_p99", "p999", "streams",
                        "streams_completed"):
                values = [c.get(key) for c in mine_ok if c.get(key) is not None]
                if values:
                    row[key] = median(values)
            rows.append(row)
    return rows


def find(rows: list[dict], scenario: str, config: str) -> dict | None:
    for row in rows:
        if row["scenario"] == scenario and row["config"] == config and row.get("rounds"):
            return row
    return None


def targets(rows: list[dict], plan) -> list[dict]:
    """The performance targets (issue 18), each with its figures and met /
    missed / not measured."""
    out = []

    def add(name: str, met: bool | None, figures: str) -> None:
        out.append({"target": name, "met": met, "figures": figures})

    r, n, p = (find(rows, "sat-chat", c) for c in (ROLTER, NGINX, PINGORA))
    if r and n and r.get("cpu_us") and n.get("cpu_us"):
        ratio = r["cpu_us"] / n["cpu_us"]
        add(
            "proxy CPU per chat request at saturation at most 1.5x nginx's",
            ratio <= 1.5,
            f"rolter {r['cpu_us']:.1f} µs vs nginx {n['cpu_us']:.1f} µs ({ratio:.2f}x); "
            f"requests/s per core {1e6 / r['cpu_us']:,.0f} vs {1e6 / n['cpu_us']:,.0f}",
        )
    else:
        add("proxy CPU per chat request at saturation at most 1.5x nginx's", None, "not measured")
    if r and p and r.get("cpu_us") and p.get("cpu_us"):
        add(
            "proxy CPU per chat request below the bare Pingora passthrough's",
            r["cpu_us"] < p["cpu_us"],
            f"rolter {r['cpu_us']:.1f} µs vs bare Pingora 0.9.1 {p['cpu_us']:.1f} µs "
            f"({r['cpu_us'] / p['cpu_us']:.2f}x)",
        )
    else:
        add("proxy CPU per chat request below the bare Pingora passthrough's", None, "not measured")

    r, n, p = (find(rows, "sat-sse", c) for c in (ROLTER, NGINX, PINGORA))
    if r and n and r.get("cpu_us") and n.get("cpu_us"):
        chunks = plan.sat_chunks
        ratio = r["cpu_us"] / n["cpu_us"]
        add(
            "proxy CPU per SSE chunk at most 1.2x nginx's",
            ratio <= 1.2,
            f"{chunks}-event streams at saturation: rolter {r['cpu_us'] / chunks:.2f} µs per chunk "
            f"({r['cpu_us']:.1f} per stream) vs nginx {n['cpu_us'] / chunks:.2f} ({n['cpu_us']:.1f}), "
            f"{ratio:.2f}x"
            + (f"; bare Pingora {p['cpu_us'] / chunks:.2f} ({p['cpu_us']:.1f})" if p and p.get("cpu_us") else ""),
        )
    else:
        add("proxy CPU per SSE chunk at most 1.2x nginx's", None, "not measured")

    r, n = find(rows, "streams-10k", ROLTER), find(rows, "streams-10k", NGINX)
    if r and r.get("rss_per_stream_kib") is not None and (r.get("streams_at_once") or 0) >= 1000:
        add(
            "an open stream at most 24 KiB",
            r["rss_per_stream_kib"] <= 24,
            f"rolter {r['rss_per_stream_kib']:.1f} KiB per stream over idle with "
            f"{int(r['streams_at_once']):,} open (peak RSS {r['peak_rss_mib']:.1f} MiB)"
            + (f"; nginx {n['rss_per_stream_kib']:.1f} KiB" if n and n.get("rss_per_stream_kib") is not None else ""),
        )
    else:
        add("an open stream at most 24 KiB", None, "not measured")

    # The benchmark's prompt of plain words, and a document's, whose escapes
    # the gateway decodes, as a string and as a text part: the target holds
    # for each.
    for scenario, what in (
        ("large-4m", "a 4 MiB request"),
        ("large-4m-doc", "a 4 MiB document"),
        ("large-4m-parts", "a 4 MiB document as a text part"),
    ):
        r, n = find(rows, scenario, ROLTER), find(rows, scenario, NGINX)
        if r and n and r.get("added_p50") is not None and r.get("cpu_us") and n.get("cpu_us"):
            cpu_ratio = r["cpu_us"] / n["cpu_us"]
            add(
                f"{what}: proxy CPU at most 2x nginx's",
                cpu_ratio <= 2.0,
                f"rolter {r['cpu_us'] / 1000:.2f} ms vs nginx {n['cpu_us'] / 1000:.2f} ms ({cpu_ratio:.2f}x)",
            )
            add(
                f"{what}: time added over direct at most nginx's + 1 ms",
                r["added_p50"] <= n["added_p50"] + 1.0,
                f"added p50 rolter {fmt_ms(r['added_p50'], signed=True)} vs nginx "
                f"{fmt_ms(n['added_p50'], signed=True)}; whole request p50 {fmt_ms(r['p50'])} vs {fmt_ms(n['p50'])}",
            )
        elif scenario == "large-4m":
            add(f"{what}: proxy CPU at most 2x nginx's", None, "not measured")
            add(f"{what}: time added over direct at most nginx's + 1 ms", None, "not measured")

    r, n = find(rows, "latency", ROLTER), find(rows, "latency", NGINX)
    if r and n and r.get("added_p50") is not None:
        # The framework's floor beside it, as for the CPU targets.
        p = find(rows, "latency", PINGORA)
        floor = (
            f"; bare Pingora {fmt_ms(p['added_p50'], signed=True)} / {fmt_ms(p['added_p99'], signed=True)}"
            if p and p.get("added_p50") is not None else ""
        )
        add(
            f"added latency at {plan.rate:,} req/s: p50 and p99 no worse than nginx's",
            r["added_p50"] <= n["added_p50"] and r["added_p99"] <= n["added_p99"],
            f"added p50 rolter {fmt_ms(r['added_p50'], signed=True)} vs nginx {fmt_ms(n['added_p50'], signed=True)}; "
            f"added p99 rolter {fmt_ms(r['added_p99'], signed=True)} vs nginx {fmt_ms(n['added_p99'], signed=True)}"
            + floor
            + (f"; {r['dropped'] + n['dropped']} arrivals dropped by the generator" if r.get("dropped") or n.get("dropped") else ""),
        )
    else:
        add("added latency at a fixed rate no worse than nginx's", None, "not measured")
    return out


# --- formatting -----------------------------------------------------------------


def fmt_ms(ms: float | None, signed: bool = False) -> str:
    """Milliseconds as `0.29 ms` / `152 µs`, with a sign when asked."""
    if ms is None:
        return "—"
    sign = ("+" if ms >= 0 else "−") if signed else ("−" if ms < 0 else "")
    v = abs(ms)
    if v < 1:
        return f"{sign}{v * 1000:.0f} µs"
    if v < 100:
        return f"{sign}{v:.2f} ms"
    return f"{sign}{v:,.0f} ms"


def fmt_num(v: float | None, digits: int = 0) -> str:
    return "—" if v is None else f"{v:,.{digits}f}"


def fmt_ratio(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}x"


def notes(row: dict, plan) -> str:
    out = []
    if row.get("failed_rounds"):
        out.append(f"**{row['failed_rounds']} round(s) failed**")
    if row.get("failures"):
        out.append(f"**{row['failures']} failed requests**")
    if row.get("dropped"):
        out.append(f"{row['dropped']} dropped iterations")
    if row["scenario"] == "sse" and row.get("cpu_us"):
        out.append(f"{row['cpu_us'] / (plan.sse_tokens + 3):.1f} CPU µs per chunk")
    if row["scenario"] == "sat-sse" and row.get("cpu_us"):
        out.append(f"{row['cpu_us'] / plan.sat_chunks:.2f} CPU µs per chunk")
    if row["scenario"] == "chunks" and row.get("first_event_p50") is not None:
        out.append(f"first event p50 {fmt_ms(row['first_event_p50'])}")
    if row["scenario"] == "streams-10k":
        held = row.get("streams_at_once")
        out.append(f"{int(held):,} open at once" if held else "never all open at once")
        if row.get("rss_per_stream_kib") is not None:
            out.append(f"{row['rss_per_stream_kib']:.1f} KiB/stream over idle")
    if row["scenario"] == "idle-10k" and row.get("rss_per_connection_kib") is not None:
        out.append(f"{row['rss_per_connection_kib']:.1f} KiB per idle connection")
    if row["scenario"] == "idle-10k" and row.get("quiet_wakeups_per_s") is not None:
        out.append(f"{row['quiet_wakeups_per_s']:.1f} wakeups/s with no traffic")
    if row["scenario"] == "soak":
        if row.get("rss_early_kib"):
            growth = (row["rss_late_kib"] - row["rss_early_kib"]) / 1024
            out.append(f"RSS {row['rss_early_kib'] / 1024:.1f} → {row['rss_late_kib'] / 1024:.1f} MiB ({growth:+.1f})")
        if row.get("stream_p99"):
            out.append(f"stream p99 {row['stream_p99'] / 1000:.2f} s")
    if row.get("proxy_busy") is not None and row["scenario"] in ("throughput", "latency", "sat-chat", "sat-sse"):
        out.append(f"proxy core {row['proxy_busy']:.0%} busy")
    if (row.get("foreign_cores_max") or 0) > 0.05:
        out.append(f"other work used {row['foreign_cores_max']:.2f} cores")
    return "; ".join(out)


def table(rows: list[dict], plan) -> str:
    head = (
        "| workload | config | req/s | p50 | p95 | p99 | added p50 / p99 | req/s vs nginx | "
        "req/s vs direct | proxy CPU µs/req | req/s per proxy core (vs nginx) | peak RSS MiB | notes |\n"
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n"
    )
    lines = []
    last = None
    for row in rows:
        title = row["title"] if row["scenario"] != last else ""
        last = row["scenario"]
        if not row.get("rounds"):
            lines.append(f"| {title} | {row['config']} | failed: {'; '.join(map(str, row['errors']))[:120]} |" + " |" * 10)
            continue
        hold = row["scenario"] in MEMORY_ROWS
        added = (
            "—" if row.get("added_p50") is None
            else f"{fmt_ms(row['added_p50'], True)} / {fmt_ms(row['added_p99'], True)}"
        )
        per_core = "—"
        if row.get("cpu_us"):
            per_core = f"{1e6 / row['cpu_us']:,.0f}"
            if row.get("core_vs_nginx") and row["config"] != NGINX:
                per_core += f" ({row['core_vs_nginx']:.2f}x)"
        unit = {"stream": "streams/s", "chunk": "chunks/s"}.get(row["unit"], "")
        rps = "—" if hold else fmt_num(row.get("rps"), 0 if (row.get("rps") or 0) >= 100 else 1) + (f" {unit}" if unit else "")
        lines.append(
            "| " + " | ".join([
                title,
                row["config"],
                rps,
                "—" if hold else fmt_ms(row.get("p50")),
                "—" if hold else fmt_ms(row.get("p95")),
                "—" if hold else fmt_ms(row.get("p99")),
                added,
                "—" if hold or row["config"] == NGINX else fmt_ratio(row.get("rps_vs_nginx")),
                "—" if hold or row["config"] == DIRECT else fmt_ratio(row.get("rps_vs_direct")),
                fmt_num(row.get("cpu_us"), 1 if (row.get("cpu_us") or 0) < 1000 else 0),
                per_core if row["unit"] == "request" else "—",
                fmt_num(row.get("peak_rss_mib"), 1) if row.get("peak_rss_mib") else "—",
                notes(row, plan),
            ]) + " |"
        )
    return head + "\n".join(lines) + "\n"


def spread(rows: list[dict]) -> str:
    """Round-by-round values of the headline numbers, to judge the noise."""
    out = ["| workload | config | req/s by round | p50 by round | p99 by round | CPU µs/req by round |",
           "| --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        rounds = row.get("per_round")
        if not rounds or len(rounds["rps"]) < 2 or row["scenario"] in MEMORY_ROWS:
            continue
        out.append(
            f"| {row['scenario']} | {row['config']} | "
            + " / ".join(fmt_num(v) for v in rounds["rps"]) + " | "
            + " / ".join(fmt_ms(v) for v in rounds["p50"]) + " | "
            + " / ".join(fmt_ms(v) for v in rounds["p99"]) + " | "
            + " / ".join(fmt_num(v, 1) for v in rounds["cpu_us"]) + " |"
        )
    return "\n".join(out) + "\n" if len(out) > 2 else ""


def markdown(run: dict, rows: list[dict], verdicts: list[dict], plan) -> str:
    env = run["environment"]
    lines = [
        f"# Gateway comparison, {run['started_utc']}",
        "",
        f"- command: `{run['command']}`",
        f"- machine: {env['cpu_model']}, {env['cores']} cores ({env['virtualization']}), "
        f"{env['memory_gib']:.0f} GiB, Linux {env['kernel']}",
        f"- pinning: proxy on core(s) {run['proxy_cpus']}, engines + load generator + runner on "
        f"core(s) {run['client_cpus']}; proxy threads / nginx workers: {len(run['proxy_cpus'])}",
        f"- rolter {env['rolter_commit']} ({env['rolter_binary']}), {env['nginx']}, {env['k6']}",
        f"- load average before: {run['load_before']}, after: {run['load_after']}; "
        f"most CPU used by other processes during a measurement: {run['foreign_cores_max']:.2f} cores"
        + (f" (**{run['busy_cells']} measurements had other work above 0.05 cores**)" if run["busy_cells"] else ""),
        f"- {plan.rounds} round(s), configurations alternated (order rotated every round); each figure is "
        "the median of the rounds; added latency and ratios are taken within a round",
        f"- took {run['elapsed_s'] / 60:.1f} min",
        "",
        table(rows, plan),
        "## Targets",
        "",
    ]
    for v in verdicts:
        mark = {True: "met", False: "**missed**", None: "not measured"}[v["met"]]
        lines.append(f"- {v['target']}: {mark}. {v['figures']}.")
    spread_text = spread(rows)
    if spread_text:
        lines += ["", "## Rounds", "", spread_text]
    lines += ["", "## How to read it", "", HOW_TO_READ.strip(), ""]
    if run.get("notes"):
        lines += ["## Notes", ""] + [f"- {n}" for n in run["notes"]] + [""]
    return "\n".join(lines)


HOW_TO_READ = """
- **req/s**: completed units per second (requests; streams for the SSE
  workloads; chunks for the chunk-delay one), from k6's `http_reqs` or the
  client. Closed-loop workloads are limited by the core the load generator
  shares with the engine, so **req/s per proxy core** (1 / proxy CPU per
  request) is the per-core capacity; **proxy core busy** says how far from
  saturation the proxy ran.
- **p50 / p95 / p99**: k6's `http_req_duration` (request sent to last byte
  received; a whole stream for SSE); for the chunk workload, the one-way
  delay of each SSE chunk from the engine's write to the client's read.
- **added**: the configuration's percentile minus direct's in the same round.
- **proxy CPU µs/req**: utime + stime of the proxy's processes (rolter; nginx
  master + worker) over the measurement, from `/proc/<pid>/stat`, divided by
  the units completed. SSE: per stream (the note gives it per chunk).
- **saturation rows** (`sat-*`): wrk, one thread, closed loop; the proxy's
  one core is busy (its note says how busy) while the upstream, which costs
  next to nothing, and wrk share the other. `pingora` is a passthrough built
  from the published Pingora 0.9.1 with the gateway's Pingora settings: the
  framework's floor. wrk reports p90, shown in the p95 column.
- **peak RSS**: `VmHWM` of the proxy's processes (summed for nginx), in a
  process started fresh for each measurement (warm-up included).
"""
