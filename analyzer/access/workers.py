"""`map_partitions` as the drivers call it: the compiled kernels are loaded (or, where the
installed cache does not fit this machine, compiled once) in the driver before any worker
starts, so forked workers inherit them and Ray's find them in numba's cache: no worker
compiles (docs/contributing.md, "Compiled kernels"). `map_match_partitions` for matching,
which runs the C radix trees and NumPy: nothing of numba's to load (0.5 s, 160 MiB)."""

from functools import partial

from analyzer.executors import map_partitions as _map_partitions
from analyzer.kernels import load_all

map_partitions = partial(_map_partitions, prepare=load_all)
map_match_partitions = _map_partitions
