#!/usr/bin/env bash
# 2-D positions: the patch model (d_model 64, 2 layers, 4 heads of 16) on the grid2d row_col
# task, trained on 8x8 grids for 400 steps of 32 grids, scored per cell on 8x8, 12x12, 16x16.
set -euo pipefail
cd "$(dirname "$0")/../.."
posjax sweep --config=configs/patch2d.py:steps=400,seeds=3 --workdir=runs/rope2d --parallel=2
python scripts/collect_results.py runs/rope2d experiments/rope2d
posjax report experiments/rope2d
# 2026-11-23: run into /work/studies/rope2d (the paths in results/sweep.json) from a worktree
# at commit 4fbfe59. One run lost a race of two processes building the grid2d dataset at once
# (fixed since: builds are locked) and was re-run by re-running the same sweep command.
