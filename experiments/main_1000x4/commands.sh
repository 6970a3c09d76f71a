#!/usr/bin/env bash
# The README's main job at 1000 steps of 4 rows instead of the study's 600 of 16 (`STEPS=1000
# BATCH=4 bash scripts/run.sh`): the same tokens per run as experiments/main_250, in
# four times its optimizer steps. 7 encodings x 3 seeds, each encoding's seeds in one
# vmapped program, one encoding per CPU core, timed whole from an empty compilation cache
# (the main_job section of experiments/bench/vmap_seeds.json), then collected here.
set -euo pipefail
cd "$(dirname "$0")/../.."
python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mj_b4s1000 \
  --main_job_parallel 2 --main_job_steps 1000 --main_job_batch 4
python scripts/collect_results.py runs/mj_b4s1000 experiments/main_1000x4
posjax report experiments/main_1000x4
# 2026-11-28: run on the AMD EPYC kind (family 25, model 17), 2 cores of a KVM guest.
