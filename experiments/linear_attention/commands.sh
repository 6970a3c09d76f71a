#!/usr/bin/env bash
# Linear attention with RoPE (RoFormer eq. 29: elu + 1 features, RoPE in the numerator only),
# the 1 + cos variant (RoPE in numerator and denominator), linear attention without position,
# and softmax attention with RoPE as the reference: same model, data and budget as the
# extrapolation study (the softmax run is that study's rope run).
set -euo pipefail
cd "$(dirname "$0")/../.."
posjax sweep --config=configs/lm.py:study=linear --workdir=runs/linear
python scripts/collect_results.py runs/linear experiments/linear_attention
