-- One SELECT statement's syntax tree as JSON (store.query checks what it calls).
SELECT json_serialize_sql($sql);
