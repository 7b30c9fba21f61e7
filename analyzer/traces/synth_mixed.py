"""Token sampling for synthetic traces, and the `mixed` scenario (chat, multi-turn, RAG, agent).

The public entry point is :func:`analyzer.traces.synth.generate`; this module holds the vocabulary
model every scenario draws from and the record builder of the realistic multi-family trace.
All lengths are in tokens, times in seconds, `ttft_ms` in milliseconds.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from analyzer.errors import ConfigError

VOCAB_SIZE = 151_000
# Token ids follow a Zipf law over the vocabulary with frequent tokens at small ids, as BPE merge
# order roughly gives; it is also what keeps the gzip samples small (about 1.8 bytes per token).
_ZIPF_EXPONENT = 1.0
_ZIPF_TABLE_BITS = 21  # 2^21 quantiles: fine enough that every one of the 151,000 ids can occur


def require(ok: bool, message: str) -> None:
    """Raise ConfigError(`message`) unless `ok` (config validation)."""
    if not ok:
        raise ConfigError(message)


@functools.lru_cache(maxsize=1)
def _zipf_table() -> np.ndarray:
    """Quantile table of the token distribution: uniform index -> token id (int32)."""
    weights = 1.0 / np.arange(1, VOCAB_SIZE + 1, dtype=np.float64) ** _ZIPF_EXPONENT
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    quantiles = (np.arange(1 << _ZIPF_TABLE_BITS, dtype=np.float64) + 0.5) / (1 << _ZIPF_TABLE_BITS)
    table = np.searchsorted(cdf, quantiles).astype(np.int32)
    table.flags.writeable = False
    return table


def random_tokens(rng: np.random.Generator, n: int) -> np.ndarray:
    """`n` token ids (int32 in [0, VOCAB_SIZE)), drawn in one vectorised step."""
    return _zipf_table()[rng.integers(0, 1 << _ZIPF_TABLE_BITS, size=n)]


def distinct_tokens(
    rng: np.random.Generator, n: int, banned: set[int], *, advice: str
) -> np.ndarray:
    """`n` token ids, all different and none in `banned` (which then holds them too).

    Used as the first token after a shared prefix so that the shared part ends exactly there.
    Where the vocabulary has fewer left, a ConfigError ending in `advice` (the scenario's
    parameters that ask for fewer).
    """
    picked: list[int] = []
    if VOCAB_SIZE - len(banned) < n:  # drawing would never end
        raise ConfigError(
            f"the generator ran out of distinct token ids: {len(banned):,} of its {VOCAB_SIZE:,} "
            f"{'is' if len(banned) == 1 else 'are'} taken (shared prefixes' tokens and the first "
            f"token after each), {n:,} more "
            f"{'is' if n == 1 else 'are'} needed; {advice}"
        )
    while len(picked) < n:
        for token in rng.integers(0, VOCAB_SIZE, size=2 * n + 8).tolist():
            if token not in banned and len(picked) < n:
                banned.add(token)
                picked.append(token)
    return np.asarray(picked, dtype=np.int32)


REVISIONS = ("qwen3-next-80b-a3b@2026-10", "qwen3-next-80b-a3b@2026-11")
REPLICAS = ("r0", "r1")
TENANTS = ("acme", "globex")
FAMILIES = ("chat", "multi_turn", "rag", "agent")
_FAMILY_WEIGHTS = (0.48, 0.30, 0.16, 0.06)
_FIRST_TENANT_SHARE = 0.7
# Below 1 - 1/mean_turns new sessions would outpace finished ones and the open pool would fill up.
_CONTINUE_SHARE = 0.85

# Length ranges [lo, hi] in tokens.
_SYSTEM_PROMPT = (300, 1200)
_CHAT_MESSAGE = (20, 300)
_SINGLE_OUTPUT = (30, 500)
_RAG_SYSTEM = (100, 200)
_DOCUMENT = (200, 600)
_DOCS_PER_QUERY = (2, 4)
_RAG_QUESTION = (15, 80)
_TOOL_SCHEMA = (2000, 4000)
_NUM_TOOL_SCHEMAS = 2


@dataclass(frozen=True)
class _Shape:
    """One session family: turns per session, and token ranges of each turn's parts."""

    turns: tuple[int, int]
    first: tuple[int, int]  # new content of turn 1 (user message / agent task)
    later: tuple[int, int]  # new content of later turns (user message / tool result)
    output: tuple[int, int]  # model output (answer / tool call), part of the next prompt


_SHAPES = {
    "multi_turn": _Shape(turns=(2, 8), first=(20, 200), later=(20, 200), output=(30, 250)),
    "agent": _Shape(turns=(2, 6), first=(80, 400), later=(100, 600), output=(20, 150)),
}


@dataclass(frozen=True)
class MixedConfig:
    """Knobs of the `mixed` scenario (token counts; `rate_per_s` in requests per second).

    `scale_tokens`, when set, replaces `num_requests`: requests are produced until their prompts
    total at least that many tokens. Revision ``@2026-10`` serves the first half of the requests
    (of the prompt tokens with `scale_tokens`), ``@2026-11`` the rest, as after a deploy.
    """

    num_requests: int = 3000
    scale_tokens: int | None = None
    rate_per_s: float = 4.0
    num_system_prompts: int = 4
    num_documents: int = 300
    popularity_exponent: float = 1.1
    salt_fraction: float = 0.03
    max_open_sessions: int = 64

    def __post_init__(self) -> None:
        require(self.num_requests >= 1, "num_requests must be >= 1")
        require(self.scale_tokens is None or self.scale_tokens >= 1, "scale_tokens must be >= 1")
        require(self.rate_per_s > 0, "rate_per_s must be > 0")
        require(self.num_system_prompts >= 1, "num_system_prompts must be >= 1")
        require(self.num_documents >= _DOCS_PER_QUERY[1], "num_documents must be >= 4")
        require(self.popularity_exponent >= 0, "popularity_exponent must be >= 0")
        require(0 <= self.salt_fraction <= 1, "salt_fraction must be in [0, 1]")
        require(self.max_open_sessions >= 1, "max_open_sessions must be >= 1")


def ttft_ms(prompt_tokens: int, rng: np.random.Generator) -> float:
    """Synthetic TTFT (ms): ``(30 + 0.09 P + 2e-6 P^2) * exp(0.15 N(0,1))`` for a P-token prompt.

    Linear prefill cost plus a small attention-quadratic term, with log-normal noise; it ignores
    cache hits on purpose, as the trace does not know them.
    """
    base = 30.0 + 0.09 * prompt_tokens + 2e-6 * prompt_tokens**2
    return round(base * math.exp(0.15 * float(rng.standard_normal())), 3)


def _cumulative(weights: np.ndarray) -> np.ndarray:
    cum = np.cumsum(weights, dtype=np.float64)
    cum /= cum[-1]
    cum[-1] = 1.0  # rng.random() < 1, so the last index is always reachable and never exceeded
    return cum


def _popularity(n: int, exponent: float) -> np.ndarray:
    """Zipf-like probabilities of `n` items, item 0 the most popular."""
    weights = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** exponent
    return weights / weights.sum()


@dataclass(eq=False)
class _Session:
    """An open conversation or agent run; `context` is what its next prompt starts with."""

    conversation_id: str
    who: dict
    turns_left: int
    context: np.ndarray
    last_request_id: str | None = None


class _MixedTrace:
    """Shared content (drawn once) and open sessions; builds one request's draft at a time."""

    def __init__(self, cfg: MixedConfig, rng: np.random.Generator) -> None:
        self.cfg, self.rng = cfg, rng
        popularity = _popularity(cfg.num_system_prompts, cfg.popularity_exponent)
        self.system_cum = _cumulative(popularity)
        self.system_prompts = [self.tokens(_SYSTEM_PROMPT) for _ in range(cfg.num_system_prompts)]
        self.rag_system = self.tokens(_RAG_SYSTEM)
        self.doc_popularity = _popularity(cfg.num_documents, cfg.popularity_exponent)
        self.documents = [self.tokens(_DOCUMENT) for _ in range(cfg.num_documents)]
        self.tool_schemas = [self.tokens(_TOOL_SCHEMA) for _ in range(_NUM_TOOL_SCHEMAS)]
        self.open: dict[str, list[_Session]] = {family: [] for family in _SHAPES}
        self.session_ids = itertools.count()

    def pick(self, cumulative: np.ndarray) -> int:
        """An index drawn with the probabilities whose cumulative sums are `cumulative`."""
        return int(np.searchsorted(cumulative, self.rng.random(), side="right"))

    def length(self, bounds: tuple[int, int]) -> int:
        return int(self.rng.integers(bounds[0], bounds[1] + 1))

    def tokens(self, bounds: tuple[int, int]) -> np.ndarray:
        return random_tokens(self.rng, self.length(bounds))

    def who(self) -> dict:
        """Tenant, replica and (for a few percent) a cache salt private to the tenant."""
        rng = self.rng
        tenant = TENANTS[0] if rng.random() < _FIRST_TENANT_SHARE else TENANTS[1]
        salted = rng.random() < self.cfg.salt_fraction
        return {
            "tenant": tenant,
            "replica": REPLICAS[int(rng.integers(len(REPLICAS)))],
            "cache_salt": f"{tenant}-private" if salted else None,
        }

    def draft(self, family: str, request_id: str) -> dict:
        """Fields of one request of `family`: who, session ids, prompt and output."""
        if family in _SHAPES:
            return self.session_turn(family, request_id)
        if family == "chat":
            system = self.system_prompts[self.pick(self.system_cum)]
            prompt = np.concatenate([system, self.tokens(_CHAT_MESSAGE)])
        else:
            count = self.length(_DOCS_PER_QUERY)
            picks = self.rng.choice(
                len(self.documents), count, replace=False, p=self.doc_popularity
            )
            docs = [self.documents[k] for k in picks.tolist()]
            prompt = np.concatenate([self.rag_system, *docs, self.tokens(_RAG_QUESTION)])
        return {**self.who(), "prompt": prompt, "output_tokens": self.length(_SINGLE_OUTPUT)}

    def start_session(self, family: str) -> _Session:
        """A new conversation (on a shared system prompt) or agent run (on a tool schema)."""
        if family == "agent":
            context = self.tool_schemas[int(self.rng.integers(_NUM_TOOL_SCHEMAS))]
            name = "agent"
        else:
            context = self.system_prompts[self.pick(self.system_cum)]
            name = "conv"
        turns = self.length(_SHAPES[family].turns)
        return _Session(f"{name}-{next(self.session_ids):06d}", self.who(), turns, context)

    def session_turn(self, family: str, request_id: str) -> dict:
        """Next turn = previous prompt + previous output + new content (same replica, tenant)."""
        rng, shape, sessions = self.rng, _SHAPES[family], self.open[family]
        if sessions and (
            len(sessions) >= self.cfg.max_open_sessions or rng.random() < _CONTINUE_SHARE
        ):
            session = sessions[int(rng.integers(len(sessions)))]
            new = self.tokens(shape.later)
        else:
            session = self.start_session(family)
            sessions.append(session)
            new = self.tokens(shape.first)
        prompt = np.concatenate([session.context, new])
        output = self.tokens(shape.output)
        draft = {
            **session.who,
            "conversation_id": session.conversation_id,
            "parent_request_id": session.last_request_id,
            "prompt": prompt,
            "output": output,
            "output_tokens": len(output),
        }
        session.context = np.concatenate([prompt, output])
        session.last_request_id = request_id
        session.turns_left -= 1
        if session.turns_left == 0:
            sessions.remove(session)
        return draft


def _record(
    request_id: str,
    timestamp: float,
    revision: str,
    family: str,
    draft: dict,
    rng: np.random.Generator,
) -> dict:
    """A canonical record, fields in a fixed order, absent ones left out."""
    prompt, output = draft.pop("prompt"), draft.pop("output", None)
    output_tokens = draft.pop("output_tokens")
    record = {
        "request_id": request_id,
        "timestamp": timestamp,
        "model_revision": revision,
        "prompt_family": family,
    }
    record.update((key, value) for key, value in draft.items() if value is not None)
    record["prompt_token_ids"] = prompt
    if output is not None:
        record["output_token_ids"] = output
    record["output_tokens"] = output_tokens
    record["ttft_ms"] = ttft_ms(len(prompt), rng)
    return record


def mixed_records(cfg: MixedConfig, rng: np.random.Generator) -> Iterator[dict]:
    """The `mixed` trace, one record at a time (memory bounded by the open sessions).

    Arrivals are Poisson at `rate_per_s`; timestamps are rounded to microseconds.
    """
    trace = _MixedTrace(cfg, rng)
    family_cum = _cumulative(np.asarray(_FAMILY_WEIGHTS))
    timestamp, emitted = 0.0, 0
    for index in itertools.count():
        if cfg.scale_tokens is None:
            if index >= cfg.num_requests:
                return
            later_half = 2 * index >= cfg.num_requests
        else:
            if emitted >= cfg.scale_tokens:
                return
            later_half = 2 * emitted >= cfg.scale_tokens
        timestamp += float(rng.exponential(1.0 / cfg.rate_per_s))
        family = FAMILIES[int(np.searchsorted(family_cum, rng.random(), side="right"))]
        request_id = f"mixed-{index:07d}"
        draft = trace.draft(family, request_id)
        emitted += len(draft["prompt"])
        revision = REVISIONS[int(later_half)]
        yield _record(request_id, round(timestamp, 6), revision, family, draft, rng)
