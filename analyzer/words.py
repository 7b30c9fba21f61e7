"""Numbers in words, the same in every message, table and report line."""

from __future__ import annotations


def plural(n: int, word: str, many: str | None = None) -> str:
    """'1 request', '2 requests', '1,024 queries' (`many`: the plural where not word + s)."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def signed_term(value: float, spec: str) -> str:
    """'+ 0.02583' or '- 0.01680': a term that follows another in a formula."""
    return f"{'-' if value < 0 else '+'} {abs(value):{spec}}"
