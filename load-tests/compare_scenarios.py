"""The workloads of `compare.py` and how one of them is measured against one
configuration (a "cell"): start the proxy, warm it up with the same
workload, read the counters, run the measurement, read them again, stop the
proxy. Each workload returns the same few numbers (requests, requests/s,
latency percentiles, failures) so the report can put them in one table.

  throughput  k6 `bench.js` MODE=throughput: closed loop, non-streaming chat.
  latency     k6 MODE=latency: fixed arrival rate (1,000/s, which the
              generator's core sustains for every configuration), non-streaming;
              the bare Pingora passthrough too, the framework's floor.
  sse         k6 MODE=stream: many concurrent long SSE streams (fake-llm,
              50 ms per token); the unit is a stream.
  chunks      `sse_clients.py chunks` against `sse_stamp_engine.py`: the
              one-way delay of every SSE chunk; the unit is a chunk.
  large-256k, large-4m
              k6 MODE=large, one request at a time, so the time per request
              is the body's trip and nothing queues.
  large-4m-doc
              the same with a document's lines for a prompt: its JSON has a
              `\n` or `\"` escape every ~13 bytes, as a pasted file has.
  large-4m-parts
              the document sent as one text part of a content list, as the
              `openai` SDK's typed content sends it.
  streams-10k `sse_clients.py hold`: 10,000 streams open at once (or as many
              as the descriptor limit allows), the proxy's memory at the peak.
  idle-10k    first 5 s with no traffic (the proxy's wakeups a second), then
              `sse_clients.py idle`: as many keep-alive connections, each
              idle after one short stream; the proxy's memory per connection.
  soak        k6 `steady.js` (chat at a fixed rate + long streams) for a
              bounded time, once per proxy: errors, latency, memory growth.
  sat-chat, sat-sse
              saturation: wrk (`wrk_chat.lua`) closed loop with enough
              connections to keep the proxy's one core busy, against an
              upstream that costs next to nothing (nginx `return 200`; the
              Rust `sse-upstream` for a stream of `sat_chunks` events); nginx,
              the bare Pingora passthrough and rolter: proxy CPU per request
              and requests/s per core.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Callable

from compare_targets import Target, pinned, window
from fleet import Processes, SetupError

HERE = Path(__file__).resolve().parent
BENCH_JS = HERE / "bench.js"
WRK_SCRIPT = HERE / "wrk_chat.lua"
STEADY_JS = HERE / "steady.js"
SSE_CLIENTS = HERE / "sse_clients.py"
PYTHON = os.environ.get("PYTHON", "python3")
# The large bodies run a few bytes past their round size: a body whose
# length is a multiple of 64 ends on a whole block of rolter's prescan
# index, which hid a slow path for the prompt's closing quote in a partial
# last block (what nearly every real body has).
ODD_TAIL = 29


@dataclasses.dataclass
class Plan:
    """Every knob of a run; `quick()` and `full()` are the two presets."""

    rounds: int
    warmup_s: float
    duration_s: float  # throughput, latency, large bodies
    vus: int  # throughput: requests in flight
    rate: int  # latency: arrivals per second
    chat_tokens: int
    sse_streams: int
    sse_tokens: int
    sse_token_delay_ms: int
    sse_duration_s: float
    chunk_streams: int
    chunk_tokens: int
    chunk_interval_ms: float
    chunk_duration_s: float
    large_sizes: tuple[int, ...]
    hold_streams: int
    hold_tokens: int
    hold_token_delay_ms: int
    hold_ramp: int
    soak_s: int
    soak_rate: int
    soak_streams: int
    variants: bool  # nginx with request buffering off, rolter over 3 targets
    sat_connections: int  # wrk's connections in the saturation rows
    sat_duration_s: float
    sat_chunks: int  # events of the saturation rows' stream

    @staticmethod
    def full() -> "Plan":
        return Plan(
            rounds=3, warmup_s=2, duration_s=8, vus=32, rate=1000, chat_tokens=16,
            sse_streams=1000, sse_tokens=80, sse_token_delay_ms=50, sse_duration_s=8,
            chunk_streams=100, chunk_tokens=50, chunk_interval_ms=20, chunk_duration_s=8,
            large_sizes=(262144, 4194304),
            hold_streams=10000, hold_tokens=12, hold_token_delay_ms=1000, hold_ramp=2000,
            soak_s=90, soak_rate=300, soak_streams=100, variants=True,
            sat_connections=32, sat_duration_s=8, sat_chunks=20,
        )

    @staticmethod
    def quick() -> "Plan":
        return Plan(
            rounds=1, warmup_s=1, duration_s=3, vus=32, rate=1000, chat_tokens=16,
            sse_streams=200, sse_tokens=30, sse_token_delay_ms=50, sse_duration_s=3,
            chunk_streams=50, chunk_tokens=50, chunk_interval_ms=20, chunk_duration_s=3,
            large_sizes=(262144, 4194304),
            hold_streams=1000, hold_tokens=5, hold_token_delay_ms=1000, hold_ramp=2000,
            soak_s=6, soak_rate=200, soak_streams=20, variants=False,
            sat_connections=32, sat_duration_s=3, sat_chunks=20,
        )


@dataclasses.dataclass
class Scenario:
    name: str
    title: str  # what one row of the table measured
    unit: str  # what "requests" counts: request, stream, chunk
    engine: str  # which engine set the configurations point at
    configs: list[str]
    measure: Callable[["Cell"], dict]
    every_round: bool = True
    latency_unit: str = "ms"


@dataclasses.dataclass
class Cell:
    """One scenario against one configuration in one round."""

    scenario: Scenario
    target: Target
    plan: Plan
    k6: Path
    work: Path
    processes: Processes
    client_cpus: list[int]
    round: int


# --- running the load generators ------------------------------------------------


def run_k6(cell: Cell, script: Path, env: dict[str, str], seconds: float, tag: str) -> dict:
    """Runs k6 on the client cores; returns its summary (JSON)."""
    summary = cell.work / f"k6-{tag}.json"
    summary.unlink(missing_ok=True)
    full_env = dict(
        os.environ, TARGET_URL=cell.target.url, SUMMARY_PATH=str(summary),
        K6_NO_USAGE_REPORT="true", **env,
    )
    process = cell.processes.spawn(
        f"k6-{tag}",
        pinned(cell.client_cpus, [str(cell.k6), "run", "--quiet", "--no-color", "--address", "", str(script)]),
        cell.work / f"k6-{tag}.log",
        env=full_env,
        stop_signal=signal.SIGINT,
        stop_wait_s=10,
    )
    code = process.wait_exit(seconds + 90)
    if code is None:
        process.popen.kill()
        process.wait_exit(5)
        raise MeasurementError(f"k6 ({tag}) still running {seconds + 90:.0f} s after it started")
    if not summary.exists():
        raise MeasurementError(
            f"k6 ({tag}) exited {code} without a summary:\n" + "\n".join(process.log_tail(15))
        )
    data = json.loads(summary.read_text())
    data["exit_code"] = code
    return data


def run_client(cell: Cell, args: list[str], seconds: float, tag: str, on_line=None) -> dict:
    """Runs `sse_clients.py` on the client cores; returns its JSON line.
    `on_line` sees every other line of its output as it comes."""
    out = cell.work / f"client-{tag}.out"
    out.unlink(missing_ok=True)
    process = cell.processes.spawn(
        f"client-{tag}",
        pinned(cell.client_cpus, [PYTHON, str(SSE_CLIENTS), *args]),
        cell.work / f"client-{tag}.log",
        stdout=out,
    )
    deadline = time.monotonic() + seconds + 60
    seen = 0
    while process.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
        if on_line:
            lines = out.read_text(errors="replace").splitlines() if out.exists() else []
            for line in lines[seen:]:
                on_line(line)
            seen = len(lines)
    if process.alive():
        process.popen.kill()
        process.wait_exit(5)
        raise MeasurementError(f"client ({tag}) still running after {seconds + 60:.0f} s")
    lines = out.read_text(errors="replace").splitlines() if out.exists() else []
    if on_line:
        for line in lines[seen:]:
            on_line(line)
    for line in reversed(lines):
        if line.startswith("{"):
            return json.loads(line)
    raise MeasurementError(
        f"client ({tag}) printed no result:\n" + "\n".join(process.log_tail(15))
    )


def run_wrk(cell: Cell, stream: bool, seconds: float, tag: str) -> dict:
    """Runs wrk with `wrk_chat.lua` on the client cores (one thread,
    `sat_connections` connections); returns the script's JSON line."""
    out = cell.work / f"wrk-{tag}.out"
    out.unlink(missing_ok=True)
    process = cell.processes.spawn(
        f"wrk-{tag}",
        pinned(cell.client_cpus, [
            "wrk", "-t1", f"-c{cell.plan.sat_connections}", f"-d{seconds:g}s", "--timeout", "10s",
            "-s", str(WRK_SCRIPT), cell.target.url,
        ]),
        cell.work / f"wrk-{tag}.log",
        env=dict(os.environ, WRK_MODEL="chat", WRK_STREAM="1" if stream else "0"),
        stdout=out,
    )
    code = process.wait_exit(seconds + 30)
    if code is None:
        process.popen.kill()
        process.wait_exit(5)
        raise MeasurementError(f"wrk ({tag}) still running {seconds + 30:.0f} s after it started")
    lines = out.read_text(errors="replace").splitlines() if out.exists() else []
    for line in reversed(lines):
        if line.startswith("{"):
            return json.loads(line)
    raise MeasurementError(f"wrk ({tag}) exited {code} without a result:\n" + "\n".join(process.log_tail(15)))


def measure_saturation(stream: bool):
    """A cell measured by one wrk run after a warm-up run: the proxy's CPU
    per request at saturation (a stream counts as one request here; the
    report divides by its chunks)."""

    def measure(cell: Cell) -> dict:
        plan = cell.plan
        tag = f"{cell.scenario.name}-{cell.target.name}-r{cell.round}"
        run_wrk(cell, stream, plan.warmup_s, tag + "-warm")
        before = cell.target.meter.read()
        result = run_wrk(cell, stream, plan.sat_duration_s, tag)
        after = cell.target.meter.read()
        seconds = result["duration_us"] / 1e6
        failures = sum(result[k] for k in ("connect_errors", "read_errors", "write_errors",
                                           "timeouts", "non_2xx"))
        return {
            "requests": result["requests"],
            "rps": result["requests"] / seconds if seconds else 0,
            "p50": result["p50_us"] / 1000,
            "p95": result["p90_us"] / 1000,  # wrk reports p90; the table's p95 column shows it
            "p99": result["p99_us"] / 1000,
            "max": result["max_us"] / 1000,
            "failures": failures,
            "counters": window(before, after),
        }

    return measure


class MeasurementError(Exception):
    """A measurement could not be taken (the load generator failed)."""


class RssSampler(threading.Thread):
    """Samples the proxy's resident memory every `interval` seconds."""

    def __init__(self, target: Target, interval: float = 0.25):
        super().__init__(daemon=True)
        self.target = target
        self.interval = interval
        self.samples: list[tuple[float, int]] = []
        self.stopped = threading.Event()
        self.start_time = time.monotonic()

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            self.samples.append((time.monotonic() - self.start_time, self.target.meter.rss_kib()))

    def stop(self) -> list[tuple[float, int]]:
        self.stopped.set()
        self.join(2)
        return self.samples


# --- results from k6 summaries ---------------------------------------------------


def k6_numbers(summary: dict, unit_trend: str = "http_req_duration") -> dict:
    metrics = summary["metrics"]
    reqs = metrics["http_reqs"]["values"]
    trend = metrics[unit_trend]["values"]
    complete = metrics.get("complete", {}).get("values", {"passes": reqs["count"], "fails": 0})
    failed = metrics.get("http_req_failed", {}).get("values", {"passes": 0})
    dropped = metrics.get("dropped_iterations", {}).get("values", {}).get("count", 0)
    return {
        "requests": reqs["count"],
        "rps": reqs["rate"],
        "p50": trend["med"],
        "p95": trend["p(95)"],
        "p99": trend["p(99)"],
        "max": trend["max"],
        "failures": int(complete.get("fails", 0)) + int(failed.get("passes", 0)),
        "dropped": int(dropped),
        "k6_exit": summary.get("exit_code"),
    }


# --- the workloads ---------------------------------------------------------------


def measure_k6(mode: str, extra: Callable[[Plan], dict], seconds: Callable[[Plan], float]):
    """A cell measured by one k6 run of bench.js, after a warm-up run."""

    def measure(cell: Cell) -> dict:
        env = {k: str(v) for k, v in extra(cell.plan).items()}
        env["MODE"] = mode
        tag = f"{cell.scenario.name}-{cell.target.name}-r{cell.round}"
        run_k6(cell, BENCH_JS, {**env, "DURATION": f"{cell.plan.warmup_s}s"}, cell.plan.warmup_s, tag + "-warm")
        before = cell.target.meter.read()
        summary = run_k6(cell, BENCH_JS, {**env, "DURATION": f"{seconds(cell.plan)}s"}, seconds(cell.plan), tag)
        after = cell.target.meter.read()
        numbers = k6_numbers(summary)
        numbers["counters"] = window(before, after)
        return numbers

    return measure


def measure_chunks(cell: Cell) -> dict:
    plan = cell.plan
    args = [
        "chunks", "--url", cell.target.url, "--streams", str(plan.chunk_streams),
        "--tokens", str(plan.chunk_tokens), "--stagger-ms", str(plan.chunk_interval_ms),
    ]
    tag = f"chunks-{cell.target.name}-r{cell.round}"
    run_client(cell, args + ["--duration", "1", "--warmup", "0"], 1, tag + "-warm")
    before = cell.target.meter.read()
    result = run_client(
        cell, args + ["--duration", str(plan.chunk_duration_s), "--warmup", "1"],
        plan.chunk_duration_s, tag,
    )
    after = cell.target.meter.read()
    delay = result["chunk_delay_us"]
    # The client's CPU is not in RUSAGE_CHILDREN until it is reaped, which
    # run_client has done: it is counted.
    return {
        "requests": result["events"],
        "rps": result["events"] / plan.chunk_duration_s,
        "streams": result["completed"],
        "p50": delay["p50"] / 1000,
        "p95": delay["p95"] / 1000,
        "p99": delay["p99"] / 1000,
        "p999": delay["p999"] / 1000,
        "max": delay["max"] / 1000,
        "first_event_p50": result["first_event_us"].get("p50", 0) / 1000,
        "first_event_p99": result["first_event_us"].get("p99", 0) / 1000,
        "failures": result["failed"],
        "counters": window(before, after),
    }


def measure_hold(cell: Cell) -> dict:
    plan = cell.plan
    streams = plan.hold_streams
    idle_rss = cell.target.meter.rss_kib()
    sampler = RssSampler(cell.target)
    at_all_open: dict = {}

    def on_line(line: str) -> None:
        if line.startswith("all-open"):
            at_all_open["rss_kib"] = cell.target.meter.rss_kib()
            at_all_open["t"] = round(time.monotonic() - sampler.start_time, 2)

    before = cell.target.meter.read()
    sampler.start()
    seconds = streams / plan.hold_ramp + plan.hold_tokens * plan.hold_token_delay_ms / 1000
    result = run_client(
        cell,
        ["hold", "--url", cell.target.url, "--streams", str(streams),
         "--tokens", str(plan.hold_tokens), "--ramp", str(plan.hold_ramp)],
        seconds, f"hold-{cell.target.name}-r{cell.round}", on_line,
    )
    samples = sampler.stop()
    after = cell.target.meter.read()
    peak = cell.target.meter.peak_rss_kib()
    per_stream = (peak - idle_rss) / streams if streams else 0
    return {
        "requests": result["completed"],
        "rps": result["completed"] / max(0.001, result["elapsed_s"]),
        "streams_at_once": result.get("max_open_at_once"),
        "failures": result["failed"] + (streams - result["completed"] - result["failed"]),
        "idle_rss_kib": idle_rss,
        "rss_at_all_open_kib": at_all_open.get("rss_kib"),
        "peak_rss_kib": peak,
        "rss_per_stream_kib": round(per_stream, 2),
        "peak_rss_at_10k_kib": round(idle_rss + per_stream * 10000),
        "rss_samples": samples[:: max(1, len(samples) // 200)],
        "counters": window(before, after),
    }


# How long the proxy is watched with no traffic at all for its wakeups.
QUIET_S = 5.0


def measure_idle(cell: Cell) -> dict:
    plan = cell.plan
    connections = plan.hold_streams
    # First the proxy alone, after its warm-up: how often its threads wake
    # with nothing to do (nginx: only its timers; rolter: its background
    # services' rounds and the keep-alive pool's sweep).
    switches = cell.target.meter.voluntary_switches()
    time.sleep(QUIET_S)
    wakeups_per_s = (cell.target.meter.voluntary_switches() - switches) / QUIET_S
    idle_rss = cell.target.meter.rss_kib()
    at_all_idle: dict = {}

    def on_line(line: str) -> None:
        if line.startswith("all-idle"):
            # Let the last streams' buffers go before reading.
            time.sleep(0.5)
            at_all_idle["rss_kib"] = cell.target.meter.rss_kib()

    before = cell.target.meter.read()
    seconds = connections / plan.hold_ramp + 3
    result = run_client(
        cell,
        ["idle", "--url", cell.target.url, "--streams", str(connections),
         "--tokens", "1", "--ramp", str(plan.hold_ramp), "--idle", "3"],
        seconds, f"idle-{cell.target.name}-r{cell.round}", on_line,
    )
    after = cell.target.meter.read()
    rss = at_all_idle.get("rss_kib")
    per_connection = (rss - idle_rss) / connections if rss and connections else None
    return {
        "requests": result["idle_at_once"],
        "rps": result["idle_at_once"] / max(0.001, result["elapsed_s"]),
        "failures": result["failed"] + (connections - result["idle_at_once"] - result["failed"]),
        "idle_rss_kib": idle_rss,
        "rss_all_idle_kib": rss,
        "rss_per_connection_kib": None if per_connection is None else round(per_connection, 2),
        "quiet_wakeups_per_s": round(wakeups_per_s, 1),
        "counters": window(before, after),
    }


def measure_soak(cell: Cell) -> dict:
    plan = cell.plan
    env = {
        "MODEL": "chat", "RATE": str(plan.soak_rate), "STREAMS": str(plan.soak_streams),
        "DURATION": f"{plan.soak_s}s", "CHAT_TOKENS": "4", "STREAM_TOKENS": "120",
    }
    sampler = RssSampler(cell.target, interval=1.0)
    before = cell.target.meter.read()
    sampler.start()
    summary = run_k6(cell, STEADY_JS, env, plan.soak_s + 30, f"soak-{cell.target.name}")
    samples = sampler.stop()
    after = cell.target.meter.read()
    numbers = k6_numbers(summary, "http_req_duration{kind:chat}")
    metrics = summary["metrics"]
    streams = metrics.get("streams_completed", {}).get("values", {})
    chat = metrics.get("chat_completed", {}).get("values", {})
    numbers["failures"] = (
        int(metrics.get("http_req_failed", {}).get("values", {}).get("passes", 0))
        + int(streams.get("fails", 0)) + int(chat.get("fails", 0))
    )
    numbers["streams_completed"] = int(streams.get("passes", 0))
    stream_trend = metrics.get("http_req_duration{kind:stream}", {}).get("values", {})
    numbers["stream_p99"] = stream_trend.get("p(99)")
    # Memory growth: the mean RSS of the last fifth of the run over that of
    # the second fifth (the first is warm-up).
    n = len(samples)
    if n >= 10:
        early = [kib for _, kib in samples[n // 5 : 2 * n // 5]]
        late = [kib for _, kib in samples[4 * n // 5 :]]
        numbers["rss_early_kib"] = round(sum(early) / len(early))
        numbers["rss_late_kib"] = round(sum(late) / len(late))
    numbers["rss_samples"] = samples
    numbers["counters"] = window(before, after)
    return numbers


def scenarios(plan: Plan) -> list[Scenario]:
    variants_thr = ["rolter-rr3"] if plan.variants else []
    variants_large = ["nginx-nobuf"] if plan.variants else []
    sse_chunks = plan.sse_tokens + 3  # role, tokens, finish, [DONE]
    out = [
        Scenario(
            "throughput",
            f"chat, closed loop, {plan.vus} in flight, {plan.chat_tokens} tokens",
            "request", "fast", ["direct", "nginx", "rolter", *variants_thr],
            measure_k6("throughput", lambda p: {"VUS": p.vus, "CHAT_TOKENS": p.chat_tokens},
                       lambda p: p.duration_s),
        ),
        Scenario(
            "latency",
            f"chat at a fixed {plan.rate:,}/s",
            "request", "fast", ["direct", "nginx", "pingora", "rolter"],
            measure_k6("latency", lambda p: {"RATE": p.rate, "CHAT_TOKENS": p.chat_tokens},
                       lambda p: p.duration_s),
        ),
        Scenario(
            "sse",
            f"{plan.sse_streams:,} concurrent SSE streams, {sse_chunks} chunks "
            f"{plan.sse_token_delay_ms} ms apart",
            "stream", "stream", ["direct", "nginx", "rolter"],
            measure_k6("stream", lambda p: {"VUS": p.sse_streams, "STREAM_TOKENS": p.sse_tokens},
                       lambda p: p.sse_duration_s),
        ),
        Scenario(
            "chunks",
            f"SSE chunk one-way delay, {plan.chunk_streams} streams, "
            f"{plan.chunk_interval_ms:g} ms apart",
            "chunk", "stamp", ["direct", "nginx", "rolter"], measure_chunks,
        ),
    ]
    for size in plan.large_sizes:
        label = f"{size // 1024} KiB" if size < 1 << 20 else f"{size // (1 << 20)} MiB"
        out.append(
            Scenario(
                f"large-{label.replace(' ', '').lower().replace('kib', 'k').replace('mib', 'm')}",
                f"{label} request body, one at a time",
                "request", "fast", ["direct", "nginx", *variants_large, "rolter"],
                measure_k6("large", lambda p, s=size: {"VUS": 1, "BODY_BYTES": s + ODD_TAIL},
                           lambda p: p.duration_s),
            )
        )
    if 4 << 20 in plan.large_sizes:
        # The 4 MiB body's prompt as a document, sent as a string and as a
        # text part.
        for name, title, content in (
            ("large-4m-doc", "a document's lines (an escape every ~13 bytes)", "string"),
            ("large-4m-parts", "the document as one text part", "parts"),
        ):
            out.append(
                Scenario(
                    name, f"4 MiB request body, {title}, one at a time",
                    "request", "fast", ["direct", "nginx", "rolter"],
                    measure_k6("large", lambda p, c=content: {"VUS": 1, "BODY_BYTES": (4 << 20) + ODD_TAIL,
                                                              "PROMPT": "document", "CONTENT": c},
                               lambda p: p.duration_s),
                )
            )
    out.append(
        Scenario(
            "sat-chat",
            f"saturation: chat, wrk closed loop, {plan.sat_connections} connections, "
            "upstream nginx `return 200`",
            "request", "return", ["nginx", "pingora", "rolter"], measure_saturation(stream=False),
        )
    )
    out.append(
        Scenario(
            "sat-sse",
            f"saturation: {plan.sat_chunks}-event SSE stream, wrk closed loop, "
            f"{plan.sat_connections} connections, upstream `sse-upstream`",
            "stream", "sse-upstream", ["nginx", "pingora", "rolter"], measure_saturation(stream=True),
        )
    )
    out.append(
        Scenario(
            "streams-10k",
            f"{plan.hold_streams:,} streams open at once (1 chunk/s each)",
            "stream", "hold", ["nginx", "rolter"], measure_hold,
        )
    )
    out.append(
        Scenario(
            "idle-10k",
            f"{plan.hold_streams:,} idle keep-alive connections (each after one short stream)",
            "connection", "fast", ["nginx", "rolter"], measure_idle,
        )
    )
    out.append(
        Scenario(
            "soak",
            f"soak: {plan.soak_s} s of {plan.soak_rate} chat/s + {plan.soak_streams} streams",
            "request", "stream", ["nginx", "rolter"], measure_soak, every_round=False,
        )
    )
    return out


__all__ = ["Cell", "MeasurementError", "Plan", "Scenario", "SetupError", "scenarios"]
