#!/usr/bin/env bash
# The main study: the README's main job until 2026-11-28, `BATCH=16 bash scripts/run.sh`
# (7 encodings, causal LM d_model 128, 2 layers, 4 heads of 32, 600 steps of 16 x 128 bytes
# of the stdlib corpus, evaluated at 128..2048), 3 seeds each (SEEDS=3, run.sh's default).
# configs/lm.py's size=main trains these 16 rows; run.sh now trains 8 (experiments/main).
set -euo pipefail
cd "$(dirname "$0")/../.."
# Run on 2026-11-26, when 16 rows were run.sh's default (the command was `bash
# scripts/run.sh`, the flags below without --main_job_batch), each encoding's 3 seeds in one
# vmapped program (run.sh's --vmap_seeds), timed whole with the machine's load
# (experiments/bench/vmap_seeds.json's main_job section), then collected here:
python benchmarks/bench_train.py --sections main_job --main_job_dir runs/main_job \
  --main_job_batch 16
python scripts/collect_results.py runs/main_job experiments/main_600x16
posjax report experiments/main_600x16
