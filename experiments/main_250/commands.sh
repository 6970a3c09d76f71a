#!/usr/bin/env bash
# The main study at 250 steps instead of its 600 (`STEPS=250 BATCH=16 bash scripts/run.sh`;
# 16 rows were run.sh's default when this ran, so --main_job_batch was not given): 7 encodings x 3 seeds, each encoding's seeds in one vmapped program, one
# encoding per CPU core, timed whole from an empty compilation cache (the main_job section of
# experiments/bench/vmap_seeds.json), then collected here.
set -euo pipefail
cd "$(dirname "$0")/../.."
python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mj_s250 \
  --main_job_parallel 2 --main_job_steps 250 --main_job_batch 16
python scripts/collect_results.py runs/mj_s250 experiments/main_250
posjax report experiments/main_250
# 2026-11-27: run on the Intel Xeon kind (family 6, model 207), 2 cores of a KVM guest.
