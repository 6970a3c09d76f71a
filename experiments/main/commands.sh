#!/usr/bin/env bash
# The README's main job: `bash scripts/run.sh` (7 encodings, causal LM d_model 128, 2 layers,
# 4 heads of 32, 600 steps of 16 x 128 bytes of the stdlib corpus, evaluated at 128..2048),
# 3 seeds each (SEEDS=3, run.sh's default).
# Run on 2026-11-23 into /tmp/runs_main3 (the paths in results/sweep.json), then collected.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/run.sh runs/main
python scripts/collect_results.py runs/main experiments/main
posjax report experiments/main
