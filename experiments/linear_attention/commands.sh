#!/usr/bin/env bash
# Linear attention with RoPE (RoFormer eq. 29: elu + 1 features, RoPE in the numerator only),
# the 1 + cos variant (RoPE in numerator and denominator), linear attention without position,
# and softmax attention with RoPE as the reference, 3 seeds each: same model, data and budget
# as the extrapolation study (the softmax runs are that study's rope runs).
set -euo pipefail
cd "$(dirname "$0")/../.."
posjax sweep --config=configs/lm.py:study=linear,seeds=3 --workdir=runs/linear --parallel=2
python scripts/collect_results.py runs/linear experiments/linear_attention
posjax report experiments/linear_attention
# 2026-11-23: run with runs/ = /work/studies from a worktree at commit 4fbfe59. The 3 softmax
# RoPE runs have the main job's configs (config.json equal) and were copied from it into
# runs/linear/runs/ before the sweep, which took them as done.
