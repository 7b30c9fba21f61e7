-- Prompt tokens a plan over the current side replays: every request before the window's end
-- ($end; the whole trace when $windowed is false). `hpa compare` runs the plan itself below
-- a bound.
SELECT coalesce(sum(prompt_tokens), 0)
FROM requests
WHERE NOT $windowed OR timestamp_s < $end;
