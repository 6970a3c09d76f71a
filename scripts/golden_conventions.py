"""Golden values for two peer conventions posjax offers, from the peers' own code, run once.

    python scripts/golden_conventions.py > tests/golden/conventions.json
    (needs torch, transformers >= 5 and x-transformers, e.g. in a venv of their own; the
    tests need none of them)

deberta: Hugging Face's DebertaV2 `DisentangledSelfAttention.disentangled_attention_bias`
(transformers/models/deberta_v2/modeling_deberta_v2.py), the released code's convention:
p2c gathered with -relative_pos and transposed, i.e. posjax's `p2c_index="code"`. A module
with its own position projections (share_att_key=False), log buckets (position_buckets k,
max_relative_positions) and zero projection biases scores random queries and keys of one
sequence; the record holds the inputs and c2p + p2c over HF's sqrt(3 Dh).

sinusoidal: the table of Hugging Face's `RoFormerSinusoidalPositionalEmbedding` (sines in the
first half, cosines in the second) and of x-transformers' `ScaledSinusoidalEmbedding` with its
learned scale divided out, i.e. posjax's `layout="half"`.
"""

import json
from importlib.metadata import version

import torch
import transformers
from transformers import DebertaV2Config
from transformers.models.deberta_v2.modeling_deberta_v2 import (
    DisentangledSelfAttention,
    build_relative_position,
)
from transformers.models.roformer.modeling_roformer import RoFormerSinusoidalPositionalEmbedding
from x_transformers.x_transformers import ScaledSinusoidalEmbedding

D_MODEL, HEADS, LENGTH, BUCKETS, MAX_POSITION = 16, 2, 12, 4, 16
SIN_DIM, SIN_POSITIONS = 16, [0, 1, 2, 3, 7, 31, 100, 1000, 4095]


def deberta() -> dict:
    torch.manual_seed(0)
    config = DebertaV2Config(hidden_size=D_MODEL, num_attention_heads=HEADS,
                             relative_attention=True, pos_att_type=["c2p", "p2c"],
                             position_buckets=BUCKETS, max_relative_positions=MAX_POSITION,
                             share_att_key=False)
    module = DisentangledSelfAttention(config).eval()
    head_dim = D_MODEL // HEADS
    rel_emb = torch.randn(2 * BUCKETS, D_MODEL) * 0.5
    wq_r, wk_r = torch.randn(D_MODEL, D_MODEL) * 0.3, torch.randn(D_MODEL, D_MODEL) * 0.3
    q, k = torch.randn(HEADS, LENGTH, head_dim), torch.randn(HEADS, LENGTH, head_dim)
    with torch.no_grad():
        # posjax computes x @ W; torch's Linear computes x @ weight.T.
        module.pos_query_proj.weight.copy_(wq_r.T)
        module.pos_key_proj.weight.copy_(wk_r.T)
        module.pos_query_proj.bias.zero_()
        module.pos_key_proj.bias.zero_()
        relative = build_relative_position(q, k, bucket_size=BUCKETS, max_position=MAX_POSITION)
        score = module.disentangled_attention_bias(q, k, relative, rel_emb, scale_factor=3)
    return {
        "d_model": D_MODEL, "num_heads": HEADS, "bucket_size": BUCKETS,
        "max_position": MAX_POSITION, "rel_emb": rel_emb.tolist(),
        "wq_r": wq_r.reshape(D_MODEL, HEADS, head_dim).tolist(),
        "wk_r": wk_r.reshape(D_MODEL, HEADS, head_dim).tolist(),
        "q": q.tolist(), "k": k.tolist(), "score": score.tolist(),  # [H, L, L]
    }


def sinusoidal() -> dict:
    roformer = RoFormerSinusoidalPositionalEmbedding(max(SIN_POSITIONS) + 1, SIN_DIM)
    table = roformer.create_weight()[SIN_POSITIONS]
    scaled = ScaledSinusoidalEmbedding(SIN_DIM)
    with torch.no_grad():
        x = scaled(torch.zeros(1, 1, SIN_DIM), pos=torch.tensor(SIN_POSITIONS).float())
        x = x / scaled.scale
    return {"dim": SIN_DIM, "positions": SIN_POSITIONS, "roformer": table.tolist(),
            "x_transformers": x.tolist()}


print(json.dumps({
    "source": "transformers' DebertaV2 DisentangledSelfAttention and RoFormer sinusoidal "
              "table, x-transformers' ScaledSinusoidalEmbedding; run by "
              "scripts/golden_conventions.py",
    "transformers": transformers.__version__, "x_transformers": version("x-transformers"),
    "torch": torch.__version__,
    "deberta": deberta(), "sinusoidal": sinusoidal(),
}))
