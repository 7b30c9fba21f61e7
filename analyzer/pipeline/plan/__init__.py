"""`hpa plan`: the cheapest cache settings that reach a target useful hit ratio on this trace,
in pool blocks and GiB; with a latency target, the fewest GPUs whose fleet meets it.

Every figure is measured by replaying the stored trace (nothing is stored as a run):

1. Ceilings, from two unbounded replays at each match unit searched: the model's groups
   with retention null (every sparse state kept) and full attention only (the
   `attention_only` bound: no sparse group can veto a hit, nothing is evicted; at a unit
   finer than the block, full attention in blocks of that unit). The shared-prefix ceiling
   is sum(matchable_tokens) / queries of the latter. The highest unit's are kept; a target
   above its bound is unreachable by any setting searched here, and the answer says so.
2. Settings (`planner.py`): retention interval {0, null} x match unit {block size, block
   size / 4 when the model has a Mamba group} x placement {the trace's replicas with its
   routing, the same replicas with prefix-aware routing, one replica holding them all}.
3. Each setting's search (`search.py`, `pool.py`): the unbounded replay (a setting that
   misses there is dropped), the floor (the smallest pool in which every request is
   scheduled, by bisection on the replay of the heaviest requests alone, confirmed on the
   whole trace), then the smallest pool reaching the target: doubling from the floor,
   bisection to within 5%. With --memory-budget the pool never exceeds the budget; a budget
   below every floor is said.
4. The answer (`answer.py`): candidates cheapest first, under load with TTFT p50/p99, mean
   queueing time, the most requests in flight and whether the simulated server kept up
   (`load.py`).

With a latency target (--ttft-p99, --tpot-p99; the concurrent schedule) the plan searches
fleets instead (`fleet.py`): tensor parallel x replicas x router x pool per replica, for the
fewest GPUs (replicas without a GPU) and then the least cache, each answer confirmed by a
replay at it and at the fleet one step smaller.

Cost = cache occupancy of every cache: caches x num_blocks x bytes_per_block (GiB) when the
model preset gives bytes_per_block, else caches x num_blocks (blocks); a cache is one model
revision x replica (one replica under cache_scope shared).

With a dataset and a non-local executor this process holds only the per-request scalars;
the ceiling replays read their partitions in workers, and every setting's search is a task
whose worker reads the whole trace from the dataset once. The answer is the store's.
"""

from analyzer.pipeline.plan.evaluate import Evaluator, Measure
from analyzer.pipeline.plan.load import LoadFigures
from analyzer.pipeline.plan.planner import PlanAsk, plan
from analyzer.pipeline.plan.result import Candidate, PlanResult

__all__ = ["Candidate", "Evaluator", "LoadFigures", "Measure", "PlanAsk", "PlanResult", "plan"]
