#!/usr/bin/env bash
# Regenerates every file in sample_traces/ with `hpa synth` (deterministic: same bytes every run).
# Usage: sample_traces/make_samples.sh   (HPA=/path/to/hpa to use another executable)
set -euo pipefail
cd "$(dirname "$0")"
HPA="${HPA:-hpa}"

# Worked examples (docs/definitions.md): 3 requests x 2,176 tokens, first N shared (B=544 block-boundary cases).
for shared in 543 545 1087 1088 1089 1632; do
    "$HPA" synth "diagnostic_${shared}.jsonl" --scenario diagnostic --param shared_tokens="$shared"
done

# Worked examples (docs/definitions.md): 32 requests x 2,200 tokens, 8 groups of 4 sharing N tokens (B=528 cases).
for shared in 1600 1500; do
    "$HPA" synth "groups_${shared}.jsonl" --scenario groups --param shared_tokens="$shared"
done

# Realistic multi-family traffic: chat, multi_turn, rag, agent; two revisions, two replicas.
"$HPA" synth mixed.jsonl.gz --scenario mixed --num-requests 2500 --seed 0
"$HPA" synth mixed_hash_ids.jsonl.gz --scenario mixed --num-requests 300 --seed 1 --block-size 16
