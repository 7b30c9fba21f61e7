-- What `hpa match --out FILE` exports.
SELECT * FROM prefix_matches ORDER BY arrival_seq;
