"""hpa against kvcache-simulator (PyPI, KVCache.AI) on the Mooncake conversation trace.

Both tools do the same job here: a dense (attention-only) prefix cache of 512-token blocks
replayed in trace order, hit ratio measured over the last half of requests. Reported per
contender: seconds, peak RSS, the unbounded hit ratio (kvcache-simulator's "ceiling") and the
LRU hit ratio at a few pool sizes, plus the time ratio.

The figures are expected to differ slightly, for documented reasons:
- hpa follows vLLM: the last prompt token is always computed, so a request whose whole
  prompt is cached hits one block less; kvcache-simulator counts the whole prompt.
- hpa's LRU is vLLM's free-block queue (a request's blocks are freed tail first, block 0 is
  the null block, a running request's own blocks cannot be evicted); kvcache-simulator's is
  a plain block LRU. Pools are compared at the same usable block count.

    .venv/bin/python bench/bench_peer.py [--trace conversation_trace.jsonl]

Installs kvcache-simulator into the running venv when missing (it compiles its C++ core
with the machine's c++ on first use).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import measure  # noqa: E402

DEFAULT_TRACE = (
    Path(__file__).resolve().parents[2] / "shared/external_traces/mooncake/conversation_trace.jsonl"
)
BLOCK_TOKENS = 512
# kvcache-simulator sizes pools in GiB of a model's KV; Llama 3.1 8B at BF16 is 64 MiB per
# 512-token block, so these budgets are 512, 2,048 and 8,192 blocks (each >= the largest
# request, 247 blocks, so vLLM can admit every request).
BUDGETS_GIB = (32, 128, 512)
PEER_MODEL = "llama-3.1-8b"

HPA_SETUP = """
from pathlib import Path
from analyzer.store.ingest import ingest
from analyzer.pipeline.replay import run_replay
from analyzer.sim.dispatch import make_policy
"""
HPA_BODY = """
db = Path(DB)
ingest([Path(TRACE)], db_path=db)
def ratio(values):
    s = run_replay(make_policy(values), db_path=db, measure_from=0.5).summary
    return sum(s.column("hit_tokens").to_pylist()) / sum(s.column("prompt_tokens").to_pylist())
dense = {"groups": ["full_attention"], "block_size": 512}
result = {"ceiling": ratio({**dense, "engine": "attention_only"})}
for blocks in BLOCKS:
    # vLLM's num_gpu_blocks counts the null block: one more than the usable pool.
    result[f"lru_{blocks}"] = ratio({**dense, "num_blocks": blocks + 1})
"""

PEER_SETUP = "import subprocess, sys, json"
PEER_BODY = """
out = subprocess.run(
    [sys.executable, "-m", "kvcache_sim", "run", "--trace", TRACE, "--block-size", "512",
     "--model", MODEL, "--policies", "lru", "--budgets-gib", BUDGETS, "--format", "json",
     "--no-progress"], check=True, capture_output=True, text=True).stdout
data = json.loads(out)
result = {"ceiling": data["hitRateCeiling"], "blocks_per_gib": {}}
for point in data["points"]:
    result["blocks_per_gib"][str(point["gib"])] = point["cacheBlocks"]
    result[f"lru_{point['cacheBlocks']}"] = point["results"]["lru"]["hitRate"]
import resource
result["child_peak_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
"""


def ensure_peer() -> None:
    if importlib.util.find_spec("kvcache_sim") is None:
        print("installing kvcache-simulator (PyPI) into this venv ...", flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "kvcache-simulator"], check=True
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    args = parser.parse_args()
    if not args.trace.exists():
        sys.exit(f"no trace at {args.trace}; pass --trace (a Mooncake JSONL trace)")
    ensure_peer()
    trace = str(args.trace.resolve())
    budgets = ",".join(str(b) for b in BUDGETS_GIB)
    peer_setup = f"{PEER_SETUP}\nTRACE={trace!r}\nMODEL={PEER_MODEL!r}\nBUDGETS={budgets!r}"
    # A first, untimed peer run compiles its C++ core, so compilation is not timed.
    measure(peer_setup, PEER_BODY)
    peer = measure(peer_setup, PEER_BODY)
    blocks = sorted(peer["result"]["blocks_per_gib"].values())
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "peer.duckdb")
        setup = f"{HPA_SETUP}\nTRACE={trace!r}\nDB={db!r}\nBLOCKS={blocks!r}"
        ours = measure(setup, HPA_BODY)
    peer_mib = max(peer["peak_mib"], peer["result"]["child_peak_mib"])
    print(f"trace: {args.trace.name}, {BLOCK_TOKENS}-token blocks, last half measured")
    print(f"{'figure':<28}{'hpa':>12}{'kvcache-sim':>14}{'difference':>12}")
    for key in ["ceiling", *(f"lru_{b}" for b in blocks)]:
        a, b = ours["result"][key], peer["result"][key]
        name = "unbounded (ceiling)" if key == "ceiling" else f"LRU, {key[4:]} blocks"
        print(f"{name:<28}{a:>12.4%}{b:>14.4%}{(a - b) * 100:>+11.2f}pp")
    print(
        f"{'seconds (all figures)':<28}{ours['seconds']:>12.2f}{peer['seconds']:>14.2f}"
        f"   ratio hpa/peer {ours['seconds'] / peer['seconds']:.2f}x"
    )
    print(f"{'peak RSS (MiB)':<28}{ours['peak_mib']:>12.0f}{peer_mib:>14.0f}")
    print(
        "hpa's time includes ingest (validation into DuckDB) and one replay per figure; "
        "kvcache-simulator's includes parsing and one C++ batch over all budgets."
    )
    print(json.dumps({"hpa": ours, "kvcache_simulator": peer}, sort_keys=True))


if __name__ == "__main__":
    main()
