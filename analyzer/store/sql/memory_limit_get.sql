-- DuckDB's buffer memory limit on this connection, as it prints it ('18.8 GiB').
SELECT current_setting('memory_limit');
