"""How the commands print text that may hold stored fields (docs/commands.md#what-is-printed).

Lines for people go through `say`: control characters shown as `\\x1b` (`words.shown`), the
same bytes on a terminal, a pipe or a log. Data (Prometheus text, CSV, JSON) is echoed with
`color=True` where it is printed, so click never strips an escape sequence from it.
"""

from __future__ import annotations

import click

from analyzer.words import shown


def say(line: str, err: bool = False) -> None:
    """Print one line for people (stdout, or stderr with `err`), its controls shown."""
    click.echo(shown(line), err=err, color=True)


# Families x revisions a command prints at most (`hpa replay`, `hpa compare`): the largest by
# queried tokens; one line then says how many more and where every one is listed (Mooncake's
# 2,212 derived families printed 2,217 lines).
FAMILY_ROWS = 20


def more_families_line(hidden: int, queried_tokens: int, where: str, sides: str = "") -> str:
    """'... and 12 more families x revisions (26,466 queried tokens): WHERE' (`sides`: words
    after the tokens, e.g. ', both sides')."""
    what = "family x revision" if hidden == 1 else "families x revisions"
    return f"... and {hidden:,} more {what} ({queried_tokens:,} queried tokens{sides}): {where}"
