#!/usr/bin/env bash
# Length generalisation on the copy task: a causal LM (d_model 128, 4 layers, 4 heads of 32)
# trained on copies of 1..20 symbols for 1000 steps of 32 rows, scored at sizes 1..40;
# with positions 0..T-1 and with randomized positions (M = 256, Ruoss et al.).
set -euo pipefail
cd "$(dirname "$0")/../.."
ARG=task=copy,steps=1000,encodings=none+t5+alibi+rope+sinusoidal
posjax sweep --config=configs/algorithmic.py:$ARG --workdir=runs/algorithmic \
  --only='*randomize_positions=0'
posjax sweep --config=configs/algorithmic.py:$ARG --workdir=runs/algorithmic
python scripts/collect_results.py runs/algorithmic experiments/algorithmic
