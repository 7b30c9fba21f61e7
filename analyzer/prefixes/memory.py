"""Requests held in Python objects: a `SequenceSource` for tests and benchmarks that need
no database, and the record the reference trie (`trie.py`) reads."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzer.prefixes.source import Chunk, RequestMeta, take_sequences


@dataclass(frozen=True)
class Request:
    """One request in arrival order. Exactly one of `prompt` (token ids) and
    `block_hash_ids` (with `block_size`) is set; `output` only applies to token prompts."""

    request_id: str
    prompt: tuple[int, ...] | None = None
    output: tuple[int, ...] | None = None
    block_hash_ids: tuple[int, ...] | None = None
    block_size: int | None = None
    cache_salt: str | None = None
    lora_name: str | None = None
    replica: str | None = None
    conversation_id: str | None = None
    prompt_family: str | None = None
    model_revision: str | None = None
    num_prompt_tokens: int | None = None  # hash-id traces: when the last block is partial

    @property
    def is_hash(self) -> bool:
        return self.block_hash_ids is not None

    @property
    def query(self) -> tuple[int, ...]:
        return self.block_hash_ids if self.is_hash else self.prompt

    @property
    def inserted(self) -> tuple[int, ...]:
        if self.is_hash:
            return self.block_hash_ids
        return self.prompt + (self.output or ())

    @property
    def namespace(self) -> tuple:
        """What isolates caches: kind, block size, cache_salt and LoRA."""
        return (
            self.is_hash,
            self.block_size if self.is_hash else None,
            self.cache_salt,
            self.lora_name,
        )

    @property
    def prompt_tokens(self) -> int:
        if self.num_prompt_tokens is not None:
            return self.num_prompt_tokens
        if self.is_hash:
            return len(self.block_hash_ids) * self.block_size
        return len(self.prompt)


def _order(keys: list) -> dict:
    return {k: i for i, k in enumerate(sorted(set(keys), key=repr))}


def _dense(keys: list) -> np.ndarray:
    order = _order(keys)
    return np.asarray([order[k] for k in keys], dtype=np.int64)


def meta_for(requests: list[Request]) -> RequestMeta:
    """Namespace ids and lengths of `requests`, as `match_request_meta.sql` computes them."""
    conv = [(r.namespace, r.conversation_id) for r in requests]
    ns_conv = _dense(conv)
    ns_conv[[r.conversation_id is None for r in requests]] = -1
    return RequestMeta(
        ns_any=_dense([r.namespace for r in requests]),
        ns_replica=_dense([(r.namespace, r.replica) for r in requests]),
        ns_conversation=ns_conv,
        query_len=np.asarray([len(r.query) for r in requests], dtype=np.int64),
        insert_len=np.asarray([len(r.inserted) for r in requests], dtype=np.int64),
        block_size=np.asarray([r.block_size if r.is_hash else 0 for r in requests], dtype=np.int64),
        prompt_tokens=np.asarray([r.prompt_tokens for r in requests], dtype=np.int64),
        namespaces=tuple(_order([r.namespace for r in requests])),
    )


class MemorySource:
    """A `SequenceSource` over a list of `Request`s (or over ready flat arrays)."""

    def __init__(self, meta: RequestMeta, flat: np.ndarray, offsets: np.ndarray) -> None:
        self.meta, self.flat, self.offsets = meta, np.asarray(flat, dtype=np.int64), offsets
        self.num_fetches = 0

    @classmethod
    def from_requests(cls, requests: list[Request]) -> MemorySource:
        lens = np.asarray([len(r.inserted) for r in requests], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        flat = np.fromiter(
            (t for r in requests for t in r.inserted), dtype=np.int64, count=int(offsets[-1])
        )
        return cls(meta_for(requests), flat, offsets)

    def read(self, start: int, stop: int) -> Chunk:
        a, b = int(self.offsets[start]), int(self.offsets[stop])
        return Chunk(start, stop, self.flat[a:b], self.offsets[start : stop + 1] - a)

    def fetch(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.num_fetches += 1
        return take_sequences(self.flat, self.offsets, np.asarray(ids, dtype=np.int64))
