-- A connection's default database (store.db.cursor: a cursor reads what its connection
-- reads; an identifier, so the name fills a placeholder, quoted, not a parameter).
USE "{name}";
