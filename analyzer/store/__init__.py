"""DuckDB store: the tables every stage reads and writes; SQL lives in `sql/*.sql`.

The names below come from `analyzer.store.db` on first use: the CLI imports this package
for DEFAULT_DB alone, and `hpa --help` or `--version` need not load DuckDB."""

from importlib import import_module

DEFAULT_DB = "hpa.duckdb"  # the store a command opens when --db is not given

__all__ = ["DEFAULT_DB", "SCHEMA_VERSION", "connect", "load_sql", "require_tables"]


def __getattr__(name: str):
    if name in __all__:
        return getattr(import_module("analyzer.store.db"), name)
    raise AttributeError(f"module 'analyzer.store' has no attribute {name!r}")
