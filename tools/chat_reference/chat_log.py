"""Write a synthetic OpenAI-gateway chat log: multi-turn conversations as request/response
pairs, each turn's request carrying the whole conversation so far (as a chat client sends
it), a few tenants' system prompts shared across conversations, tools on some.

No public trace in ../shared/external_traces holds text (they hold token counts or block
hashes), so the text is made of words drawn from a fixed list with a seeded generator.

    python tools/chat_reference/chat_log.py OUT.jsonl --conversations 300
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

WORDS = (
    "the cache keeps prefix of every prompt it has seen a system is shared by request tenant "
    "what weather in paris today sunny warm call tool with city as argument tokens are counted "
    "blocks sixteen block hit or missed whole you helpful assistant answer briefly exactly "
    "model server log gateway reply user turn history question result table figure plan "
    "memory layer state window attention mamba hybrid replay match sweep report queue time "
    "first token latency throughput capacity policy eviction lost junction family"
).split()
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a term up in the manual.",
            "parameters": {
                "type": "object",
                "properties": {"term": {"type": "string"}},
                "required": ["term"],
            },
        },
    }
]


def _text(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))).capitalize() + "."


def conversations(num: int, *, seed: int = 0, tenants: int = 4) -> list[list[dict]]:
    """`num` conversations, each the list of its turns' log records (times in seconds)."""
    rng = random.Random(seed)
    systems = [_text(rng, 120, 200) for _ in range(tenants)]
    out = []
    for c in range(num):
        start = rng.uniform(0, num * 2.0)
        messages = [{"role": "system", "content": systems[c % tenants]}]
        tools = TOOLS if c % 5 == 0 else None
        turns = []
        for t in range(rng.randint(2, 6)):
            messages.append({"role": "user", "content": _text(rng, 8, 60)})
            reply = _text(rng, 20, 80)
            request = {"model": "demo", "messages": list(messages)}
            if tools:
                request["tools"] = tools
            turns.append(
                {
                    "request_id": f"conv{c}-turn{t}",
                    "timestamp": round(start + t * 30.0 + rng.uniform(0, 10), 3),
                    "request": request,
                    "response": {
                        "id": f"chatcmpl-{c}-{t}",
                        "choices": [{"message": {"role": "assistant", "content": reply}}],
                        "usage": {"completion_tokens": len(reply.split())},
                    },
                }
            )
            messages.append({"role": "assistant", "content": reply})
        out.append(turns)
    return out


def write_chat_log(path: Path, num: int, *, seed: int = 0) -> int:
    """The log of `num` conversations, in arrival order; returns the number of requests."""
    records = sorted((r for conv in conversations(num, seed=seed) for r in conv),
                     key=lambda r: r["timestamp"])  # fmt: skip
    with open(path, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return len(records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--conversations", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    n = write_chat_log(args.out, args.conversations, seed=args.seed)
    print(f"wrote {n:,} requests of {args.conversations:,} conversations to {args.out}")


if __name__ == "__main__":
    main()
