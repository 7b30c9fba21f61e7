-- The connection's default database (store.db.cursor gives a cursor the same one).
SELECT current_database();
