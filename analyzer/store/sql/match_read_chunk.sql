-- Inserted sequences of requests with $start <= arrival_seq < $stop, in arrival order.
SELECT seq
FROM match_sequences
WHERE arrival_seq >= $start AND arrival_seq < $stop
ORDER BY arrival_seq;
