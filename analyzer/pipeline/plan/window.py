"""`hpa plan --window START..END`: plan for the requests of one time window, as `hpa compare`
selects them (seconds of the trace's timestamps or RFC 3339, half-open, an empty end open).

The requests before the window are replayed as its warm-up (the cache a window starts with
is what came before it), never measured; the requests after it are not replayed.
"""

from __future__ import annotations

from analyzer.errors import ConfigError
from analyzer.metrics.compare import parse_window, seconds_text


def window_bounds(text: str) -> tuple[float, float]:
    """(start_s, end_s) of the window `text` (ConfigError when it is not one)."""
    w = parse_window(text)
    return w.start_s, w.end_s


def up_to_window_end(trace, text: str):
    """The trace's requests that arrived before the window's end (in arrival order).

    Raises:
        ConfigError: the requests have no timestamps, or none is in the window.
    """
    start, end = window_bounds(text)
    stamps = trace.columns["timestamp_s"]
    known = [t for t in stamps if t is not None]
    if not known:
        raise ConfigError(
            "the requests have no timestamps, so --window selects nothing; plan the whole "
            "trace (no --window) or its later part (--measure-from)"
        )
    if not any(start <= t < end for t in known):
        raise ConfigError(
            f"window {text} holds no requests (their timestamps span "
            f"{seconds_text(min(known))}..{seconds_text(max(known))} s)"
        )
    return trace.take([i for i, t in enumerate(stamps) if t is not None and t < end])
