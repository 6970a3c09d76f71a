"""Golden outputs of RoPE++, for tests/test_encodings_polar_fourier.py.

    git clone https://github.com/OpenMOSS/rope_pp /tmp/rope_pp
    python scripts/golden_rope_pp.py --reference=/tmp/rope_pp \
        --commit=$(git -C /tmp/rope_pp rev-parse HEAD) > tests/golden/rope_pp.json
    (needs torch, transformers==4.51.0 (the authors' pin) and numpy, e.g. in a venv of its
    own; the tests need none of them)

The authors' attention layer, `LlamaAttention` of rope_pp/modeling_llama_rope_pp.py, with their
`LlamaRotaryEmbedding`, in float64 with eager attention under a causal mask, for RoPE++_EH
(`imag_mode="imag1"`) and RoPE++_EC (`"imag2"`), with grouped keys and values. Recorded: the
layer's input x, its weights, its output, and for each of the attention heads the query head
and key/value head it reads (their stacking of real and imaginary copies and `repeat_kv`),
so a test can rebuild the heads and run posjax's attention with `encoding=rope_pp`.
"""

import argparse
import json
import sys

LENGTH, HIDDEN, HEADS, KV_HEADS = 9, 32, 4, 2


def case(module, config_module, mode: str, theta: float, seed: int) -> dict:
    import torch

    torch.manual_seed(seed)
    config = config_module.LlamaConfig(hidden_size=HIDDEN, num_attention_heads=HEADS,
                                       num_key_value_heads=KV_HEADS, rope_theta=theta,
                                       max_position_embeddings=64)
    config.rope_config = {"imag": True, "imag_mode": mode}
    config._attn_implementation = "eager"
    attn = module.LlamaAttention(config, layer_idx=0).double().eval()
    rotary = module.LlamaRotaryEmbedding(config)
    x = torch.randn(1, LENGTH, HIDDEN, dtype=torch.float64)
    position_ids = torch.arange(LENGTH)[None]
    mask = torch.full((LENGTH, LENGTH), torch.finfo(torch.float64).min, dtype=torch.float64)
    mask = torch.triu(mask, diagonal=1)[None, None]
    with torch.no_grad():
        out, _ = attn(x, rotary(x, position_ids), mask)
    heads = attn.o_proj.in_features // attn.head_dim
    # their stack: attention head j is query head j // 2 (real when j is even), and
    # repeat_kv hands it key/value head j // num_key_value_groups
    weights = {n: getattr(attn, n).weight.detach().numpy().tolist()
               for n in ("q_proj", "k_proj", "v_proj", "o_proj")}
    return dict(mode=mode, theta=theta, head_dim=attn.head_dim, x=x.numpy().tolist(),
                q_head_of=[j // 2 for j in range(heads)],
                kv_head_of=[j // attn.num_key_value_groups for j in range(heads)],
                out=out.numpy().tolist(), **weights)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reference", required=True,
                        help="a checkout of OpenMOSS/rope_pp (holding rope_pp/)")
    parser.add_argument("--commit", default="", help="that checkout's commit")
    args = parser.parse_args()
    sys.path.insert(0, args.reference)
    from rope_pp import configuration_llama, modeling_llama_rope_pp

    cases = [case(modeling_llama_rope_pp, configuration_llama, mode, theta, seed)
             for seed, (mode, theta) in enumerate((("imag1", 10000.0), ("imag2", 100.0)))]
    print(json.dumps(dict(
        source="OpenMOSS/rope_pp rope_pp/modeling_llama_rope_pp.py LlamaAttention and "
               f"LlamaRotaryEmbedding at commit {args.commit or '?'}, transformers 4.51.0, "
               "float64, eager attention, causal mask",
        cases=cases)))


if __name__ == "__main__":
    main()
