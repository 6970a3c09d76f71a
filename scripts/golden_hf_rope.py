"""Golden RoPE frequencies and attention factors from Hugging Face transformers' own code.

    python scripts/golden_hf_rope.py > tests/golden/hf_rope.json
    (needs torch and transformers >= 5, e.g. in a venv of its own; the tests need neither)

Each case is a real `rope_scaling` / `rope_parameters` block, written as posjax reads it
(`scaling`, with the encoding's `theta` and `fraction`), and what transformers computes for it
at one head dim: `inv_freq` (float32[rot_dim / 2]) and `attention_factor`, the factor
transformers multiplies cos and sin by, so q.k of the rotated dims scales by its square.
Scaled maps call `transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS[rope_type](config,
seq_len=...)`; "default" calls the model's own `compute_default_rope_parameters` (GPT-NeoX's,
the one that reads `partial_rotary_factor`). Dynamic NTK is taken at one length per fresh
module: the script checks that a new `LlamaRotaryEmbedding` run once at that length holds the
same frequencies (a module that already saw a longer input keeps that one's).

DeepSeek-V3's attention (transformers/models/deepseek_v3/modeling_deepseek_v3.py,
`DeepseekV3Attention.__init__`: `self.scaling = yarn_apply_mscale(rope_parameters,
qk_head_dim ** -0.5)`) multiplies the softmax scale by mscale(s, mscale_all_dim)^2 on top of
the rotary module's factor, so its cases also record `logit_factor`: that attention's
`scaling * sqrt(qk_head_dim)` times the rotary `attention_scaling` squared, computed from a
`DeepseekV3Attention` and a `DeepseekV3RotaryEmbedding` built here.
"""

import json
import math

import torch
import transformers
from transformers import DeepseekV3Config, GPTNeoXConfig, LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
    DeepseekV3Attention,
    DeepseekV3RotaryEmbedding,
)
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

HEAD_DIMS = (64, 128)
DYNAMIC_TRAIN = 4096

# DeepSeek-V3's block as shipped in deepseek-ai/DeepSeek-V3 config.json (with rope_theta 10000,
# max_position_embeddings 163840, qk_rope_head_dim 64, qk_nope_head_dim 128).
DEEPSEEK_V3 = {
    "beta_fast": 32,
    "beta_slow": 1,
    "factor": 40,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "original_max_position_embeddings": 4096,
    "type": "yarn",
}

# name -> (source of the block, block as posjax reads it, theta, fraction, model config
# fields beyond the block, current lengths or None)
CASES = {
    "default_v5": (
        "a transformers-v5 rope_parameters block carrying rope_theta and partial_rotary_factor "
        "(GPT-NeoX style rotary share 0.25, Llama 3 theta)",
        {"rope_type": "default", "rope_theta": 500000.0, "partial_rotary_factor": 0.25},
        500000.0, 0.25, {}, None,
    ),
    "linear": (
        "Position Interpolation, factor 4",
        {"rope_type": "linear", "factor": 4.0},
        10000.0, 1.0, {}, None,
    ),
    "dynamic": (
        "dynamic NTK, factor 2, Hugging Face's training length max_position_embeddings copied "
        "into the block (the fallback for original_max_position_embeddings)",
        {"type": "dynamic", "factor": 2.0, "max_position_embeddings": DYNAMIC_TRAIN},
        10000.0, 1.0, {"max_position_embeddings": DYNAMIC_TRAIN},
        (2 * DYNAMIC_TRAIN, 4 * DYNAMIC_TRAIN),
    ),
    "yarn_qwen": (
        "Qwen2.5 / Qwen3 long-context block (their model cards): YaRN factor 4 over 32768",
        {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
        1000000.0, 1.0, {"max_position_embeddings": 131072}, None,
    ),
    "yarn_beta_zero": (
        "YaRN with beta_fast 0 and beta_slow 0, which transformers reads as 32 and 1",
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096,
         "beta_fast": 0, "beta_slow": 0},
        10000.0, 1.0, {"max_position_embeddings": 16384}, None,
    ),
    "yarn_partial": (
        "YaRN factor 8 over 2048 on half of each head (partial_rotary_factor 0.5)",
        {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 2048,
         "partial_rotary_factor": 0.5},
        10000.0, 0.5, {"max_position_embeddings": 16384}, None,
    ),
    "llama3": (
        "Llama 3.1's block (meta-llama/Llama-3.1-8B config.json), rope_theta 500000",
        {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
         "original_max_position_embeddings": 8192, "rope_theta": 500000.0},
        500000.0, 1.0, {"max_position_embeddings": 131072}, None,
    ),
}

DEEPSEEK_CASES = {
    "deepseek_v3": ("DeepSeek-V3's block (deepseek-ai/DeepSeek-V3 config.json)", DEEPSEEK_V3),
    "deepseek_mscale_differs": (
        "DeepSeek-V3's block with mscale 0.707 != mscale_all_dim 1.0",
        {**DEEPSEEK_V3, "mscale": 0.707},
    ),
}


def longrope_block(head_dim):
    """A Phi-3 style LongRoPE block: per-pair factors (made up, rising with the pair) for a
    4096-token model served to 16384, the block's max_position_embeddings copied from the
    model config (transformers takes the factor as their ratio)."""
    pairs = head_dim // 2
    return {"rope_type": "longrope", "original_max_position_embeddings": 4096,
            "max_position_embeddings": 16384,
            "long_factor": [round(1.0 + 0.25 * i, 4) for i in range(pairs)],
            "short_factor": [round(1.0 + 0.01 * i, 4) for i in range(pairs)]}


def hf_block(scaling, theta):
    """The block as transformers takes it: rope_theta included, no model-level fields."""
    block = {k: v for k, v in scaling.items() if k != "max_position_embeddings"}
    return {**block, "rope_theta": theta}


def function_name(rope_type):
    if rope_type == "default":
        return "GPTNeoXRotaryEmbedding.compute_default_rope_parameters"
    fn = ROPE_INIT_FUNCTIONS[rope_type]
    return f"transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS[{rope_type!r}] ({fn.__name__})"


def llama_config(head_dim, scaling, theta, fields):
    return LlamaConfig(hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim,
                       intermediate_size=8, num_hidden_layers=1, vocab_size=8,
                       rope_parameters=hf_block(scaling, theta), **fields)


def fresh_module_inv_freq(config, seq_len):
    """inv_freq of a new LlamaRotaryEmbedding after one call at positions 0 .. seq_len - 1."""
    module = LlamaRotaryEmbedding(config)
    module(torch.zeros(1), torch.arange(seq_len)[None])
    return module.inv_freq


def record(name, source, scaling, theta, fraction, head_dim, inv_freq, factor, rope_type,
           **extra):
    return {
        "name": name, "source": source, "scaling": scaling, "theta": theta,
        "fraction": fraction, "head_dim": head_dim, **extra,
        "function": function_name(rope_type),
        "inv_freq": inv_freq.to(torch.float32).tolist(), "attention_factor": float(factor),
    }


def plain_cases():
    for name, (source, scaling, theta, fraction, fields, lengths) in CASES.items():
        rope_type = scaling.get("rope_type", scaling.get("type"))
        for head_dim in HEAD_DIMS:
            if rope_type == "default":
                config = GPTNeoXConfig(hidden_size=2 * head_dim, num_attention_heads=2,
                                       rope_parameters=hf_block(scaling, theta))
                inv, factor = GPTNeoXRotaryEmbedding.compute_default_rope_parameters(config)
                yield record(name, source, scaling, theta, fraction, head_dim, inv, factor,
                             rope_type)
                continue
            config = llama_config(head_dim, scaling, theta, fields)
            for seq_len in lengths or (None,):
                inv, factor = ROPE_INIT_FUNCTIONS[rope_type](config, seq_len=seq_len)
                extra = {}
                if seq_len is not None:
                    assert torch.equal(inv, fresh_module_inv_freq(config, seq_len))
                    extra = {"seq_len": seq_len}
                yield record(name, source, scaling, theta, fraction, head_dim, inv, factor,
                             rope_type, **extra)


def longrope_cases():
    for head_dim in HEAD_DIMS:
        scaling = longrope_block(head_dim)
        config = llama_config(head_dim, scaling, 10000.0, {"max_position_embeddings": 16384})
        for seq_len in (None, 2048, 8192):
            inv, factor = ROPE_INIT_FUNCTIONS["longrope"](config, seq_len=seq_len)
            extra = {} if seq_len is None else {"seq_len": seq_len}
            yield record("longrope", "LongRoPE per-pair factors, Phi-3 style (short within "
                         "4096 tokens, long past them)", scaling, 10000.0, 1.0, head_dim, inv,
                         factor, "longrope", **extra)


def deepseek_cases():
    for name, (source, scaling) in DEEPSEEK_CASES.items():
        for head_dim in HEAD_DIMS:
            config = DeepseekV3Config(
                hidden_size=64, num_attention_heads=2, num_key_value_heads=2, q_lora_rank=16,
                kv_lora_rank=16, qk_rope_head_dim=head_dim, qk_nope_head_dim=128,
                v_head_dim=128, max_position_embeddings=163840, num_hidden_layers=1,
                vocab_size=8, rope_parameters=hf_block(scaling, 10000.0))
            inv, factor = ROPE_INIT_FUNCTIONS["yarn"](config)
            rotary = DeepseekV3RotaryEmbedding(config)
            assert torch.equal(inv, rotary.inv_freq) and factor == rotary.attention_scaling
            attention = DeepseekV3Attention(config, layer_idx=0)
            softmax_factor = attention.scaling * math.sqrt(config.qk_head_dim)
            yield record(name, source, scaling, 10000.0, 1.0, head_dim, inv, factor, "yarn",
                         logit_factor=softmax_factor * factor**2)


print(json.dumps({
    "source": "Hugging Face transformers' RoPE init functions and DeepSeek-V3 attention, run by "
              "scripts/golden_hf_rope.py",
    "transformers": transformers.__version__,
    "torch": torch.__version__,
    "cases": [*plain_cases(), *longrope_cases(), *deepseek_cases()],
}, indent=1))
