"""The routing-quality benchmark's numbers: percentiles, hit rates, the
one-cache ceiling, the verdict, and the tables (see quality.py)."""

from __future__ import annotations

import json
from pathlib import Path

from fleet import REPO, http
from quality_fleet import Engine
from quality_workload import BLOCK_SIZE, Settings, Workload

LOAD_ONLY = ("random", "round_robin")
CACHE_AWARE = ("cache_aware", "precise_cache_aware")

# A cache-aware strategy wins clearly when its prefix-hit rate is at least
# this many points above the best load-only strategy's and its TTFT p50 at
# most this share of the best load-only p50.
WIN_HIT_RATE_POINTS = 0.10
WIN_TTFT_P50_SHARE = 0.8


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between the closest ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def ceiling_hit_rate(records: list[dict], block_size: int) -> float | None:
    """The hit rate of one engine with an unbounded cache serving every
    request in the order they were sent: what perfect affinity with no
    eviction would reach (the first sight of every prefix is a miss). Each
    record gets its own share as `ceiling_cached` (tokens), the baseline a
    request's own `cached_tokens` is compared with."""
    seen: set[int] = set()
    prompt = cached = 0
    for r in sorted((r for r in records if r["ok"]), key=lambda r: r["sent"]):
        blocks = r["blocks"]
        # An engine recomputes the prompt's last token, so its block too
        # when the prompt is block-aligned.
        limit = (r["token_ids"] - 1) // block_size
        hit = 0
        while hit < min(limit, len(blocks)) and blocks[hit] in seen:
            hit += 1
        seen.update(blocks)
        r["ceiling_cached"] = hit * block_size
        prompt += r["prompt_tokens"]
        cached += hit * block_size
    return cached / prompt if prompt else None


def engine_stats(engines: list[Engine]) -> dict:
    stats = {}
    for engine in engines:
        status, text = http("GET", f"{engine.url}/fake/stats")
        if status == 200:
            doc = json.loads(text)
            stats[engine.name] = {
                "chat_completions": doc.get("by_path", {}).get("/v1/chat/completions"),
                "prefix_cache": doc.get("prefix_cache"),
                "kv_events": doc.get("kv_events"),
            }
    return stats


def index_agreement(kv_indexes: list[dict], engines: dict) -> dict:
    """How the gateway's KV index compares with the engines' own caches:
    the blocks it holds against the blocks the engines hold, and what it
    could not apply. Far apart, `precise_cache_aware` routes on a wrong map."""
    engine_blocks = sum((e.get("prefix_cache") or {}).get("used_blocks", 0) for e in engines.values())
    return {
        "usable": sum(1 for i in kv_indexes if i.get("usable")),
        "indexes": len(kv_indexes),
        "blocks_held": sum(i.get("blocks_resident", 0) for i in kv_indexes),
        "engine_blocks": engine_blocks,
        "gaps": sum(i.get("gaps", 0) for i in kv_indexes),
        "unknown_parent_drops": sum(i.get("unknown_parent_drops", 0) for i in kv_indexes),
        "decode_errors": sum(i.get("decode_errors", 0) for i in kv_indexes),
    }


def summarize(strategy: str, records: list[dict], engines: list[Engine], elapsed_s: float) -> dict:
    ok = [r for r in records if r["ok"]]
    ttfts = [r["ttft_ms"] for r in ok]
    queue_waits = [r["queue_ms"] for r in ok if r.get("queue_ms") is not None]
    prompt = sum(r["prompt_tokens"] for r in ok)
    cached = sum(r["cached_tokens"] for r in ok)
    per_engine = {e.name: 0 for e in engines}
    for r in ok:
        if r.get("target") in per_engine:
            per_engine[r["target"]] += 1
        else:
            per_engine[str(r.get("target"))] = per_engine.get(str(r.get("target")), 0) + 1
    counts = list(per_engine.values())
    mean = sum(counts) / len(counts) if counts else 0

    def hit_rate(subset: list[dict]) -> float | None:
        tokens = sum(r["prompt_tokens"] for r in subset)
        return sum(r["cached_tokens"] for r in subset) / tokens if tokens else None

    # Whether a conversation's next turn went where its previous one did.
    previous = {(r["conversation"], r["turn"]): r.get("target") for r in ok}
    followers = [r for r in ok if (r["conversation"], r["turn"] - 1) in previous]
    stayed = sum(1 for r in followers if previous[(r["conversation"], r["turn"] - 1)] == r.get("target"))
    return {
        "strategy": strategy,
        "requests": len(records),
        "ok": len(ok),
        "errors": len(records) - len(ok),
        "first_errors": [r.get("error") for r in records if not r["ok"]][:10],
        "ttft_ms": {
            "p50": percentile(ttfts, 0.5),
            "p90": percentile(ttfts, 0.9),
            "p99": percentile(ttfts, 0.99),
            "mean": sum(ttfts) / len(ttfts) if ttfts else None,
            "max": max(ttfts) if ttfts else None,
        },
        "queue_wait_ms": {
            "p50": percentile(queue_waits, 0.5),
            "p99": percentile(queue_waits, 0.99),
        },
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "hit_rate": cached / prompt if prompt else None,
        "hit_rate_first_turns": hit_rate([r for r in ok if r["turn"] == 0]),
        "hit_rate_later_turns": hit_rate([r for r in ok if r["turn"] > 0]),
        "ceiling_hit_rate": ceiling_hit_rate(records, BLOCK_SIZE),
        "later_turns_on_previous_engine": stayed / len(followers) if followers else None,
        "requests_per_engine": per_engine,
        "imbalance": max(counts) / mean if mean else None,
        "elapsed_s": round(elapsed_s, 2),
        "requests_per_s": round(len(records) / elapsed_s, 1) if elapsed_s else None,
    }


def clear_win(results: dict[str, dict]) -> dict[str, dict]:
    """For each cache-aware strategy measured, whether it beat the best
    load-only one clearly (WIN_HIT_RATE_POINTS, WIN_TTFT_P50_SHARE)."""
    baseline = [results[s] for s in LOAD_ONLY if s in results and results[s]["ok"]]
    if not baseline:
        return {}
    best_hit = max(r["hit_rate"] or 0 for r in baseline)
    best_p50 = min(r["ttft_ms"]["p50"] for r in baseline)
    verdicts = {}
    for strategy in CACHE_AWARE:
        r = results.get(strategy)
        if not r:
            continue
        hit, p50 = r["hit_rate"], r["ttft_ms"]["p50"]
        won = (
            r["ok"] > 0
            and hit is not None
            and hit >= best_hit + WIN_HIT_RATE_POINTS
            and p50 is not None
            and p50 <= best_p50 * WIN_TTFT_P50_SHARE
        )
        verdicts[strategy] = {
            "clear_win": won,
            "hit_rate_points_over_best_load_only": None if hit is None else round(100 * (hit - best_hit), 1),
            "ttft_p50_vs_best_load_only": None if p50 is None else round(p50 / best_p50, 2),
        }
    return verdicts


# The routing-quality targets (issue 15, item 9): precise_cache_aware's hit
# rate against the one-cache ceiling, cache_aware's TTFT p90 against
# precise_cache_aware's, and both against round robin's.
TARGET_PRECISE_OF_CEILING = 0.97
TARGET_CACHE_AWARE_P90_VS_PRECISE = 1.5
TARGET_P90_BETTER_THAN_ROUND_ROBIN = 3.0


def quality_targets(results: dict[str, dict]) -> list[dict]:
    """Each target the measured strategies allow to judge: what it asks,
    what was measured, and whether it was met."""
    def p90(strategy: str) -> float | None:
        r = results.get(strategy)
        return r["ttft_ms"]["p90"] if r and r["ok"] else None

    targets = []
    precise = results.get("precise_cache_aware")
    if precise and precise["hit_rate"] is not None and precise.get("ceiling_hit_rate"):
        share = precise["hit_rate"] / precise["ceiling_hit_rate"]
        targets.append({
            "target": f"precise_cache_aware hit rate >= {TARGET_PRECISE_OF_CEILING:.0%} of the one-cache ceiling",
            "measured": f"{share:.1%}",
            "met": share >= TARGET_PRECISE_OF_CEILING,
        })
    if p90("cache_aware") and p90("precise_cache_aware"):
        ratio = p90("cache_aware") / p90("precise_cache_aware")
        targets.append({
            "target": f"cache_aware TTFT p90 <= {TARGET_CACHE_AWARE_P90_VS_PRECISE}x precise_cache_aware's",
            "measured": f"{ratio:.2f}x",
            "met": ratio <= TARGET_CACHE_AWARE_P90_VS_PRECISE,
        })
    for strategy in CACHE_AWARE:
        if p90(strategy) and p90("round_robin"):
            better = p90("round_robin") / p90(strategy)
            targets.append({
                "target": f"{strategy} TTFT p90 >= {TARGET_P90_BETTER_THAN_ROUND_ROBIN:.0f}x better than round_robin's",
                "measured": f"{better:.2f}x",
                "met": better >= TARGET_P90_BETTER_THAN_ROUND_ROBIN,
            })
    return targets


# --- reporting -------------------------------------------------------------------


def fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def fmt_rate(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def table_rows(results: dict[str, dict]) -> list[list[str]]:
    rows = []
    for r in results.values():
        t = r["ttft_ms"]
        requests = str(r["requests"]) + (f" ({r['errors']} failed)" if r["errors"] else "")
        counts = list(r["requests_per_engine"].values())
        mean = sum(counts) / len(counts) if counts else 0
        ceiling = r.get("ceiling_hit_rate")
        of_ceiling = "-" if not ceiling or r["hit_rate"] is None else f"{100 * r['hit_rate'] / ceiling:.1f}%"
        rows.append([
            r["strategy"], requests, fmt_ms(t["p50"]), fmt_ms(t["p90"]), fmt_ms(t["p99"]),
            fmt_ms(r.get("queue_wait_ms", {}).get("p99")),
            fmt_rate(r["hit_rate"]), of_ceiling,
            f"{max(counts) if counts else 0} / {mean:.0f}",
        ])
    return rows


HEADER = ["strategy", "requests", "TTFT p50 (ms)", "TTFT p90 (ms)", "TTFT p99 (ms)",
          "queue wait p99 (ms)", "prefix-hit rate", "of ceiling", "requests per engine max / mean"]


DIAGNOSTICS = ["strategy", "hit rate, first turns", "hit rate, later turns",
               "later turns on the previous turn's engine", "busiest engine / mean",
               "one-cache ceiling"]


def diagnostic_rows(results: dict[str, dict]) -> list[list[str]]:
    return [
        [
            r["strategy"], fmt_rate(r["hit_rate_first_turns"]), fmt_rate(r["hit_rate_later_turns"]),
            fmt_rate(r["later_turns_on_previous_engine"]),
            "-" if r["imbalance"] is None else f"{r['imbalance']:.2f}",
            fmt_rate(r["ceiling_hit_rate"]),
        ]
        for r in results.values()
    ]


def text_table(header: list[str], rows: list[list[str]]) -> str:
    rows = [header] + rows
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for n, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i])
                               for i, cell in enumerate(row)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    align = ["---"] + ["---:"] * (len(header) - 1)
    return "\n".join("| " + " | ".join(row) + " |" for row in [header, align] + rows)


def markdown(results: dict[str, dict], verdicts: dict, s: Settings, workload: Workload,
             stamp: str, rolter: Path) -> str:
    lines = [
        f"# Routing quality, {stamp}",
        "",
        markdown_table(HEADER, table_rows(results)),
        "",
        f"Workload (seed {s.seed}): {s.tenants} tenants x ~{s.system_tokens}-token system prompt, "
        f"{s.users_per_tenant} users per tenant (~{s.profile_tokens}-token profile), "
        f"{len(workload.conversations)} conversations of {s.turns_min}-{s.turns_max} turns "
        f"({s.message_tokens_min}-{s.message_tokens_max}-token messages, "
        f"{s.answer_tokens_min}-{s.answer_tokens_max}-token answers), "
        f"{workload.requests()} streamed chat completions per strategy, {s.concurrency} at a time. "
        f"Sizes are in the engines' tokens: the generated text is scaled by the "
        f"{s.tokens_per_word:.2f} tokens per word the engines' tokenizer measured.",
        "",
        f"Tenants are picked with weight 1/(t+1)^{s.tenant_skew}; every system prompt starts with a "
        f"~{s.preamble_tokens}-token preamble shared by all tenants.",
        "",
        f"Fleet, fresh for each strategy: {s.engines} `rolter fake-llm` engines with "
        f"`--ttft-ms {s.ttft_ms} --prefill-us-per-token {s.prefill_us_per_token} "
        f"--token-delay-ms {s.token_delay_ms} --kv-blocks {s.kv_blocks} --block-size {s.block_size} "
        f"--prefill-slots {s.prefill_slots} --decode-slowdown-pct {s.decode_slowdown_pct}"
        + (f" --tokenizer {Path(s.tokenizer).name}" if s.tokenizer else "")
        + f"` and KV events; one `rolter serve` ({rolter.relative_to(REPO) if rolter.is_relative_to(REPO) else rolter}). "
        + (f"The cache_aware route sets `cache_guard = {{ min_load = {s.cache_aware_min_load} }}`. "
           if s.cache_aware_min_load is not None else "")
        + ("Clients send text only: every route tokenizes with the engines' model directory."
           if s.text_only else "Clients send the engines' token ids in `x-rolter-token-ids`."),
        "",
        "TTFT is measured at the client (request sent to the first SSE chunk); the queue wait is the "
        "time a request waited for one of its engine's prefill slots (the engine reports it); the "
        "prefix-hit rate is cached / prompt tokens from the usage chunk, and \"of ceiling\" that rate "
        "over the one-cache ceiling's.",
        "",
        "Diagnostics: hit rates of conversations' first turns (only the tenant's system prompt and "
        "the user's profile can be cached) and of later turns (the whole previous turn can be); how "
        "often a turn went to the engine that served the previous turn; the busiest engine's "
        "requests over the mean; the hit rate one engine with an unbounded cache would reach.",
        "",
        markdown_table(DIAGNOSTICS, diagnostic_rows(results)),
    ]
    if verdicts:
        lines += ["", "Cache-aware vs best load-only (clear win: hit rate +"
                  f"{100 * WIN_HIT_RATE_POINTS:.0f} points and TTFT p50 at most "
                  f"{100 * WIN_TTFT_P50_SHARE:.0f}%):", ""]
        for strategy, v in verdicts.items():
            lines.append(
                f"- {strategy}: {'clear win' if v['clear_win'] else 'NO clear win'} "
                f"(hit rate {v['hit_rate_points_over_best_load_only']:+} points, "
                f"TTFT p50 x{v['ttft_p50_vs_best_load_only']})"
            )
    targets = quality_targets(results)
    if targets:
        lines += ["", "Targets:", ""]
        lines += [f"- {t['target']}: {t['measured']}, {'met' if t['met'] else 'MISSED'}" for t in targets]
    return "\n".join(lines) + "\n"
