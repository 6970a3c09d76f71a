#!/usr/bin/env bash
# The README's main job at 600 steps of 8 rows instead of the study's 16 (`BATCH=8 bash
# scripts/run.sh`): half the study's tokens per run, the same optimizer steps. 7 encodings x 3
# seeds, each encoding's seeds in one vmapped program, one encoding per CPU core, timed whole
# from an empty compilation cache (the main_job section of experiments/bench/vmap_seeds.json),
# then collected here.
set -euo pipefail
cd "$(dirname "$0")/../.."
python benchmarks/bench_train.py --sections main_job --main_job_dir runs/mj_b8s600 \
  --main_job_parallel 2 --main_job_batch 8
python scripts/collect_results.py runs/mj_b8s600 experiments/main_600x8
posjax report experiments/main_600x8
# 2026-11-28: run on the AMD EPYC kind (family 25, model 17), 2 cores of a KVM guest.
