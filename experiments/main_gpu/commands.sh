#!/usr/bin/env bash
# The main study on one GPU: 7 encodings x 3 seeds (each encoding's seeds in one vmapped
# program, all 7 programs at once on the one GPU), configs/lm.py size=gpu (d_model 384,
# 6 layers, 6 heads of 64, MLP 1536: 10.8 M parameters), 400 steps of 128 x 256 bytes of the
# stdlib corpus, scored at 256..4096 (16x). Run as scripts/gpu_check.sh's `study` stage on one
# NVIDIA H200 (2026-11-27, the session's end call: STAGES=study,flash), which collects the
# small result files and the plot into experiments/bench/<kind>/study; copied here.
set -euo pipefail
cd "$(dirname "$0")/../.."
posjax sweep --config=configs/lm.py:study=main,size=gpu,seq_len=256,learning_rate=1e-3,seeds=3 \
  --workdir=/tmp/posjax_gpu_study --vmap_seeds --parallel=7
python scripts/collect_results.py /tmp/posjax_gpu_study experiments/main_gpu
posjax report experiments/main_gpu
