"""The routing-quality benchmark's client: workers that play the workload's
conversations through one route, asking an engine's `/tokenize` for each
prompt's token ids and timing each streamed answer (see quality.py)."""

from __future__ import annotations

import json
import threading
import time
from http import client as http_client
from urllib.parse import urlsplit

from quality_fleet import UPSTREAM_MODEL, Engine, QualityGateway
from quality_workload import BLOCK_SIZE, Workload, expected_answer

REQUEST_TIMEOUT_S = 60.0


def block_keys(token_ids: list[int], block_size: int) -> list[int]:
    """Chained keys of the full blocks of `token_ids` (equal keys, equal
    prefixes), as the engines' prefix caches key them."""
    keys, parent = [], 0
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash((parent, tuple(token_ids[start:start + block_size])))
        keys.append(parent)
    return keys


def connection(url: str) -> http_client.HTTPConnection:
    parts = urlsplit(url)
    return http_client.HTTPConnection(parts.hostname, parts.port, timeout=REQUEST_TIMEOUT_S)


class Client:
    """One worker's keep-alive connections: to the gateway, and to the
    engine it asks for token ids."""

    def __init__(self, gateway_url: str, engine_url: str):
        self.gateway_url = gateway_url
        self.engine_url = engine_url
        self.gateway = connection(gateway_url)
        self.engine = connection(engine_url)

    def close(self) -> None:
        self.gateway.close()
        self.engine.close()

    def tokenize(self, messages: list[dict]) -> list[int]:
        body = json.dumps({"model": UPSTREAM_MODEL, "messages": messages}).encode()
        try:
            self.engine.request("POST", "/tokenize", body, {"content-type": "application/json"})
            response = self.engine.getresponse()
            text = response.read()
        except (OSError, http_client.HTTPException):
            self.engine.close()
            self.engine = connection(self.engine_url)
            raise
        if response.status != 200:
            raise RuntimeError(f"/tokenize answered {response.status}: {text[:200]!r}")
        return json.loads(text)["tokens"]

    def chat(self, model: str, messages: list[dict], token_ids: list[int] | None,
             max_tokens: int) -> dict:
        """One streamed chat completion through the gateway; its record."""
        body = json.dumps(
            {
                "model": model,
                "messages": messages,
                "max_tokens": max_tokens,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        ).encode()
        headers = {"content-type": "application/json"}
        if token_ids is not None:
            headers["x-rolter-token-ids"] = ",".join(map(str, token_ids))
        started = time.perf_counter()
        record: dict = {"ok": False, "sent": started}
        try:
            self.gateway.request("POST", "/v1/chat/completions", body, headers)
            response = self.gateway.getresponse()
            record["status"] = response.status
            record["target"] = response.getheader("x-rolter-target")
            if response.status != 200:
                record["error"] = f"status {response.status}: {response.read()[:300]!r}"
                return record
            content: list[str] = []
            done = False
            while True:
                line = response.readline()
                if not line:
                    break
                if not line.startswith(b"data: "):
                    continue
                data = line[6:].strip()
                if data == b"[DONE]":
                    done = True
                    continue
                chunk = json.loads(data)
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    if "ttft_ms" not in record and ("role" in delta or delta.get("content")):
                        record["ttft_ms"] = (time.perf_counter() - started) * 1000
                    if delta.get("content"):
                        content.append(delta["content"])
                usage = chunk.get("usage")
                fake = chunk.get("fake")
                if isinstance(fake, dict) and "queue_ms" in fake:
                    record["queue_ms"] = fake["queue_ms"]
                if usage:
                    record["prompt_tokens"] = usage.get("prompt_tokens", 0)
                    details = usage.get("prompt_tokens_details") or {}
                    record["cached_tokens"] = details.get("cached_tokens") or 0
            record["latency_ms"] = (time.perf_counter() - started) * 1000
            record["text"] = "".join(content)
            if not done:
                record["error"] = "stream ended without data: [DONE]"
            elif "prompt_tokens" not in record:
                record["error"] = "no usage chunk"
            elif "ttft_ms" not in record:
                record["error"] = "no role or content chunk"
            else:
                record["ok"] = True
        except (OSError, ValueError, http_client.HTTPException) as e:
            record["error"] = f"{type(e).__name__}: {e}"
        if not record["ok"]:
            # The connection may be half-read: start over.
            self.gateway.close()
            self.gateway = connection(self.gateway_url)
        return record


def play(workload: Workload, model: str, gateway: QualityGateway, engines: list[Engine],
         concurrency: int, stop: threading.Event, text_only: bool = False) -> list[dict]:
    """Every conversation of the workload through route `model`, `concurrency`
    at a time; the records of every request."""
    queue = list(reversed(workload.conversations))
    lock = threading.Lock()  # guards `queue` and `records`: a pop or an append
    records: list[dict] = []

    def worker(n: int) -> None:
        client = Client(gateway.url, engines[n % len(engines)].url)
        try:
            play_conversations(client)
        except Exception as e:  # a bug here must show, not shrink the run
            with lock:
                records.append({"ok": False, "error": f"worker {n} crashed: {type(e).__name__}: {e}"})
        finally:
            client.close()

    def play_conversations(client: Client) -> None:
        while not stop.is_set():
            with lock:
                if not queue:
                    return
                conversation = queue.pop()
            messages = [{"role": "system", "content": workload.system_prompts[conversation.tenant]}]
            for k, turn in enumerate(conversation.turns):
                if stop.is_set():
                    return
                messages.append({"role": "user", "content": turn.user})
                try:
                    token_ids = client.tokenize(messages)
                except (OSError, ValueError, KeyError, RuntimeError, http_client.HTTPException) as e:
                    record = {"ok": False, "error": f"tokenize: {type(e).__name__}: {e}"}
                else:
                    # Text only: the ids still measure the one-cache ceiling,
                    # but the gateway does not see them.
                    sent = None if text_only else token_ids
                    record = client.chat(model, messages, sent, turn.max_tokens)
                    record["token_ids"] = len(token_ids)
                    record["blocks"] = block_keys(token_ids, BLOCK_SIZE)
                expected = expected_answer(turn.max_tokens)
                if record["ok"] and record["text"] != expected:
                    record["ok"] = False
                    record["error"] = f"unexpected answer {record['text'][:60]!r}"
                record.pop("text", None)
                record.update(conversation=conversation.index, turn=k)
                with lock:
                    records.append(record)
                # The history every strategy sees is the same.
                messages.append({"role": "assistant", "content": expected})

    threads = [threading.Thread(target=worker, args=(n,), daemon=True) for n in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(0.2)
    return records
