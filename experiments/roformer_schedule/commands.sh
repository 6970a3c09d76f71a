#!/usr/bin/env bash
# RoFormer's six-stage MLM length schedule scaled down (lengths / 8, batches / 32, steps / 500,
# every stage at least 100 steps; same length ratios) against single-length training at 64
# tokens with the same token count; 3 seeds each.
set -euo pipefail
cd "$(dirname "$0")/../.."
posjax sweep --config=configs/mlm.py:seeds=3 --workdir=runs/roformer --parallel=2 --noextrapolate
for r in runs/roformer/runs/*/; do
  posjax extrapolate --workdir="$r" --lengths=16,32,64,192,384 --max_tokens=16384
done
python scripts/collect_results.py runs/roformer experiments/roformer_schedule
posjax report experiments/roformer_schedule
# 2026-11-23: first run, from a worktree at commit 4fbfe59, whose later stages read the data
# order of another seed's first stage. 2026-12-03: re-run whole into /work/studies/roformer
# (the paths in results/sweep.json) from a worktree at commit 0a3ec3a (every stage of every
# seed its own order), the sweep without --parallel=2 (one run at a time, beside other runs).
