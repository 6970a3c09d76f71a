#!/usr/bin/env bash
# RoFormer's six-stage MLM length schedule scaled down (lengths / 8, batches / 32, steps / 500;
# same length ratios) against single-length training at 64 tokens with the same token count.
set -euo pipefail
cd "$(dirname "$0")/../.."
posjax sweep --config=configs/mlm.py --workdir=runs/roformer
for r in runs/roformer/runs/*/; do
  posjax extrapolate --workdir="$r" --lengths=16,32,64,192,384 --max_tokens=16384
done
python scripts/collect_results.py runs/roformer experiments/roformer_schedule
