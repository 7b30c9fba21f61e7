-- DuckDB's buffer memory limit on this connection ($limit in its units: '256MB').
SET memory_limit = $limit;
