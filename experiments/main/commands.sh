#!/usr/bin/env bash
# The README's main job: `bash scripts/run.sh` (7 encodings, causal LM d_model 128, 2 layers,
# 4 heads of 32, 600 steps of 16 x 128 bytes of the stdlib corpus, evaluated at 128..2048),
# 3 seeds each (SEEDS=3, run.sh's default).
set -euo pipefail
cd "$(dirname "$0")/../.."
# Run again on 2026-11-26, each encoding's 3 seeds in one vmapped program (run.sh's
# --vmap_seeds), timed whole with the machine's load (experiments/bench/vmap_seeds.json's
# main_job section), then collected here:
python benchmarks/bench_train.py --sections main_job --main_job_dir runs/main_job
python scripts/collect_results.py runs/main_job experiments/main
posjax report experiments/main
