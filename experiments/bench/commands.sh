#!/usr/bin/env bash
# The benchmarks behind README.md's performance section and experiments/bench/README.md.
# Run on a quiet machine: every figure is a ratio measured in one process, but a second job
# on a 2-core machine still moves them. Each section rewrites only its own key of the JSON.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/_venv.sh
python scripts/bench_attention.py --json experiments/bench/attention.json
python scripts/bench_train.py --sections pipeline,allocator,compile \
  --json experiments/bench/train.json
# the speed table: 2 fresh processes x 3 visits (2026-11-23)
python scripts/bench_train.py --sections speed --processes 2 --repeats 3 \
  --json experiments/bench/train.json
