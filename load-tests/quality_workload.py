"""The routing-quality benchmark's settings and its seeded workload: tenants
with long system prompts, users with profiles, multi-turn conversations
(see quality.py)."""

from __future__ import annotations

import dataclasses
import random

# Tokens per KV block, on the engines and in the gateway's KV index.
BLOCK_SIZE = 16


@dataclasses.dataclass
class Settings:
    strategies: list[str]
    engines: int
    tenants: int
    system_tokens: int
    users_per_tenant: int
    profile_tokens: int
    turns_min: int
    turns_max: int
    message_tokens_min: int
    message_tokens_max: int
    answer_tokens_min: int
    answer_tokens_max: int
    requests: int
    concurrency: int
    seed: int
    ttft_ms: int
    prefill_us_per_token: int
    token_delay_ms: int
    kv_blocks: int
    block_size: int
    quick: bool
    # Engines prefill this many requests at once; the rest queue (0: unlimited).
    prefill_slots: int = 0
    # Each other decoding sequence slows a token by this many percent.
    decode_slowdown_pct: int = 0
    # Tenant popularity: tenant t is picked with weight 1 / (t + 1) ** skew (0: uniform).
    tenant_skew: float = 0.0
    # Tokens of a preamble every tenant's system prompt starts with.
    preamble_tokens: int = 0
    # A model directory the engines tokenize with (None: the simulated tokenizer).
    tokenizer: str | None = None
    # Clients send text only: the routes tokenize with `tokenizer`.
    text_only: bool = False
    # Tokens of the engines' tokenizer per word or punctuation mark of the
    # generated text (1.0 for the simulated tokenizer; measured for a model
    # directory), so that every size above is in the engines' tokens.
    tokens_per_word: float = 1.0
    # The cache_aware route's `cache_guard.min_load` (None: the default).
    cache_aware_min_load: int | None = None


@dataclasses.dataclass
class Turn:
    user: str
    max_tokens: int


@dataclasses.dataclass
class Conversation:
    index: int
    tenant: int
    user: int
    turns: list[Turn]


@dataclasses.dataclass
class Workload:
    system_prompts: list[str]
    conversations: list[Conversation]

    def requests(self) -> int:
        return sum(len(c.turns) for c in self.conversations)


class Words:
    """Seeded filler text whose token count is known: every word is 2-9
    letters (one token of the simulated tokenizer, which cuts letter runs at
    10) and every punctuation mark one token. A model directory's tokenizer
    cuts these words into several tokens each: `tokens_per_word` (measured,
    see `calibrate`) scales the text so that its size is still counted in
    the engines' tokens."""

    SYLLABLES = [
        "ka", "lo", "mi", "ren", "sta", "vor", "qui", "bel", "dan", "est",
        "for", "gal", "hin", "jot", "lux", "mor", "nev", "pra", "sil", "tur",
    ]

    def __init__(self, rng: random.Random, size: int = 3000, tokens_per_word: float = 1.0):
        self.rng = rng
        self.tokens_per_word = tokens_per_word
        vocabulary = set()
        while len(vocabulary) < size:
            word = "".join(rng.choice(self.SYLLABLES) for _ in range(rng.randint(1, 3)))
            vocabulary.add(word[:9])
        self.vocabulary = sorted(vocabulary)

    def text(self, tokens: int) -> str:
        """About `tokens` tokens of sentences (exactly with the simulated
        tokenizer, give or take the final period)."""
        out: list[str] = []
        count = 0
        words = tokens / self.tokens_per_word
        while count < words:
            length = self.rng.randint(6, 18)
            sentence = [self.rng.choice(self.vocabulary) for _ in range(length)]
            if length > 10 and self.rng.random() < 0.5:
                sentence[length // 2] += ","
                count += 1
            out.append(" ".join(sentence).capitalize() + ".")
            count += length + 1
        return " ".join(out)


def build_workload(s: Settings) -> Workload:
    """The same conversations, in the same order, for every strategy."""
    rng = random.Random(s.seed)
    words = Words(rng, tokens_per_word=s.tokens_per_word)
    preamble = words.text(s.preamble_tokens) + "\n" if s.preamble_tokens > 0 else ""
    system_prompts = [
        preamble
        + f"You are the assistant of tenant {t}. Follow the policy below.\n"
        + words.text(s.system_tokens - 14)
        for t in range(s.tenants)
    ]
    popularity = [1.0 / (t + 1) ** s.tenant_skew for t in range(s.tenants)]
    profiles = {
        (t, u): f"I am user {u} of tenant {t}. My profile: " + words.text(s.profile_tokens - 12)
        for t in range(s.tenants)
        for u in range(s.users_per_tenant)
    }
    conversations: list[Conversation] = []
    total = 0
    while total < s.requests:
        tenant = rng.choices(range(s.tenants), weights=popularity)[0]
        user = rng.randrange(s.users_per_tenant)
        n = min(rng.randint(s.turns_min, s.turns_max), s.requests - total)
        turns = []
        for k in range(n):
            question = words.text(rng.randint(s.message_tokens_min, s.message_tokens_max))
            text = f"{profiles[(tenant, user)]}\n{question}" if k == 0 else question
            turns.append(Turn(text, rng.randint(s.answer_tokens_min, s.answer_tokens_max)))
        conversations.append(Conversation(len(conversations), tenant, user, turns))
        total += n
    return Workload(system_prompts, conversations)


def calibration_text(s: Settings, words: int = 3000) -> tuple[str, int]:
    """Text of the workload's vocabulary and its size in the simulated
    tokenizer's tokens: what `calibrate` tokenizes with the model directory."""
    sample = Words(random.Random(s.seed)).text(words)
    return sample, len(sample.split()) + sum(sample.count(p) for p in ",.")


def expected_answer(tokens: int) -> str:
    """The fake engine's deterministic output (crates/rolter-fake-llm/src/model.rs)."""
    return " ".join(f"tok{i}" for i in range(tokens))
