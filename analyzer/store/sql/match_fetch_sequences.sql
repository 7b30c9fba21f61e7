-- Inserted sequences of the requests listed in the registered relation match_wanted.
SELECT s.arrival_seq, s.seq
FROM match_sequences AS s
SEMI JOIN match_wanted AS w ON s.arrival_seq = w.arrival_seq
ORDER BY s.arrival_seq;
