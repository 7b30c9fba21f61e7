"""The `hpa` command line: each command parses options, calls one library function, prints.

`base` holds the group, the shared options and helpers; the other modules register their
commands on the group when imported here.
"""

from analyzer.cli import analysis, checks, data, planning  # noqa: F401  (registers commands)
from analyzer.cli.base import cli, main

__all__ = ["cli", "main"]
