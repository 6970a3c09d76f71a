"""Make the tiny Hugging Face checkpoints and reference logits of tests/test_pretrained.py.

    /tmp/torchvenv/bin/python scripts/make_pretrained_fixtures.py [--out tests/fixtures/pretrained]
        [--families llama,mistral,qwen2,gpt_neox,qwen3,smollm3,phi3,gemma3_text,cohere,
         cohere2,exaone4,olmo2,olmo3,glm4,ministral3,gemma2,qwen3_moe,mixtral,gpt_oss,
         llama4_text,deepseek_v3,glm4_moe,qwen2_moe]

Needs torch, transformers, safetensors and tokenizers (a separate environment: posjax and its
tests never import torch). For each family it writes <out>/<family>/ holding what a snapshot
from `huggingface-cli download` holds (config.json, float16 *.safetensors, llama's in two
shards with model.safetensors.index.json, tokenizer.json) plus cases.json and <case>.npy:
each case is a set of config.json overrides (a rope_scaling block, a residual switch, a
sliding window) and the float32 logits transformers computes with them for a fixed token
batch (dynamic scaling also for one row longer than max_position_embeddings, where it
changes the frequencies; Phi-3's LongRoPE layout too, where the long factors take over).
gpt_oss also gets mxfp4.npz: MXFP4 blocks and scales and transformers' dequantization of them.

The weights are random (std 0.2, norms around 1, biases nonzero) so that every block and
every position matters at the 1e-4 the tests compare to, then rounded to float16: the
reference model computes in float32 from the float16 values, as posjax does.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import torch
import transformers
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

VOCAB = 96
MAX_POSITIONS = 32
BATCH, LENGTH, LONG = 2, 20, 48
TEXT = ("Position encodings tell attention where each token sits; rotary ones turn query and "
        "key pairs by angles that grow with position, so their dot product reads distance. ")

COMMON = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
              intermediate_size=64, max_position_embeddings=MAX_POSITIONS, bos_token_id=0,
              eos_token_id=1, pad_token_id=None)
LLAMA_LIKE = dict(COMMON, num_key_value_heads=1, head_dim=16, rms_norm_eps=1e-5,
                  rope_theta=10000.0, tie_word_embeddings=False)
# Cohere's LayerNorm reads layer_norm_eps; a logit_scale other than its default 0.0625
COHERE_LIKE = dict({k: v for k, v in LLAMA_LIKE.items() if k != "rms_norm_eps"},
                   layer_norm_eps=1e-5, logit_scale=0.25, tie_word_embeddings=True)

# family -> (transformers config class, its kwargs, cases: name -> config.json overrides)
FAMILIES = {
    "llama": (transformers.LlamaConfig, LLAMA_LIKE, {
        "default": {},
        "linear": {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
        "dynamic": {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}},
        "yarn": {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
        "llama3": {"rope_scaling": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": MAX_POSITIONS}},
        # YaRN's mscale pair: Hugging Face's rotary module applies their ratio
        "yarn_mscale": {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "mscale": 2.0,
                                         "mscale_all_dim": 1.0}},
        # Phi-3's layout: no factor, max_position_embeddings over the top-level original one
        # sets the attention factor; the long row crosses to the long factors
        "longrope_phi3": {"max_position_embeddings": 4 * MAX_POSITIONS,
                          "original_max_position_embeddings": MAX_POSITIONS,
                          "rope_scaling": {
                              "rope_type": "longrope",
                              "short_factor": [1.0, 1.1, 1.2, 1.4, 1.7, 2.0, 2.5, 3.0],
                              "long_factor": [1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0]}},
    }),
    "mistral": (transformers.MistralConfig, dict(LLAMA_LIKE, sliding_window=64), {
        "default": {},
        "yarn": {"rope_scaling": {"rope_type": "yarn", "factor": 2.0, "beta_fast": 16.0}},
        # a window shorter than the batch's 20 tokens, on every layer
        "window": {"sliding_window": 8},
    }),
    "qwen2": (transformers.Qwen2Config, dict(LLAMA_LIKE, tie_word_embeddings=True,
                                             rope_theta=1000000.0), {
        "default": {},
        "linear": {"rope_scaling": {"rope_type": "linear", "factor": 4.0}},
        # transformers v5's own layout: one rope_parameters block, no rope_theta beside it
        "yarn_v5": {"rope_theta": None, "rope_parameters": {
            "rope_type": "yarn", "factor": 4.0, "rope_theta": 1000000.0,
            "original_max_position_embeddings": MAX_POSITIONS}},
        # layer 0 full attention, layer 1 a window of 8: by layer_types, and (none given) from
        # max_window_layers on
        "window": {"use_sliding_window": True, "sliding_window": 8,
                   "layer_types": ["full_attention", "sliding_attention"]},
        "window_layers": {"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1,
                          "layer_types": None},
    }),
    "gpt_neox": (transformers.GPTNeoXConfig, dict(COMMON, rotary_pct=0.5, rotary_emb_base=10000,
                                                  layer_norm_eps=1e-5, hidden_act="gelu",
                                                  use_parallel_residual=True), {
        "default": {},
        "sequential": {"use_parallel_residual": False},
        "linear": {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
        "dynamic": {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}},
        "yarn": {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
        # no rotary_pct: GPTNeoXConfig's default share, 0.25
        "rotary_pct_absent": {"rotary_pct": None},
    }),
    # Qwen3: q and k RMS-normalised per head before the rotation; a head_dim that is not
    # hidden_size / heads, as Qwen3's own (128 at hidden 1024 and 16 heads)
    "qwen3": (transformers.Qwen3Config, dict(LLAMA_LIKE, head_dim=24, rope_theta=1000000.0,
                                             tie_word_embeddings=True), {
        "default": {},
        # Qwen3's own long-context block (its model cards: factor 4 over 32768 tokens)
        "yarn": {"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                  "original_max_position_embeddings": MAX_POSITIONS}},
        "window": {"use_sliding_window": True, "sliding_window": 8,
                   "layer_types": ["full_attention", "sliding_attention"]},
    }),
    # SmolLM3: Llama's blocks with NoPE layers (no_rope_layers, else every
    # no_rope_layer_interval-th layer: here the second of two)
    # (a pad id inside the vocabulary: a null one reads back as SmolLM3Config's 128004)
    "smollm3": (transformers.SmolLM3Config, dict(LLAMA_LIKE, no_rope_layer_interval=2,
                                                 rope_theta=2000000.0, pad_token_id=1,
                                                 tie_word_embeddings=True), {
        "default": {},
        "no_rope_layers": {"no_rope_layers": [0, 1]},
        "yarn": {"rope_scaling": {"rope_type": "yarn", "factor": 2.0,
                                  "original_max_position_embeddings": MAX_POSITIONS}},
        # no layer_types: transformers' SmolLM3 slides the window on its NoPE layers
        "window": {"use_sliding_window": True, "sliding_window": 8, "layer_types": None},
    }),
    # Phi-3 / Phi-4-mini: fused qkv and gate/up projections, partial rotary (Phi-4-mini's
    # 0.75; here half of each head), LongRoPE with Phi's top-level original length
    "phi3": (transformers.Phi3Config, dict(LLAMA_LIKE, partial_rotary_factor=0.5,
                                           original_max_position_embeddings=MAX_POSITIONS,
                                           pad_token_id=1), {
        "default": {},
        "longrope": {"max_position_embeddings": 4 * MAX_POSITIONS, "rope_scaling": {
            "rope_type": "longrope", "short_factor": [1.0, 1.2, 1.5, 2.0],
            "long_factor": [1.0, 2.0, 4.0, 8.0]}},
        "window": {"sliding_window": 8},
    }),
    # Gemma 3's text model: a local layer (window 8, base 1e4) and a global one (base 1e6),
    # scores scaled by query_pre_attn_scalar^-1/2 (24 against head_dim 16), norms of 1 + w
    "gemma3_text": (transformers.Gemma3TextConfig, dict(
        LLAMA_LIKE, rope_theta=1000000.0, rope_local_base_freq=10000.0, rms_norm_eps=1e-6,
        query_pre_attn_scalar=24, sliding_window=8, tie_word_embeddings=True,
        layer_types=["sliding_attention", "full_attention"]), {
        "default": {},
        # Gemma 3 4B-27B's own block, which scales the global layers only
        "linear": {"rope_scaling": {"rope_type": "linear", "factor": 8.0}},
        # transformers v5's layout: a rope block per layer type
        "linear_v5": {"rope_theta": None, "rope_local_base_freq": None, "rope_parameters": {
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}},
        # no layer_types: a global layer every sliding_window_pattern-th (1: every layer;
        # default 6: none of these two)
        "pattern": {"layer_types": None, "sliding_window_pattern": 1},
        "pattern_default": {"layer_types": None},
        # Gemma 2's output cap, which Gemma 3's code applies where its config sets it (its
        # attention passes no attn_logit_softcapping on)
        "final_cap": {"final_logit_softcapping": 5.0},
    }),
    # Command R+: interleaved rotary pairs, one bias-free LayerNorm before attention and the
    # MLP in parallel, logits times logit_scale, q and k LayerNorm'd per head (use_qk_norm;
    # Command R's layers without it: cohere2's)
    "cohere": (transformers.CohereConfig, dict(COHERE_LIKE, use_qk_norm=True), {
        "default": {},
        "linear": {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    }),
    # Command R7B / A: a sliding layer that rotates (window 8) and a full-attention NoPE one
    "cohere2": (transformers.Cohere2Config, dict(
        COHERE_LIKE, rope_theta=50000.0, sliding_window=8,
        layer_types=["sliding_attention", "full_attention"]), {
        "default": {},
        "yarn": {"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                  "original_max_position_embeddings": MAX_POSITIONS}},
        # no layer_types: a full layer every sliding_window_pattern-th (default 4: none of two)
        "pattern_default": {"layer_types": None},
    }),
    # EXAONE 4.0: q and k normed per head, norms on each sublayer's output only; a sliding
    # layer that rotates (window 8) and a full-attention NoPE one
    "exaone4": (transformers.Exaone4Config, dict(
        LLAMA_LIKE, rope_theta=1000000.0, sliding_window=8,
        layer_types=["sliding_attention", "full_attention"]), {
        "default": {},
        # EXAONE 4.0 32B's own block: llama3, factor 16 over 8192 tokens
        "llama3": {"rope_scaling": {"rope_type": "llama3", "factor": 16.0,
                                    "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 8}},
        # no layer_types: all but every sliding_window_pattern-th layer slide (3: both, so
        # both rotate)
        "pattern": {"layer_types": None, "sliding_window_pattern": 3},
    }),
    # OLMo 2: q and k normalised over the whole projection, norms on each sublayer's output
    "olmo2": (transformers.Olmo2Config, dict(LLAMA_LIKE, rope_theta=500000.0), {
        "default": {},
        "yarn": {"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                  "original_max_position_embeddings": MAX_POSITIONS}},
    }),
    # OLMo 3: olmo2's blocks, a sliding layer (window 8) and a full one; the scaling block turns
    # the full layer alone
    "olmo3": (transformers.Olmo3Config, dict(
        LLAMA_LIKE, rope_theta=500000.0, sliding_window=8,
        layer_types=["sliding_attention", "full_attention"]), {
        "default": {},
        # OLMo 3's own long-context block: YaRN on its full-attention layers
        "yarn": {"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                  "original_max_position_embeddings": MAX_POSITIONS}},
        # no layer_types: a full layer every 4th (none of two)
        "pattern_default": {"layer_types": None},
    }),
    # GLM-4 (0414): norms before and after each sublayer, fused gate/up, biases on q, k, v;
    # the first half of each head turns in interleaved pairs
    "glm4": (transformers.Glm4Config, dict(LLAMA_LIKE, partial_rotary_factor=0.5,
                                           pad_token_id=1, eos_token_id=1), {
        "default": {},
        "yarn": {"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                  "original_max_position_embeddings": MAX_POSITIONS}},
        # every dim rotating: the interleaved pairs span the head
        "whole_head": {"partial_rotary_factor": 1.0},
    }),
    # Ministral 3: YaRN and a query temperature by position (llama_4_scaling_beta) past
    # original_max_position_embeddings (here 8, so the batch's 20 tokens cross two steps)
    "ministral3": (transformers.Ministral3Config, dict(LLAMA_LIKE, rope_parameters={
        "rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
        "original_max_position_embeddings": 8, "beta_fast": 32.0, "beta_slow": 1.0,
        "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.1}), {
        "default": {},
        # a beta of 0: no temperature (transformers' ministral3 needs the key)
        "beta_0": {"rope_parameters": {
            "rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
            "original_max_position_embeddings": 8, "beta_fast": 32.0, "beta_slow": 1.0,
            "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.0}},
    }),
    # Gemma 2: Gemma 3's blocks without q_norm and k_norm, one base for every layer, logits
    # soft-capped in attention and at the output (caps low enough to bind on these weights),
    # scores scaled by query_pre_attn_scalar^-1/2 (24 against head_dim 16)
    "gemma2": (transformers.Gemma2Config, dict(
        LLAMA_LIKE, rms_norm_eps=1e-6, query_pre_attn_scalar=24, sliding_window=8,
        tie_word_embeddings=True, attn_logit_softcapping=2.0, final_logit_softcapping=5.0,
        layer_types=["sliding_attention", "full_attention"]), {
        "default": {},
        # no caps in config.json: transformers' 50 and 30
        "default_caps": {"attn_logit_softcapping": None, "final_logit_softcapping": None},
        "linear": {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
        "window": {"sliding_window": 4},
        "layer_types": {"layer_types": ["full_attention", "sliding_attention"]},
    }),
    # Qwen3-MoE: qwen3's attention, a dense layer (decoder_sparse_step 2), then 4 experts of
    # width 16, each token to its top 2
    "qwen3_moe": (transformers.Qwen3MoeConfig, dict(
        LLAMA_LIKE, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
        norm_topk_prob=True, decoder_sparse_step=2), {
        "default": {},
        "top_k_raw": {"norm_topk_prob": False},
        "top_3": {"num_experts_per_tok": 3},
        "window": {"use_sliding_window": True, "sliding_window": 8},
        "yarn": {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
    }),
    # Mixtral: mistral's attention, 4 experts of width 16 (w1, w3, w2), each token to its top 2
    "mixtral": (transformers.MixtralConfig, dict(
        LLAMA_LIKE, num_local_experts=4, num_experts_per_tok=2, intermediate_size=16), {
        "default": {},
        "top_1": {"num_experts_per_tok": 1},
        "window": {"sliding_window": 8},
        "linear": {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    }),
    # GPT-OSS: biased attention with a sink logit per head, a sliding layer (window 8) then a
    # full one, YaRN over 8 tokens, 4 biased experts of width 16 with the clipped SwiGLU
    "gpt_oss": (transformers.GptOssConfig, dict(
        LLAMA_LIKE, num_local_experts=4, num_experts_per_tok=2, intermediate_size=16,
        sliding_window=8, layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0,
                         "beta_slow": 1.0, "truncate": False,
                         "original_max_position_embeddings": 8, "rope_theta": 150000.0}), {
        "default": {},
        "window": {"sliding_window": 4},
        "yarn_8": {"rope_scaling": {"rope_type": "yarn", "factor": 8.0, "beta_fast": 32.0,
                                    "beta_slow": 1.0, "truncate": False,
                                    "original_max_position_embeddings": 8}},
        "top_1": {"num_experts_per_tok": 1},
    }),
    # Llama 4's text model: a chunked RoPE layer (chunks of 8, q and k RMS-normalised) then a
    # full NoPE one (query temperature from position 3 on); a dense layer (width 64) then 4
    # experts of width 16 under a sigmoid router, beside a shared expert
    "llama4_text": (transformers.Llama4TextConfig, dict(
        LLAMA_LIKE, intermediate_size=16, intermediate_size_mlp=64, num_local_experts=4,
        num_experts_per_tok=1, interleave_moe_layer_step=2, no_rope_layer_interval=2,
        attention_chunk_size=8, floor_scale=4, attn_scale=0.1, use_qk_norm=True), {
        "default": {},
        "top_2": {"num_experts_per_tok": 2},
        "no_qk_norm": {"use_qk_norm": False},
        "no_temperature": {"attn_temperature_tuning": False},
        "full_layers": {"layer_types": ["full_attention", "full_attention"]},
        "swapped": {"no_rope_layers": [0, 1], "layer_types": None},
        "llama3": {"rope_scaling": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 8}},
    }),
    # DeepSeek-V3: latent attention (ranks 16 and 24, 8 of 24 dims rotating in interleaved
    # pairs), a dense layer, then 8 experts of width 16 in 4 groups (top 2 groups, top 2
    # experts, a choice bias) beside a shared expert
    "deepseek_v3": (transformers.DeepseekV3Config, dict(
        LLAMA_LIKE, num_key_value_heads=2, head_dim=8, rms_norm_eps=1e-6, kv_lora_rank=16,
        q_lora_rank=24,
        qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, n_routed_experts=8,
        num_experts_per_tok=2, moe_intermediate_size=16, n_shared_experts=1, n_group=4,
        topk_group=2, routed_scaling_factor=2.5, first_k_dense_replace=1, norm_topk_prob=True,
        rope_interleave=True), {
        "default": {},
        "raw_top_k": {"norm_topk_prob": False, "routed_scaling_factor": 1.0},
        "one_group": {"n_group": 1, "topk_group": 1},
        "top_1": {"num_experts_per_tok": 1},
        "halves": {"rope_interleave": False},
        "yarn": {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "mscale": 1.0,
                                  "mscale_all_dim": 1.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                  "original_max_position_embeddings": MAX_POSITIONS}},
    }),
    # GLM-4.5: biased q, k, v, q and k RMS-normalised per head, half of each head rotating; a
    # dense layer, then DeepSeek-V3's experts (8 in 2 groups, top 1 group, top 2 experts)
    "glm4_moe": (transformers.Glm4MoeConfig, dict(
        LLAMA_LIKE, attention_bias=True, partial_rotary_factor=0.5, use_qk_norm=True,
        n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=16,
        n_shared_experts=1, n_group=2, topk_group=1, routed_scaling_factor=1.5,
        first_k_dense_replace=1, norm_topk_prob=True), {
        "default": {},
        "both_groups": {"topk_group": 2},
        "raw_top_k": {"norm_topk_prob": False, "routed_scaling_factor": 1.0},
        "yarn": {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
    }),
    # Qwen2-MoE: qwen2's attention; 4 experts of width 16 (top 2) beside a gated shared
    # expert of width 24, then a dense layer (mlp_only_layers)
    "qwen2_moe": (transformers.Qwen2MoeConfig, dict(
        LLAMA_LIKE, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
        shared_expert_intermediate_size=24, mlp_only_layers=[1]), {
        "default": {},
        "norm_top_k": {"norm_topk_prob": True},
        "window": {"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1,
                   "layer_types": None},
        "yarn": {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
    }),
}
# Cases also checked on the row longer than max_position_embeddings (or the original one)
LONG_CASES = ("dynamic", "longrope_phi3", "longrope")
SHARDED = ("llama",)


def tokenizer() -> Tokenizer:
    """A byte-level BPE tokenizer of VOCAB tokens trained on TEXT."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=sorted(set(TEXT)), show_progress=False)
    tok.train_from_iterator([TEXT] * 4, trainer)
    return tok


def randomise(model: torch.nn.Module, seed: int) -> None:
    """Every parameter redrawn: weights N(0, 0.2), norm scales 1 + N(0, 0.1), biases N(0, 0.1),
    then rounded to float16 (the dtype the checkpoint stores); DeepSeek-V3's routers' choice
    biases (buffers) N(0, 0.1) too."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buffer.copy_((0.1 * torch.randn(buffer.shape, generator=gen)).half().float())
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            if "norm" in name and name.endswith("weight"):
                value = 1.0 + 0.1 * noise
            elif name.endswith("bias"):
                value = 0.1 * noise
            else:
                value = 0.2 * noise
            param.copy_(value.half().float())


def to_float16(directory: Path) -> None:
    """Rewrite every *.safetensors under directory with float16 tensors."""
    for path in directory.glob("*.safetensors"):
        tensors = {k: v.half().contiguous() for k, v in load_file(path).items()}
        save_file(tensors, path, metadata={"format": "pt"})


def legacy_config(saved: dict) -> dict:
    """config.json as the hub's snapshots write it (transformers < 5): RoPE's base and share
    at the top level (GPT-NeoX: rotary_emb_base, rotary_pct; Gemma 3: rope_theta and
    rope_local_base_freq; OLMo 3: rope_theta), no rope_parameters."""
    saved = dict(saved)
    if saved["model_type"] == "ministral3":  # a transformers 5 model: its block as it is
        return saved
    rope = saved.pop("rope_parameters")
    if saved["model_type"] == "gemma3_text":  # one block per layer type
        saved.update(rope_theta=rope["full_attention"]["rope_theta"],
                     rope_local_base_freq=rope["sliding_attention"]["rope_theta"])
    elif saved["model_type"] == "olmo3":  # one block per layer type, one base for both
        saved["rope_theta"] = rope["full_attention"]["rope_theta"]
    elif saved["model_type"] == "gpt_oss":  # its YaRN block as the hub's rope_scaling
        saved["rope_theta"] = rope.pop("rope_theta")
        saved["rope_scaling"] = rope
    elif saved["model_type"] == "gpt_neox":
        saved.update(rotary_emb_base=rope["rope_theta"], rotary_pct=rope["partial_rotary_factor"])
    else:
        saved["rope_theta"] = rope["rope_theta"]
        if rope.get("partial_rotary_factor", 1.0) != 1.0:  # Phi's, at the top level
            saved["partial_rotary_factor"] = rope["partial_rotary_factor"]
    return saved


def patched(config: dict, overrides: dict) -> dict:
    """config.json with a case's overrides (a None value removes the key); the tests patch
    the committed config.json the same way."""
    return {k: v for k, v in {**config, **overrides}.items() if v is not None}


def reference_logits(directory: Path, config: dict, tokens: np.ndarray, scratch: Path):
    """transformers' float32 logits [B, L, V] of a fresh model loaded from `directory` with
    `config` as its config.json (a fresh rotary module: dynamic scaling starts from
    max_position_embeddings)."""
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(directory, scratch)
    (scratch / "config.json").write_text(json.dumps(config))
    model = transformers.AutoModelForCausalLM.from_pretrained(scratch, dtype=torch.float32)
    with torch.no_grad():
        return model(torch.from_numpy(tokens).long()).logits.float().numpy()


def save_checkpoint(directory: Path, family: str, seed: int) -> dict:
    """The random float16 checkpoint and tokenizer of `family` in `directory`; its config."""
    cls, kwargs, _ = FAMILIES[family]
    shutil.rmtree(directory, ignore_errors=True)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cls(**kwargs), dtype=torch.float32)
    randomise(model, seed)
    model.save_pretrained(directory, max_shard_size="60KB" if family in SHARDED else "50MB")
    to_float16(directory)
    tokenizer().save(str(directory / "tokenizer.json"))
    config = legacy_config(json.loads((directory / "config.json").read_text()))
    config.pop("dtype", None)
    (directory / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    return config


def make_family(out: Path, family: str, seed: int) -> None:
    directory = out / family
    config = save_checkpoint(directory, family, seed)
    rng = np.random.default_rng(seed)
    batches = {"tokens": rng.integers(0, VOCAB, (BATCH, LENGTH)).astype(np.int32),
               "long": rng.integers(0, VOCAB, (1, LONG)).astype(np.int32)}
    for name, tokens in batches.items():
        np.save(directory / f"{name}.npy", tokens)
    listed = []
    for case, overrides in FAMILIES[family][2].items():
        for batch in ["tokens", "long"] if case in LONG_CASES else ["tokens"]:
            logits = reference_logits(directory, patched(config, overrides), batches[batch],
                                      out / "scratch")
            np.save(directory / f"{case}.{batch}.npy", logits)
            listed.append({"case": case, "config": overrides, "tokens": f"{batch}.npy",
                           "logits": f"{case}.{batch}.npy"})
    shutil.rmtree(out / "scratch")
    (directory / "cases.json").write_text(json.dumps(
        {"transformers": transformers.__version__, "torch": torch.__version__,
         "cases": listed}, indent=1) + "\n")


def write_mxfp4(directory: Path, seed: int) -> None:
    """mxfp4.npz beside the gpt_oss snapshot: MXFP4 blocks and scales shaped as its layer 0's
    gate_up_proj would store them ([experts, 2 * intermediate, hidden / 32, 16] and [experts,
    2 * intermediate, hidden / 32]), and transformers' dequantization of them
    (convert_moe_packed_tensors, in float32), the layout of gate_up_proj [experts, hidden,
    2 * intermediate]."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    experts, width, hidden = 4, 32, 32
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (experts, width, hidden // 32, 16), dtype=np.uint8)
    scales = rng.integers(122, 130, (experts, width, hidden // 32), dtype=np.uint8)
    dequantized = convert_moe_packed_tensors(torch.from_numpy(blocks), torch.from_numpy(scales),
                                             dtype=torch.float32)
    np.savez(directory / "mxfp4.npz", blocks=blocks, scales=scales,
             dequantized=dequantized.numpy())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "tests"
                                             / "fixtures" / "pretrained"))
    parser.add_argument("--families", default=",".join(FAMILIES),
                        help="the families to write (default: all), each with its own seed")
    args = parser.parse_args()
    for seed, family in enumerate(FAMILIES):  # a family's seed: its place in FAMILIES
        if family in args.families.split(","):
            make_family(Path(args.out), family, seed)
            if family == "gpt_oss":  # its hub snapshots' experts are MXFP4
                write_mxfp4(Path(args.out) / family, seed)
            print(family, "done")


if __name__ == "__main__":
    main()
