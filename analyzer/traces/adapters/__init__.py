"""Adapters: readers for public trace formats that translate each record to the canonical one.

Each adapter is a reader (path, stream, progress) -> Batches, like those in `readers.py`,
and hands canonical records to `batches.exact_batch`, so line numbers, rejects and
read = stored + rejected work exactly as for canonical JSONL.
"""
