#!/usr/bin/env python3
"""A minimal OpenAI-style streaming engine that stamps every SSE chunk with
the moment it was written, for measuring what a proxy adds per chunk.

`rolter fake-llm` paces its tokens with sleeps and says nothing about when a
chunk left it, so a client can only compare inter-arrival times, whose spread
(the engine's timer jitter, ~1 ms) is ten times the delay a proxy should add.
This engine writes `"t": <CLOCK_MONOTONIC ns>` into each chunk just before the
`send()`; the client (`sse_clients.py chunks`) reads the same clock when the
bytes arrive, so `arrival - t` is each chunk's one-way delay: loopback and
the client's own wake-up when run direct, plus the proxy's forwarding when a
proxy sits between. Both processes are on one machine, so the clock is
shared.

  POST /v1/chat/completions   `max_tokens` chunks (default 50), `--interval-ms`
                              apart on a fixed schedule (no drift), then a
                              finish chunk and `data: [DONE]`; HTTP/1.1
                              chunked, kept alive.
  GET  /v1/models, /health    200 (rolter's health check).

The chunks look like vLLM's (same fields, ~200 bytes). Prints
`sse-stamp-engine listening on http://ADDR` as its first line. Python 3.11,
standard library only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

MODELS = b'{"object":"list","data":[{"id":"fake-model","object":"model"}]}'


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class Engine:
    def __init__(self, interval_ms: float):
        self.interval_ns = int(interval_ms * 1_000_000)
        self.streams = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        name, value = line.split(":", 1)
                        headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0"))
                body = await reader.readexactly(length) if length else b""
                if method == "GET":
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                        b"content-length: %d\r\n\r\n%s" % (len(MODELS), MODELS)
                    )
                    await writer.drain()
                    continue
                if method != "POST" or not path.startswith("/v1/chat/completions"):
                    writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                await self.stream(writer, body)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def stream(self, writer: asyncio.StreamWriter, body: bytes) -> None:
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            request = {}
        tokens = int(request.get("max_tokens") or 50)
        model = json.dumps(str(request.get("model", "fake-model")))
        self.streams += 1
        sid = self.streams
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        prefix = (
            f'{{"id":"chatcmpl-stamp-{sid:08d}","object":"chat.completion.chunk",'
            f'"created":{int(time.time())},"model":{model},'
        ).encode()
        start = time.monotonic_ns()
        for k in range(tokens + 1):
            due = start + (k + 1) * self.interval_ns
            wait = (due - time.monotonic_ns()) / 1e9
            if wait > 0:
                await asyncio.sleep(wait)
            if k < tokens:
                delta = b'{"content":"tok%d "},"logprobs":null,"finish_reason":null' % k
            else:
                delta = b'{},"logprobs":null,"finish_reason":"length"'
            # The stamp is the last thing before the write: with an empty
            # socket buffer, transport.write() sends at once.
            stamp = time.monotonic_ns()
            event = b'data: %s"choices":[{"index":0,"delta":%s}],"t":%d,"k":%d}\n\n' % (
                prefix, delta, stamp, k,
            )
            writer.write(chunk(event))
            if writer.transport.get_write_buffer_size() > 65536:
                await writer.drain()
        writer.write(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--listen", default="127.0.0.1:0", help="host:port (port 0: a free one)")
    p.add_argument("--interval-ms", type=float, default=20.0, help="time between chunks")
    args = p.parse_args()
    host, port = args.listen.rsplit(":", 1)
    engine = Engine(args.interval_ms)
    server = await asyncio.start_server(engine.handle, host, int(port), backlog=4096)
    addr = server.sockets[0].getsockname()
    print(f"sse-stamp-engine listening on http://{addr[0]}:{addr[1]}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
