-- Rows an ingest killed midway left: a file without its sources row (written last), or
-- stored requests not yet given their arrival order (set when the ingest command ends).
SELECT
    (SELECT count(*) FROM requests
     WHERE arrival_seq IS NULL OR source_id NOT IN (SELECT source_id FROM sources))
    + (SELECT count(*) FROM rejects WHERE source_id NOT IN (SELECT source_id FROM sources));
