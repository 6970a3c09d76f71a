#!/usr/bin/env bash
# `posjax extrapolate --pretrained=DIR` on the tiny random checkpoints of
# tests/fixtures/pretrained (made by scripts/make_pretrained_fixtures.py; trained length 32 =
# their max_position_embeddings), on the embedded corpus (the Python 3.11 standard library's
# validation split, the first 16 384 scored tokens), non-overlapping windows of 32, 64 and
# 128 tokens (1x, 2x, 4x). Llama with every method, the other families with yarn:4, and one
# sliding-window run. One JSON per command under results/FAMILY/; `posjax report
# experiments/pretrained_fixtures` rewrites the tables and numbers quoted from them.
set -euo pipefail
cd "$(dirname "$0")/../.."
FIXTURES=tests/fixtures/pretrained
OUT=experiments/pretrained_fixtures/results
LONGROPE='{"rope_type": "longrope", "factor": 4, "long_factor": [1, 1.5, 2, 3, 4, 6, 8, 8], "short_factor": [1, 1, 1, 1, 1, 1.2, 1.5, 2]}'
YARN_BLOCK='{"rope_type": "yarn", "factor": 4, "attention_factor": 1.0}'
run() {  # run FAMILY NAME [flags]: one result, results/FAMILY/NAME.json
  local family=$1 name=$2; shift 2
  posjax extrapolate --pretrained="$FIXTURES/$family" --lengths=32,64,128 \
    --output="$OUT/$family/$name.json" "$@"
}
run llama none
for method in linear ntk dynamic yarn yarn:4 llama3 logn ntk+logn rerope:16 rerope:16+logn \
              leaky_rerope:16:16 self_extend:8 sinks:4; do
  run llama "${method//:/-}" --rope_scaling="$method"
done
run llama yarn-block --rope_scaling="$YARN_BLOCK"
run llama longrope --rope_scaling="$LONGROPE"
run llama yarn-4_sliding-s16 --rope_scaling=yarn:4 --protocol=sliding --stride=16
for family in mistral qwen2 gpt_neox qwen3 smollm3 phi3 gemma3_text cohere cohere2 exaone4 olmo2 olmo3 glm4 ministral3 gemma2 \
              qwen3_moe mixtral gpt_oss llama4_text deepseek_v3 glm4_moe qwen2_moe; do
  run "$family" none
  run "$family" yarn-4 --rope_scaling=yarn:4
done
# TensorBoard events and the lock file the command leaves beside each result
rm -rf "$OUT"/*/tensorboard "$OUT"/*/.lock
posjax report experiments/pretrained_fixtures
# 2026-11-26: run on CPU (float32) from the pretrained-cli worktree with
# posjax = PYTHONPATH=$PWD /work/main/.venv/bin/python -m posjax
# 2026-12-01: mistral's two results re-run after the loader applied config.json's
# sliding_window (its 128-token rows had been refused), from /work/main with .venv/bin/posjax
# 2026-12-03: qwen3's, smollm3's and phi3's two results each added with those families,
# from /work/main with .venv/bin/posjax
# 2026-12-03: gemma3_text's two results added with that family, from /work/main with
# .venv/bin/posjax
# 2026-12-03 (afternoon): cohere's, cohere2's, exaone4's, olmo2's, olmo3's, glm4's and
# ministral3's two results each added with those families, from /work/main with .venv/bin/posjax
# 2026-12-04: gemma2's, qwen3_moe's, mixtral's and gpt_oss's two results each added with
# those families, from /work/main with .venv/bin/posjax; cohere's two re-run after its
# fixture became Command R+'s (use_qk_norm, new random weights)
# 2026-12-05: llama4_text's, deepseek_v3's, glm4_moe's and qwen2_moe's two results each added
# with those families, from /work/main with .venv/bin/posjax; qwen3_moe's two re-run after its
# fixture's first layer became dense (decoder_sparse_step 2, new random weights)
