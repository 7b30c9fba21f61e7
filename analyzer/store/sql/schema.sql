-- Tables written by `hpa ingest`. Token ids are int32 lists; hash ids int64 lists.
CREATE TABLE IF NOT EXISTS meta (
    key VARCHAR PRIMARY KEY,
    value VARCHAR NOT NULL
);

CREATE TABLE IF NOT EXISTS sources (
    source_id INTEGER PRIMARY KEY,
    path VARCHAR NOT NULL,
    sha256 VARCHAR NOT NULL,
    format VARCHAR NOT NULL,
    num_read BIGINT NOT NULL,
    num_stored BIGINT NOT NULL,
    num_rejected BIGINT NOT NULL,
    num_prompt_tokens BIGINT NOT NULL,
    ingested_at TIMESTAMP NOT NULL,
    block_size INTEGER,     -- the trace's hash block size in tokens; null for token-id traces
    provenance VARCHAR      -- adapters: which public trace/format, URL, licence (one line)
);

CREATE TABLE IF NOT EXISTS requests (
    request_id VARCHAR NOT NULL,
    source_id INTEGER NOT NULL,
    line_no BIGINT NOT NULL,
    arrival_seq BIGINT,
    timestamp_s DOUBLE,
    prompt_tokens INTEGER NOT NULL,
    -- Token ids are stored as they are, 4 bytes each: DuckDB's compression of them
    -- (bit-packing, ~2.3 bytes a token) took a quarter of an ingest's CPU and slowed
    -- every read of the lists (docs/commands.md, `hpa ingest`).
    prompt_token_ids INTEGER[] USING COMPRESSION uncompressed,
    block_hash_ids BIGINT[],
    block_size INTEGER,
    output_tokens INTEGER,
    output_token_ids INTEGER[] USING COMPRESSION uncompressed,
    model_revision VARCHAR,
    prompt_family VARCHAR,
    prompt_family_source VARCHAR,
    replica VARCHAR,
    conversation_id VARCHAR,
    parent_request_id VARCHAR,
    cache_salt VARCHAR,
    lora_name VARCHAR,
    spec_decode VARCHAR,
    tenant VARCHAR,
    ttft_ms DOUBLE,
    extra JSON,
    cached_tokens INTEGER,  -- engine-reported cached prompt tokens (0..prompt_tokens)
    -- A server log cuts its token lists at this many ids (vLLM's --max-log-len) and this
    -- prompt has exactly that many: it may be longer. Null: whole (docs/traces.md).
    log_cut_tokens INTEGER
);

CREATE TABLE IF NOT EXISTS rejects (
    source_id INTEGER NOT NULL,
    path VARCHAR NOT NULL,
    line_no BIGINT NOT NULL,
    field VARCHAR,
    reason VARCHAR NOT NULL,
    raw_excerpt VARCHAR
);

-- Columns added after schema version 1 shipped: databases created before gain them here
-- (appended last, as in the CREATE statements above, so both layouts are the same).
ALTER TABLE sources ADD COLUMN IF NOT EXISTS block_size INTEGER;
ALTER TABLE sources ADD COLUMN IF NOT EXISTS provenance VARCHAR;
-- Lines that are not records (server-log adapters): counted, neither stored nor rejected.
ALTER TABLE sources ADD COLUMN IF NOT EXISTS num_skipped BIGINT DEFAULT 0;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS cached_tokens INTEGER;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS log_cut_tokens INTEGER;
-- A chat log's ids are the tokenizer's (hpa ingest --tokenizer): which one, the sha256 of its
-- tokenizer.json and of the chat template it rendered with; null for a trace of ids.
ALTER TABLE sources ADD COLUMN IF NOT EXISTS tokenizer VARCHAR;
ALTER TABLE sources ADD COLUMN IF NOT EXISTS tokenizer_sha256 VARCHAR;
ALTER TABLE sources ADD COLUMN IF NOT EXISTS chat_template_sha256 VARCHAR;
