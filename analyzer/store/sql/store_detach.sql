-- Let go of the attached store (store_attach), so that it may be attached again
-- writable in the same DuckDB instance (store.db.open_to_store).
USE memory;
DETACH DATABASE IF EXISTS hpa_store;
