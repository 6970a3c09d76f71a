#!/usr/bin/env bash
# The ALiBi-paper comparison at small scale: 12 encodings x 3 seeds, causal LM (d_model 128,
# 2 layers, 4 heads of 32), bytes of the Python 3.11 standard library, trained at 128 tokens
# for 600 steps of 16 x 128 tokens, evaluated at 128..2048 (16x) on 16384 validation tokens,
# then with sliding windows (stride 128) at 128, 512 and 2048.
set -euo pipefail
cd "$(dirname "$0")/../.."
posjax sweep --config=configs/lm.py:study=extrapolation,seeds=3 --workdir=runs/ext --parallel=2
for d in runs/ext/runs/*/; do
  posjax extrapolate --workdir="$d" --protocol=sliding --stride=128 --lengths=128,512,2048 \
    --max_tokens=8192
done
python scripts/collect_results.py runs/ext experiments/extrapolation
posjax report experiments/extrapolation
# 2026-11-23: run with runs/ = /work/studies from a worktree at commit 4fbfe59. The 21 runs of
# the 7 encodings of the main job (none, learned, sinusoidal, rope, alibi, t5, xpos; seeds
# 0-2) have the same configs as the main job's (config.json equal), so they were copied from
# the main job's sweep (experiments/main_600x16, run the same day) into runs/ext/runs/ before the
# sweep, which took them as done; the sweep trained the other 15. Their `seconds` are in
# experiments/main_600x16/results/sweep.json. The sliding-window results were written then with
# --output="$d/extrapolation_sliding.json", a name in the run's folder that extrapolate now
# refuses; without --output it writes the same result as extrapolation_sliding-s128.json.
