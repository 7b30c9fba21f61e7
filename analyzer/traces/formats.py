"""Names of the input formats `hpa ingest --format` accepts, in help order.

Kept apart from readers.py (which imports pyarrow and every adapter) so the CLI can list
them without importing the readers; tests/traces/test_formats.py checks both agree.
"""

FORMATS = (
    "jsonl",
    "parquet",
    "csv",
    "mooncake",
    "tracelab",
    "vllm_log",
    "sglang_log",
    "weka",
    "ragpulse",
    "bailian",
)
