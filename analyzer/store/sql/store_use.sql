-- The attached store (store_attach) as the connection's default database.
USE hpa_store;
