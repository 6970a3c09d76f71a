#!/usr/bin/env bash
# RoPE length extension at evaluation time, no fine-tuning (the shape of Su's table):
# the causal LM with RoPE trained at 128 tokens by the extrapolation study
# (posjax sweep --config=configs/lm.py:study=extrapolation --workdir=runs/ext),
# evaluated at 1x and 8x its training length with each method.
set -euo pipefail
cd "$(dirname "$0")/../.."
RUN="runs/ext/runs/encoding=rope"
OUT=experiments/rope_extension/results
mkdir -p "$OUT"
for method in none linear ntk dynamic yarn llama3 logn ntk+logn rerope:64 rerope:64+logn \
              leaky_rerope:64:16; do
  posjax extrapolate --workdir="$RUN" --lengths=128,1024 --max_tokens=16384 \
    $( [ "$method" = none ] || echo "--rope_scaling=$method" ) \
    --output="$OUT/${method//:/-}.json"
done
python experiments/rope_extension/table.py "$OUT" > experiments/rope_extension/results.md
