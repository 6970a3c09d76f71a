#!/usr/bin/env bash
# DeepSeek-V2's multi-head latent attention with decoupled RoPE (posjax.models.latent) in the
# budget of experiments/models_2026 (causal LM d_model 128, 2 layers, 4 heads, 600 steps of
# 16 x 128 bytes of the stdlib corpus, scored at 128..2048): RoPE (heads of 32); RoPE on 16 of
# 48 head dims with full-rank keys per head, the control; latent attention with those 16 dims
# from one key projection shared by the heads and the other 32 from a latent of 128 per token
# (DeepSeek-V2-Lite's ratios); RoPE on all 48 dims. 3 seeds each, vmapped.
# 2026-12-04: run from a worktree at commit e1e8406 into /work/studies/mla, on an AMD EPYC of
# family 23, model 49 (2 cores), beside a test run at first (niced); RoPE on all 48 dims
# (encoding=rope,head_dim=48) added by the same command from a worktree at ef8de12, which
# trained only its 3 runs beside the 9 there
set -euo pipefail
cd "$(dirname "$0")/../.."
posjax sweep --config=configs/lm.py:study=mla,seeds=3 --workdir=runs/mla --vmap_seeds
python scripts/collect_results.py runs/mla experiments/mla
posjax report experiments/mla
