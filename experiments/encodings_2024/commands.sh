#!/usr/bin/env bash
# The 2024-2026 encodings beside their baselines, in the budget of experiments/extrapolation
# (causal LM d_model 128, 2 layers, 4 heads of 32, 600 steps of 16 x 128 bytes of the stdlib
# corpus, evaluated at 128..2048): none, rope, alibi, fox, cope, path, p-RoPE (p = 0.75) and
# RoPE with its second layer NoPE (layer_pattern=rope+none); 3 seeds each. Then the CoPE
# paper's counting and selective-copy tasks for none, rope and cope (configs/algorithmic.py,
# the main model, 1000 steps, trained on sizes 1..20, scored on 1..40), 3 seeds each.
# 2026-11-25: run into /work/studies/ (runs/ below) from the main branch of that day.
set -euo pipefail
cd "$(dirname "$0")/../.."
posjax sweep --config=configs/lm.py:study=encodings_2024,seeds=3 --workdir=runs/enc2024
python scripts/collect_results.py runs/enc2024 experiments/encodings_2024
for task in counting selective_copy; do
  posjax sweep --config=configs/algorithmic.py:task=$task,steps=1000,seeds=3,encodings=none+rope+cope \
    --workdir=runs/tasks_$task --only='*randomize_positions=0,*'
  python scripts/collect_results.py runs/tasks_$task experiments/encodings_2024/$task
done
posjax report experiments/encodings_2024
