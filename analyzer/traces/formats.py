"""Names of the input formats `hpa ingest --format` accepts, in help order: the readers of
`readers.py`, then the adapters' (`adapters.NAMES`, which imports none of them).

Apart from readers.py (which imports pyarrow and every adapter) so the CLI can list them
without importing the readers; tests/traces/test_formats.py checks both agree.
"""

from analyzer.traces.adapters import NAMES

FORMATS = ("jsonl", "parquet", "csv", *NAMES)
