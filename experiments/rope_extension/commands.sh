#!/usr/bin/env bash
# RoPE length extension at evaluation time, no fine-tuning (the shape of Su's table): the
# 3 seeds of the causal LM with RoPE trained at 128 tokens by the extrapolation study
# (experiments/extrapolation/commands.sh, sweep runs/ext), each evaluated at 1x and 8x its
# training length with every method.
set -euo pipefail
cd "$(dirname "$0")/../.."
for k in 0 1 2; do
  OUT=runs/rope_extension/seed=$k; mkdir -p "$OUT"
  for method in none linear ntk dynamic yarn llama3 logn ntk+logn rerope:64 rerope:64+logn \
                leaky_rerope:64:16; do
    posjax extrapolate --workdir="runs/ext/runs/encoding=rope,seed=$k" --lengths=128,1024 \
      --max_tokens=16384 $( [ "$method" = none ] || echo "--rope_scaling=$method" ) \
      --output="$OUT/${method//:/-}.json"
  done
done
python experiments/rope_extension/collect.py runs/ext runs/rope_extension experiments/rope_extension
posjax report experiments/rope_extension
# 2026-11-23: run with runs/ = /work/studies from a worktree at commit 4fbfe59.
