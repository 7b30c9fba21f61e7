"""Check a chat log's ids against transformers and time both: hpa's path (Hugging Face
tokenizers + jinja2, analyzer.traces.text) and transformers' apply_chat_template on every
request of LOG, with the model folder MODEL. Run where transformers is installed:

    /tmp/tx/bin/python tools/chat_reference/compare_transformers.py LOG MODEL

Prints the number of requests whose ids differ (0 expected) and each path's requests/s.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def requests(log: Path) -> list[tuple[list, list | None]]:
    out = []
    for line in log.read_text(encoding="utf-8").splitlines():
        body = json.loads(line)["request"]
        out.append((body["messages"], body.get("tools")))
    return out


def ours(model: Path, chats: list) -> tuple[float, list]:
    from analyzer.traces.text import load

    start = time.perf_counter()
    tok = load(str(model))
    ids = tok.chat_ids([tok.render(m, t) for m, t in chats])
    return time.perf_counter() - start, ids


def theirs(model: Path, chats: list) -> tuple[float, list]:
    import transformers

    start = time.perf_counter()
    tok = transformers.AutoTokenizer.from_pretrained(str(model))
    ids = [
        list(tok.apply_chat_template(m, tools=t, add_generation_prompt=True, return_dict=False))
        for m, t in chats
    ]
    return time.perf_counter() - start, ids


def main() -> None:
    log, model = Path(sys.argv[1]), Path(sys.argv[2])
    chats = requests(log)
    ours_s, ours_ids = ours(model, chats)
    theirs_s, theirs_ids = theirs(model, chats)
    differ = sum(a != b for a, b in zip(ours_ids, theirs_ids, strict=True))
    tokens = sum(map(len, ours_ids))
    print(f"{len(chats):,} requests, {tokens:,} tokens; ids that differ: {differ}")
    for name, seconds in (("tokenizers + jinja2 (hpa)", ours_s), ("transformers", theirs_s)):
        print(f"{name:<27} {seconds:6.2f} s  {len(chats) / seconds:8,.0f} requests/s")


if __name__ == "__main__":
    main()
