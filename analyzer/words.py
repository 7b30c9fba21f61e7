"""Numbers in words, the same in every message, table and report line; stored text as people
are shown it (`shown`, `capped`)."""

from __future__ import annotations

import hashlib

# C0 controls, DEL and C1 controls (ESC starts terminal escape sequences; C1 CSI does too;
# NUL ends a C string): text for people shows them as `\x1b`, so a stored field can neither
# drive the terminal nor put a raw control byte in the report.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(32), *range(127, 160))}

# A label in the report shows at most this many of its characters (docs/report.md).
LABEL_MAX_CHARS = 200


def plural(n: int, word: str, many: str | None = None) -> str:
    """'1 request', '2 requests', '1,024 queries' (`many`: the plural where not word + s)."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def signed_term(value: float, spec: str) -> str:
    """'+ 0.02583' or '- 0.01680': a term that follows another in a formula."""
    return f"{'-' if value < 0 else '+'} {abs(value):{spec}}"


def shown(text: str) -> str:
    """`text` with every control character (C0 newline and tab included, DEL, C1) written
    `\\xNN`: 'a\\x1b[31mb' for 'a', ESC, '[31mb'. Other characters are kept."""
    return text.translate(_CONTROLS)


def capped(text: str, limit: int = LABEL_MAX_CHARS) -> str:
    """`text` as `shown`, cut to its first `limit` characters when longer, with its length
    and the first 8 hex digits of its UTF-8 sha256 (two long labels that start alike stay
    apart; DuckDB's sha256() finds the stored one): 'FF…FF… [1,048,577 characters, sha256
    3a7bd3e2]'."""
    if len(text) <= limit:
        return shown(text)
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{shown(text[:limit])}… [{len(text):,} characters, sha256 {digest}]"
