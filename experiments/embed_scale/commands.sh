#!/usr/bin/env bash
# Token embeddings at init std 0.02 (the default) against the same embeddings multiplied by
# sqrt(d_model) (model.embed_scale, Vaswani et al. sec. 3.4), for sinusoidal and learned
# absolute positions and for RoPE and ALiBi as controls; otherwise the exact setting of the
# extrapolation study (configs/lm.py size=main: 600 steps of 16 x 128 bytes).
set -euo pipefail
cd "$(dirname "$0")/../.."
posjax sweep --config=configs/lm.py:study=embed_scale --workdir=runs/embed_scale
python scripts/collect_results.py runs/embed_scale experiments/embed_scale
