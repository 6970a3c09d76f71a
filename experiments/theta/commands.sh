#!/usr/bin/env bash
# RoPE base (theta) from 100 to 10^6 at a fixed training length of 128 tokens; same model,
# data and budget as the extrapolation study (the theta=10000 run is that study's rope run).
set -euo pipefail
cd "$(dirname "$0")/../.."
posjax sweep --config=configs/lm.py:study=theta --workdir=runs/theta
python scripts/collect_results.py runs/theta experiments/theta
posjax analyze decay --dim=32 --theta=100,1000,10000,100000,1000000 --train_len=128 \
  --max_distance=2048 --output=experiments/theta/decay_d32
