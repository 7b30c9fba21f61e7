-- Each request's inserted sequence: prompt token ids followed by output token ids when
-- the trace has them, or the block hash ids of a hash-id trace (outputs not included).
CREATE OR REPLACE TEMP VIEW match_sequences AS
SELECT
    arrival_seq,
    CASE WHEN block_hash_ids IS NOT NULL THEN block_hash_ids
         ELSE CAST(list_concat(prompt_token_ids, coalesce(output_token_ids, []::INTEGER[]))
                   AS BIGINT[])
    END AS seq
FROM requests;
