#!/usr/bin/env bash
# Token embeddings at init std 0.02 (the default) against the same embeddings multiplied by
# sqrt(d_model) (model.embed_scale, Vaswani et al. sec. 3.4), for sinusoidal and learned
# absolute positions and for RoPE and ALiBi as controls, 3 seeds each; otherwise the exact
# setting of the extrapolation study (configs/lm.py size=main: 600 steps of 16 x 128 bytes).
set -euo pipefail
cd "$(dirname "$0")/../.."
posjax sweep --config=configs/lm.py:study=embed_scale,seeds=3 --workdir=runs/embed_scale --parallel=2
python scripts/collect_results.py runs/embed_scale experiments/embed_scale
posjax report experiments/embed_scale
# 2026-11-23: run with runs/ = /work/studies from a worktree at commit 4fbfe59. The 12 runs
# with embed_scale=False have the main job's configs (config.json equal) and were copied from
# it into runs/embed_scale/runs/ before the sweep, which took them as done.
