-- The sources row of a completed file: written last, it marks the file as ingested.
INSERT INTO sources (source_id, path, sha256, format, num_read, num_stored, num_rejected,
                     num_prompt_tokens, ingested_at, block_size, provenance, num_skipped,
                     tokenizer, tokenizer_sha256, chat_template_sha256)
VALUES ($source_id, $path, $sha256, $format, $num_read, $num_stored, $num_rejected,
        $num_prompt_tokens, current_timestamp, $block_size, $provenance, $num_skipped,
        $tokenizer, $tokenizer_sha256, $chat_template_sha256);
