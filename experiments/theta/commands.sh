#!/usr/bin/env bash
# RoPE base (theta) from 100 to 10^6 at a fixed training length of 128 tokens, 3 seeds each;
# same model, data and budget as the extrapolation study (its theta=10000 runs are that
# study's rope runs).
set -euo pipefail
cd "$(dirname "$0")/../.."
posjax sweep --config=configs/lm.py:study=theta,seeds=3 --workdir=runs/theta --parallel=2
python scripts/collect_results.py runs/theta experiments/theta
posjax analyze decay --dim=32 --theta=100,1000,10000,100000,1000000 --train_len=128 \
  --max_distance=2048 --output=experiments/theta/decay_d32
posjax report experiments/theta
# 2026-11-23: run with runs/ = /work/studies from a worktree at commit 4fbfe59. The 3 runs at
# theta=10000 have the main job's configs (config.json equal) and were copied from it into
# runs/theta/runs/ before the sweep, which took them as done.
