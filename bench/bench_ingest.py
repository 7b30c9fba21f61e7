"""Ingest benchmark: `hpa ingest` against DuckDB's own read_json on the same JSONL file.

Both load the same generated trace into a DuckDB file, each in a fresh process; we print
prompt tokens/s, peak memory and the ratio (timings on shared machines are noisy: read
the ratio). Run: `make bench-ingest` or `python bench/bench_ingest.py --tokens 50000000`.

Then the chat path (`hpa ingest --tokenizer`, the [text] extra) beside the id path on the
same requests: a synthetic gateway log of --chat-conversations multi-turn conversations
(tools/chat_reference/chat_log.py) tokenized with a small model built in code (Qwen2.5's
chat template, tests/traces/chat_helpers.py), then the ids it stored ingested as a
canonical trace; requests/s and prompt tokens/s of each.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from common import measure, mixed_trace

HPA = """
from analyzer.store.ingest import ingest
"""
HPA_RUN = """
r = ingest([{path!r}], db_path={db!r})
result = r.num_stored
"""
DUCKDB = """
import duckdb
con = duckdb.connect({db!r})
"""
DUCKDB_RUN = """
con.execute("CREATE TABLE requests AS SELECT * FROM read_json({path!r}, "
            "format='newline_delimited')")
result = con.execute("SELECT count(*) FROM requests").fetchall()[0][0]
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--tokens",
        type=int,
        default=50_000_000,
        help="minimum prompt tokens in the generated trace",
    )
    parser.add_argument(
        "--chat-conversations",
        type=int,
        default=2000,
        help="conversations of the chat log (0: no chat row)",
    )
    args = parser.parse_args()
    if args.chat_conversations:
        chat_rows(args.chat_conversations)
    path, num_requests, tokens = mixed_trace(args.tokens)
    size_mib = path.stat().st_size / 2**20
    print(
        f"trace: {path.name}, {num_requests:,} requests, {tokens:,} prompt tokens, "
        f"{size_mib:,.0f} MiB"
    )
    with tempfile.TemporaryDirectory() as tmp:
        runs = {}
        for name, setup, body in (
            ("hpa ingest", HPA, HPA_RUN),
            ("duckdb read_json", DUCKDB, DUCKDB_RUN),
        ):
            db = str(Path(tmp) / f"{name.split()[0]}.duckdb")
            runs[name] = measure(setup.format(db=db), body.format(path=str(path), db=db))
            assert runs[name]["result"] == num_requests, (name, runs[name])
    print(f"{'contender':<18} {'seconds':>8} {'M tokens/s':>11} {'peak MiB':>9}")
    for name, run in runs.items():
        print(
            f"{name:<18} {run['seconds']:>8.2f} {tokens / run['seconds'] / 1e6:>11.1f} "
            f"{run['peak_mib']:>9.0f}"
        )
    ours, theirs = runs["hpa ingest"], runs["duckdb read_json"]
    print(f"speed ratio hpa/duckdb: {theirs['seconds'] / ours['seconds']:.2f} (target >= 1.0)")
    third = _peak_on_first_third(path, num_requests)
    print(
        f"hpa peak memory: {third:.0f} MiB on the first third of the file, "
        f"{ours['peak_mib']:.0f} MiB on all of it ({size_mib:.0f} MiB): "
        f"x{ours['peak_mib'] / third:.2f} for x3 the data"
    )


def _peak_on_first_third(path: Path, num_requests: int) -> float:
    """Peak MiB of `hpa ingest` on the first third of the lines: memory must stay flat."""
    with tempfile.TemporaryDirectory() as tmp:
        part = Path(tmp) / "third.jsonl"
        with open(path, "rb") as src, open(part, "wb") as dst:
            for i, line in enumerate(src):
                if i >= num_requests // 3:
                    break
                dst.write(line)
        db = str(Path(tmp) / "third.duckdb")
        return measure(HPA.format(), HPA_RUN.format(path=str(part), db=db))["peak_mib"]


ROOT = Path(__file__).resolve().parents[1]
CHAT_RUN = """
r = ingest([{path!r}], db_path={db!r}, tokenizer={tokenizer!r})
result = r.num_stored
"""


def chat_rows(conversations: int) -> None:
    """The chat path and the id path on the same requests, each in a fresh process."""
    sys.path[:0] = [str(ROOT), str(ROOT / "tools" / "chat_reference")]
    from chat_log import write_chat_log

    from tests.traces.chat_helpers import model_folder

    with tempfile.TemporaryDirectory() as tmp:
        log, tokenizer = Path(tmp) / "chat.jsonl", model_folder(Path(tmp), "qwen")
        num_requests = write_chat_log(log, conversations, seed=1)
        chat_db, ids_db = str(Path(tmp) / "chat.duckdb"), str(Path(tmp) / "ids.duckdb")
        body = CHAT_RUN.format(path=str(log), db=chat_db, tokenizer=str(tokenizer))
        chat = measure(HPA, body)
        ids, tokens = _stored_ids(chat_db, Path(tmp) / "ids.jsonl")
        by_ids = measure(HPA, HPA_RUN.format(path=str(ids), db=ids_db))
        assert chat["result"] == by_ids["result"] == num_requests, (chat, by_ids)
        mib = log.stat().st_size / 2**20, ids.stat().st_size / 2**20
    print(
        f"chat log: {conversations:,} conversations, {num_requests:,} requests, "
        f"{tokens:,} prompt tokens ({mib[0]:.1f} MiB of text, {mib[1]:.1f} MiB as ids)"
    )
    print(f"{'path':<28} {'seconds':>8} {'requests/s':>11} {'M tokens/s':>11} {'peak MiB':>9}")
    for name, run in (("chat (--tokenizer)", chat), ("ids (the same requests)", by_ids)):
        print(
            f"{name:<28} {run['seconds']:>8.2f} {num_requests / run['seconds']:>11,.0f} "
            f"{tokens / run['seconds'] / 1e6:>11.2f} {run['peak_mib']:>9.0f}"
        )


def _stored_ids(db: str, out: Path) -> tuple[Path, int]:
    """The chat store's requests as a canonical JSONL trace (ids, times); its tokens."""
    import duckdb

    con = duckdb.connect(db, read_only=True)
    try:
        rows = con.execute(
            "SELECT request_id, timestamp_s, prompt_token_ids FROM requests ORDER BY line_no"
        ).fetchall()
    finally:
        con.close()
    with open(out, "w") as f:
        for rid, stamp, ids in rows:
            f.write(json.dumps({"request_id": rid, "timestamp": stamp, "prompt_token_ids": ids}))
            f.write("\n")
    return out, sum(len(ids) for _, _, ids in rows)


if __name__ == "__main__":
    main()
