"""DuckDB store: the tables every stage reads and writes; SQL lives in `sql/*.sql`."""

from analyzer.store.db import SCHEMA_VERSION, connect, load_sql, require_tables

__all__ = ["SCHEMA_VERSION", "connect", "load_sql", "require_tables"]
