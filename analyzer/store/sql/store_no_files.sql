-- After the store is attached: the connection may touch no other file.
SET enable_external_access = false;
