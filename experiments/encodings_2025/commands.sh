#!/usr/bin/env bash
# The 2025-2026 encodings beside their baselines, in the budget of experiments/encodings_2024
# (causal LM d_model 128, 2 layers, 4 heads of 32, 600 steps of 16 x 128 bytes of the stdlib
# corpus, evaluated at 128..2048): none, rope, alibi, stickbreaking, ssmax, vo_rope,
# qkvo_rope, kerple_log, dape (on KERPLE-log) and PoSE (rope trained at 128, positions
# reaching 1024); 3 seeds each, vmapped. Then passkey retrieval in experiments/retrieval's
# budget (size=study, 256 bytes, scored to 8x) for stickbreaking, ssmax and PoSE (rope at 256
# reaching 2048): the baselines are experiments/retrieval/passkey's runs, the same config.
# Then the CoPE counting task of experiments/encodings_2024 (1000 steps, sizes 1..20, scored
# on 1..40) for stickbreaking; its baselines are experiments/encodings_2024/counting's.
# Then the text-and-image task next_row (configs/text_image.py: text, then an image whose rows
# each advance the row above by one symbol; 4 layers, d_model 128, 600 steps of 32 examples,
# grids of sides 2..6, scored on 9 and 12) for M-RoPE (Qwen2-VL's sections, Qwen3-VL's
# interleaving), axial 2-D RoPE by M-RoPE's rule and by Su's RoPE-Tie-v2, 1-D RoPE and NoPE.
# 2026-11-26: run into /work/studies/ (runs/ below) from the main branch of that day.
set -euo pipefail
cd "$(dirname "$0")/../.."
posjax sweep --config=configs/lm.py:study=encodings_2025,seeds=3 --workdir=runs/enc2025 --vmap_seeds
python scripts/collect_results.py runs/enc2025 experiments/encodings_2025
posjax sweep --config=configs/retrieval.py:task=passkey,size=study,max_factor=8,seeds=3,encodings=stickbreaking+ssmax \
  --workdir=runs/enc2025_passkey --vmap_seeds
posjax sweep --config=configs/retrieval.py:task=passkey,size=study,max_factor=8,seeds=3,encodings=rope,pose=2048 \
  --workdir=runs/enc2025_passkey_pose --vmap_seeds
python scripts/collect_results.py runs/enc2025_passkey experiments/encodings_2025/passkey
python scripts/collect_results.py runs/enc2025_passkey_pose experiments/encodings_2025/passkey_pose
posjax sweep --config=configs/algorithmic.py:task=counting,steps=1000,seeds=3,encodings=stickbreaking \
  --workdir=runs/enc2025_counting --only='*randomize_positions=0,*' --vmap_seeds
python scripts/collect_results.py runs/enc2025_counting experiments/encodings_2025/counting
posjax sweep --config=configs/text_image.py:task=next_row,steps=600,seeds=3 \
  --workdir=runs/enc2025_text_image --vmap_seeds
python scripts/collect_results.py runs/enc2025_text_image experiments/encodings_2025/text_image
posjax report experiments/encodings_2025
