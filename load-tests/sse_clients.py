#!/usr/bin/env python3
"""Raw-socket SSE clients for the gateway benchmark (`compare.py`).

k6 reads a streamed body whole, so it can time a stream but not its chunks,
and a k6 virtual user costs far more memory than a socket, so it cannot hold
10,000 streams on the machine it shares with the engine. These two clients
are asyncio protocols on plain sockets (standard library only); each HTTP
response is decoded incrementally (status line, headers, chunked framing,
SSE events), because a proxy may re-frame the engine's chunks.

  chunks  STREAMS streams at a time for DURATION seconds against
          `sse_stamp_engine.py` (directly or through a proxy). Every event
          carries the engine's CLOCK_MONOTONIC stamp `"t"`; the client reads
          the clock in `data_received`, before parsing, so `arrival - t` is
          the chunk's one-way delay. Also records the time to the first event
          of each stream (request written -> first event). Prints one JSON
          object: percentiles in microseconds, counts, failures.
  hold    opens STREAMS long streams (`rolter fake-llm` with a slow token
          delay, so each lasts longer than the ramp), RAMP per second, and
          reads them to `data: [DONE]`. Prints `open N` lines as streams get
          their first event, `all-open N` once every stream is open at the
          same time (the runner samples the proxy's memory there), then one
          JSON object with the counts.
  idle    opens STREAMS keep-alive connections, RAMP per second; each reads
          one short stream to its end and then stays open, idle. Prints
          `all-idle N` once every connection has finished its stream (the
          runner samples the proxy's memory there), holds them IDLE seconds,
          closes them and prints one JSON object with the counts.

Exit status 0 when every stream completed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from urllib.parse import urlsplit

STAMP = re.compile(rb'"t":(\d+)')


class Response:
    """Incremental HTTP/1.1 response decoder: status, headers, then a chunked
    (or Content-Length) body split into SSE events."""

    def __init__(self) -> None:
        self.buffer = b""
        self.status: int | None = None
        self.chunked = False
        self.remaining: int | None = None  # body bytes left (Content-Length)
        self.chunk_left = 0  # bytes of the current chunk still to come
        self.trailer = False  # after the 0-size chunk
        self.body = b""  # decoded body not yet split into events
        self.done = False  # the whole response arrived
        self.saw_done_event = False

    def feed(self, data: bytes) -> list[bytes]:
        """Feeds received bytes; returns the complete SSE events they finished."""
        self.buffer += data
        if self.status is None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return []
            head, self.buffer = self.buffer[:end].decode("latin-1"), self.buffer[end + 4 :]
            lines = head.split("\r\n")
            self.status = int(lines[0].split(" ", 2)[1])
            for line in lines[1:]:
                name, _, value = line.partition(":")
                name, value = name.strip().lower(), value.strip()
                if name == "transfer-encoding" and "chunked" in value.lower():
                    self.chunked = True
                elif name == "content-length":
                    self.remaining = int(value)
        if self.chunked:
            self._dechunk()
        else:
            take = self.buffer if self.remaining is None else self.buffer[: self.remaining]
            self.body += take
            self.buffer = self.buffer[len(take) :]
            if self.remaining is not None:
                self.remaining -= len(take)
                self.done = self.remaining == 0
        events = []
        while True:
            end = self.body.find(b"\n\n")
            if end < 0:
                break
            events.append(self.body[:end])
            self.body = self.body[end + 2 :]
        for event in events:
            if event.strip() == b"data: [DONE]":
                self.saw_done_event = True
        return events

    def _dechunk(self) -> None:
        while self.buffer and not self.done:
            if self.trailer:
                if self.buffer.startswith(b"\r\n"):
                    self.buffer = self.buffer[2:]
                    self.done = True
                return
            if self.chunk_left > 0:
                take = self.buffer[: self.chunk_left]
                self.body += take
                self.buffer = self.buffer[len(take) :]
                self.chunk_left -= len(take)
                if self.chunk_left > 0:
                    return
                self.chunk_left = -2  # the CRLF after the data
            if self.chunk_left == -2:
                if len(self.buffer) < 2:
                    return
                self.buffer = self.buffer[2:]
                self.chunk_left = 0
            end = self.buffer.find(b"\r\n")
            if end < 0:
                return
            size = int(self.buffer[:end].split(b";")[0], 16)
            self.buffer = self.buffer[end + 2 :]
            if size == 0:
                self.trailer = True
            else:
                self.chunk_left = size


class Stream(asyncio.Protocol):
    """One streamed chat completion on its own connection."""

    def __init__(self, on_event, finished: asyncio.Future):
        self.on_event = on_event
        self.finished = finished
        self.response = Response()
        self.sent_ns = 0
        self.first_ns: int | None = None
        self.events = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def send(self, request: bytes) -> None:
        self.sent_ns = time.monotonic_ns()
        self.transport.write(request)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic_ns()
        for event in self.response.feed(data):
            self.events += 1
            if self.first_ns is None:
                self.first_ns = now
            self.on_event(self, event, now)
        if self.response.done and not self.finished.done():
            self.finished.set_result(self.response.status == 200 and self.response.saw_done_event)

    def connection_lost(self, exc) -> None:
        if not self.finished.done():
            self.finished.set_result(False)


def request_bytes(url: str, model: str, tokens: int) -> tuple[str, int, bytes]:
    parts = urlsplit(url)
    body = json.dumps(
        {
            "model": model,
            "stream": True,
            "max_tokens": tokens,
            "messages": [{"role": "user", "content": "stream for the benchmark"}],
        }
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode()
    return parts.hostname, parts.port, head + body


def percentiles(values: list[int]) -> dict:
    if not values:
        return {}
    values = sorted(values)
    n = len(values)

    def at(q: float) -> float:
        return round(values[min(n - 1, int(q * n))] / 1000, 1)

    return {
        "count": n,
        "p50": at(0.50),
        "p90": at(0.90),
        "p95": at(0.95),
        "p99": at(0.99),
        "p999": at(0.999),
        "max": round(values[-1] / 1000, 1),
        "mean": round(sum(values) / n / 1000, 1),
    }


async def open_stream(host: str, port: int, on_event) -> tuple[Stream, asyncio.Future]:
    loop = asyncio.get_running_loop()
    finished = loop.create_future()
    _, stream = await loop.create_connection(lambda: Stream(on_event, finished), host, port)
    return stream, finished


async def run_chunks(args) -> int:
    host, port, request = request_bytes(args.url, args.model, args.tokens)
    delays: list[int] = []
    ttfb: list[int] = []
    counts = {"completed": 0, "failed": 0, "events": 0}
    deadline = time.monotonic() + args.duration
    measuring_after = time.monotonic() + args.warmup

    def on_event(stream: Stream, event: bytes, now: int) -> None:
        match = STAMP.search(event)
        if match and time.monotonic() >= measuring_after:
            delays.append(now - int(match.group(1)))

    async def worker() -> None:
        # One connection per worker, kept alive: each stream after the
        # first reuses it, as an SDK client would.
        stream, finished = await open_stream(host, port, on_event)
        while time.monotonic() < deadline:
            stream.response, stream.first_ns, stream.events = Response(), None, 0
            stream.finished = finished
            stream.send(request)
            ok = await finished
            if ok and stream.first_ns is not None:
                counts["completed"] += 1
                counts["events"] += stream.events
                if stream.sent_ns and time.monotonic() >= measuring_after:
                    ttfb.append(stream.first_ns - stream.sent_ns)
            else:
                counts["failed"] += 1
                stream.transport.close()
                stream, finished = await open_stream(host, port, on_event)
                continue
            finished = asyncio.get_running_loop().create_future()
        stream.transport.close()

    workers = []
    for i in range(args.streams):
        workers.append(asyncio.create_task(worker()))
        # Spread the streams' schedules over one chunk interval.
        await asyncio.sleep(args.stagger_ms / 1000 / max(1, args.streams))
    await asyncio.gather(*workers)
    print(
        json.dumps(
            {
                "mode": "chunks",
                "streams": args.streams,
                **counts,
                "chunk_delay_us": percentiles(delays),
                "first_event_us": percentiles(ttfb),
            }
        ),
        flush=True,
    )
    return 0 if counts["failed"] == 0 and counts["completed"] > 0 else 1


async def run_hold(args) -> int:
    host, port, request = request_bytes(args.url, args.model, args.tokens)
    opened = 0
    completed = 0
    failed = 0
    all_open = asyncio.Event()
    report_every = max(1, args.streams // 10)

    def on_event(stream: Stream, event: bytes, now: int) -> None:
        nonlocal opened
        if stream.events == 1:
            opened += 1
            if opened % report_every == 0:
                print(f"open {opened}", flush=True)
            if opened == args.streams:
                print(f"all-open {opened}", flush=True)
                all_open.set()

    async def one() -> None:
        nonlocal completed, failed
        try:
            stream, finished = await open_stream(host, port, on_event)
        except OSError as e:
            failed += 1
            print(f"connect failed: {e}", file=sys.stderr, flush=True)
            return
        stream.send(request)
        ok = await finished
        stream.transport.close()
        if ok:
            completed += 1
        else:
            failed += 1

    tasks = []
    interval = 1.0 / args.ramp
    start = time.monotonic()
    for i in range(args.streams):
        due = start + i * interval
        wait = due - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    print(
        json.dumps(
            {
                "mode": "hold",
                "streams": args.streams,
                "completed": completed,
                "failed": failed,
                "max_open_at_once": opened if all_open.is_set() else None,
                "elapsed_s": round(time.monotonic() - start, 1),
            }
        ),
        flush=True,
    )
    return 0 if failed == 0 and completed == args.streams else 1


async def run_idle(args) -> int:
    host, port, request = request_bytes(args.url, args.model, args.tokens)
    idle = 0
    failed = 0
    all_idle = asyncio.Event()
    release = asyncio.Event()
    report_every = max(1, args.streams // 10)

    def on_event(stream: Stream, event: bytes, now: int) -> None:
        pass

    async def one() -> None:
        nonlocal idle, failed
        try:
            stream, finished = await open_stream(host, port, on_event)
        except OSError as e:
            failed += 1
            print(f"connect failed: {e}", file=sys.stderr, flush=True)
            return
        stream.send(request)
        ok = await finished
        if not ok or stream.transport.is_closing():
            failed += 1
            stream.transport.close()
            return
        idle += 1
        if idle % report_every == 0:
            print(f"idle {idle}", flush=True)
        if idle == args.streams:
            print(f"all-idle {idle}", flush=True)
            all_idle.set()
        await release.wait()
        stream.transport.close()

    tasks = []
    interval = 1.0 / args.ramp
    start = time.monotonic()
    for i in range(args.streams):
        due = start + i * interval
        wait = due - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        tasks.append(asyncio.create_task(one()))
    # Every connection idle, or some failed: either way hold what is open.
    deadline = start + args.streams / args.ramp + 30
    while not all_idle.is_set() and idle + failed < args.streams and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(args.idle)
    release.set()
    await asyncio.gather(*tasks)
    print(
        json.dumps(
            {
                "mode": "idle",
                "connections": args.streams,
                "idle_at_once": idle,
                "failed": failed,
                "elapsed_s": round(time.monotonic() - start, 1),
            }
        ),
        flush=True,
    )
    return 0 if failed == 0 and idle == args.streams else 1


def main() -> int:
    p = argparse.ArgumentParser(description="Raw-socket SSE clients of compare.py.")
    p.add_argument("mode", choices=["chunks", "hold", "idle"])
    p.add_argument("--url", required=True, help="base URL, http://host:port")
    p.add_argument("--model", default="chat")
    p.add_argument("--streams", type=int, default=100, help="streams at a time")
    p.add_argument("--tokens", type=int, default=50, help="max_tokens of each stream")
    p.add_argument("--duration", type=float, default=10.0, help="chunks: seconds of traffic")
    p.add_argument("--warmup", type=float, default=1.0, help="chunks: seconds not measured")
    p.add_argument("--stagger-ms", type=float, default=20.0, help="chunks: spread of the starts")
    p.add_argument("--ramp", type=float, default=2000.0, help="hold, idle: new connections per second")
    p.add_argument("--idle", type=float, default=3.0, help="idle: seconds every connection stays idle")
    args = p.parse_args()
    runner = {"chunks": run_chunks, "hold": run_hold, "idle": run_idle}[args.mode]
    return asyncio.run(runner(args))


if __name__ == "__main__":
    sys.exit(main())
