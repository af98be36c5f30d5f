"""The routing-quality benchmark's processes: fake engines with KV events and
a gateway with one route per strategy over all of them (see quality.py)."""

from __future__ import annotations

import dataclasses
import json
import urllib.error
import urllib.request
from pathlib import Path

from fleet import Gateway, Processes, SetupError, http, wait_until
from quality_workload import BLOCK_SIZE, Settings, calibration_text

# The model the routes forward; the engines serve any.
UPSTREAM_MODEL = "fake-model"


@dataclasses.dataclass
class Engine:
    name: str
    url: str
    kv_events: str
    kv_replay: str


def start_engines(rolter: Path, work: Path, processes: Processes, s: Settings) -> list[Engine]:
    engines = []
    for i in range(s.engines):
        name = f"engine-{i + 1}"
        stdout = work / f"{name}.out"
        process = processes.spawn(
            name,
            [
                str(rolter), "fake-llm", "--listen", "127.0.0.1:0", "--name", name,
                "--ttft-ms", str(s.ttft_ms),
                "--prefill-us-per-token", str(s.prefill_us_per_token),
                "--token-delay-ms", str(s.token_delay_ms),
                "--kv-blocks", str(s.kv_blocks),
                "--block-size", str(s.block_size),
                "--kv-events", "tcp://127.0.0.1:0",
                "--kv-replay", "tcp://127.0.0.1:0",
                "--prefill-slots", str(s.prefill_slots),
                "--decode-slowdown-pct", str(s.decode_slowdown_pct),
            ] + (["--tokenizer", s.tokenizer] if s.tokenizer else []),
            work / f"{name}.log",
            stdout=stdout,
        )
        words: list[str] = []

        def announced() -> bool:
            # `fake-llm listening on http://ADDR kv-events tcp://ADDR replay tcp://ADDR`
            try:
                first, newline, _ = stdout.read_text().partition("\n")
            except OSError:
                return False
            if newline:
                words.extend(first.split())
                return True
            return not process.alive()

        if not wait_until(10, announced) or "kv-events" not in words or "replay" not in words:
            raise SetupError(f"{name} did not announce its sockets:\n" + "\n".join(process.log_tail(20)))

        def after(word: str) -> str:
            return words[words.index(word) + 1]

        engines.append(Engine(name, after("on"), after("kv-events"), after("replay")))
    return engines


def calibrate(rolter: Path, work: Path, s: Settings) -> float:
    """Tokens of `s.tokenizer` per word of the workload's text: one engine
    with that model directory tokenizes a sample (a small vocabulary cuts
    the workload's invented words into several tokens each, and the sizes
    of the settings are meant in the engines' tokens)."""
    if not s.tokenizer:
        return 1.0
    work.mkdir(parents=True)
    processes = Processes()
    try:
        engine = start_engines(rolter, work, processes, dataclasses.replace(s, engines=1))[0]
        text, words = calibration_text(s)
        body = json.dumps({"model": UPSTREAM_MODEL, "prompt": text})
        status, answer = http_json("POST", f"{engine.url}/tokenize", body)
        if status != 200 or not isinstance(answer, dict) or not answer.get("count"):
            raise SetupError(f"calibration: {engine.name}'s /tokenize answered {status}: {str(answer)[:200]}")
        return answer["count"] / words
    finally:
        processes.stop_all()


def http_json(method: str, url: str, body: str) -> tuple[int | None, object]:
    """(status, decoded JSON body) of a request with a JSON body."""
    request = urllib.request.Request(url, data=body.encode(), method=method,
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read()[:300]
    except (OSError, ValueError) as e:
        return None, str(e)


class QualityGateway(Gateway):
    """The gateway with one route per strategy over every engine."""

    def write_routes(self, engines: list[Engine], strategies: list[str],
                     tokenizer: str | None = None, cache_aware_min_load: int | None = None) -> None:
        providers = "".join(
            f'[[providers]]\nname = "{e.name}"\nbase_url = "{e.url}"\n\n'
            f"[providers.kv_events]\n"
            f'endpoint = "{e.kv_events}"\n'
            f'replay_endpoint = "{e.kv_replay}"\n'
            f"block_size = {BLOCK_SIZE}\n\n"
            for e in engines
        )
        targets = ", ".join(f'{{ provider = "{e.name}", model = "{UPSTREAM_MODEL}" }}' for e in engines)
        tokenize = f'tokenizer = "{tokenizer}"\n' if tokenizer else ""

        def guard(strategy: str) -> str:
            if strategy != "cache_aware" or cache_aware_min_load is None:
                return ""
            return f"cache_guard = {{ min_load = {cache_aware_min_load} }}\n"

        routes = "".join(
            f'[[routes]]\nmodel = "{strategy}"\nstrategy = "{strategy}"\n{tokenize}{guard(strategy)}'
            f"targets = [{targets}]\n\n"
            for strategy in strategies
        )
        self.toml.write_text(
            "# Written by load-tests/quality.py.\n"
            "[server]\n"
            f'listen = ["{self.listen}"]\n'
            f'admin_listen = "{self.admin}"\n'
            "require_api_key = false\n"
            # Token ids of long conversations in `x-rolter-token-ids` pass
            # nginx's 32 KiB header limit; a text-only run sends none.
            "max_request_header_bytes = 1048575\n\n"
            f"{providers}{routes}"
            "[[admin_tokens]]\n"
            'name = "quality"\n'
            'token_env = "ROLTER_ADMIN_TOKEN"\n'
            'role = "viewer"\n'
        )

    def admin_json(self, path: str) -> dict | None:
        status, text = http("GET", f"{self.admin_url}{path}", token=self.admin_token)
        if status != 200:
            return None
        try:
            return json.loads(text)
        except ValueError:
            return None

    def kv_indexes(self) -> list[dict]:
        doc = self.admin_json("/admin/kv-index") or {}
        return doc.get("kv_indexes", [])


def subscribers_connected(gateway: QualityGateway, engines: list[Engine]) -> bool:
    """Whether the gateway's KV-event subscriber of every engine is connected
    (before that, the first batches could be missed and need a replay)."""
    by_provider = {i.get("provider"): i for i in gateway.kv_indexes()}
    for engine in engines:
        index = by_provider.get(engine.name)
        if not index or not index.get("configured"):
            return False
        ranks = index.get("ranks") or []
        if not ranks or not all(r.get("connected") for r in ranks):
            return False
    return True
