#!/usr/bin/env bash
# The ALiBi-paper comparison at small scale: 12 encodings, causal LM (d_model 128, 2 layers,
# 4 heads of 32), bytes of the Python 3.11 standard library, trained at 128 tokens for
# 600 steps of 16 x 128 tokens, evaluated at 128..2048 (16x) on 16384 validation tokens.
set -euo pipefail
cd "$(dirname "$0")/../.."
posjax sweep --config=configs/lm.py:study=extrapolation --workdir=runs/ext
for d in runs/ext/runs/*/; do
  posjax extrapolate --workdir="$d" --protocol=sliding --stride=128 --lengths=128,512,2048 \
    --max_tokens=8192 --output="$d/extrapolation_sliding.json"
done
python scripts/collect_results.py runs/ext experiments/extrapolation

# 2026-11-23: kerple_log alone, re-run after the KERPLE clamp/init fix, into its own sweep
# directory; its result files were then copied over results/encoding=kerple_log/ (and its
# sweep.json summary), and the plots redrawn from results/ with `posjax plot`.
# posjax sweep --config=configs/lm.py:study=extrapolation --workdir=runs/ext_kerple \
#   --only='encoding=kerple_log'
# posjax extrapolate --workdir=runs/ext_kerple/runs/encoding=kerple_log --protocol=sliding \
#   --stride=128 --lengths=128,512,2048 --max_tokens=8192 \
#   --output=runs/ext_kerple/runs/encoding=kerple_log/extrapolation_sliding.json
