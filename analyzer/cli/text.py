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
