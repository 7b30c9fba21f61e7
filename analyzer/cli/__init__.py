"""The `hpa` command line: each command parses options, calls one library function, prints.

`base` holds the group, the shared options and helpers; the other modules register their
commands on the group when imported here.
"""

import gc
import os

# Set before NumPy loads (the commands import it). A command is one short process whose data
# live in NumPy and Arrow buffers, so two of Python's defaults only cost it time (a replay of
# 70 M tokens: 0.93x the wall time, 0.91x the CPU without them, paired runs):
# - OpenBLAS starts a thread a core that spins after start-up; hpa does no linear algebra that
#   a second thread would speed up.
# - The cyclic collector walked the ~100,000 objects of numba's and pyarrow's modules every
#   700 allocations; every 50,000 is still often for what cycles a command leaves.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
gc.set_threshold(50_000, 20, 20)

from analyzer.cli import analysis, checks, data, models, plan, planning  # noqa: E402, F401  (registers commands)
from analyzer.cli.base import cli, main  # noqa: E402

__all__ = ["cli", "main"]
