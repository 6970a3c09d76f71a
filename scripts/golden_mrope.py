"""Golden values of M-RoPE, for tests/test_encoders_rotary_multimodal.py.

    python scripts/golden_mrope.py > tests/golden/mrope.json
    (needs torch and transformers, e.g. in a venv of its own; no weights are downloaded; the
    tests need neither)

From Hugging Face transformers (the version is recorded in the file):
  positions: `Qwen2VLModel.get_rope_index` and `Qwen3VLModel.get_rope_index` on one mixed
    sequence (text, an image, text, another image, text; spatial_merge_size 2), called on a
    stand-in for the model that holds only the config they read;
  qwen2: `Qwen2VLRotaryEmbedding` (contiguous mrope_section) and `apply_rotary_pos_emb` on
    random q, k at those positions;
  qwen3: `Qwen3VLTextRotaryEmbedding` (interleaved) and its `apply_rotary_pos_emb`, likewise.
"""

import functools
import json
from types import SimpleNamespace

import numpy as np

HEADS, HEAD_DIM, MERGE = 2, 16, 2
# (text tokens) or (t, h, w) patches before the 2 x 2 merge
PARTS = (3, (1, 4, 6), 2, (1, 6, 4), 2)
SECTIONS = {"qwen2": [2, 3, 3], "qwen3": [4, 2, 2]}


def _sequence():
    import torch

    types, grids = [], []
    for part in PARTS:
        if isinstance(part, int):
            types += [0] * part
        else:
            types += [1] * (part[0] * part[1] * part[2] // MERGE**2)
            grids.append(part)
    types = torch.tensor([types])
    return torch.zeros_like(types), types, torch.tensor(grids)


def rope_index(model_class):
    stand_in = SimpleNamespace(
        config=SimpleNamespace(vision_config=SimpleNamespace(spatial_merge_size=MERGE)))
    stand_in.get_vision_position_ids = functools.partial(model_class.get_vision_position_ids,
                                                         stand_in)
    input_ids, types, grids = _sequence()
    positions, _ = model_class.get_rope_index(stand_in, input_ids, types, image_grid_thw=grids)
    return positions  # [3, 1, L]


def rotated(module, config_class, rotary_class, section, positions):
    import torch

    config = config_class(hidden_size=HEADS * HEAD_DIM, num_attention_heads=HEADS,
                          num_key_value_heads=HEADS, head_dim=HEAD_DIM,
                          rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                           "mrope_section": section})
    rotary = rotary_class(config)
    rng = np.random.default_rng(0)
    length = positions.shape[-1]
    q, k = (torch.tensor(rng.normal(size=(1, HEADS, length, HEAD_DIM)), dtype=torch.float32)
            for _ in range(2))
    cos, sin = rotary(q, positions)
    q_out, k_out = module.apply_rotary_pos_emb(q, k, cos, sin)
    # posjax's layout: [B, L, H, D]
    layout = lambda t: t.numpy().transpose(0, 2, 1, 3).tolist()
    return dict(section=section, q=layout(q), k=layout(k), q_out=layout(q_out),
                k_out=layout(k_out))


def main():
    import transformers
    from transformers.models.qwen2_vl import configuration_qwen2_vl as c2
    from transformers.models.qwen2_vl import modeling_qwen2_vl as m2
    from transformers.models.qwen3_vl import configuration_qwen3_vl as c3
    from transformers.models.qwen3_vl import modeling_qwen3_vl as m3

    positions = {"qwen2": rope_index(m2.Qwen2VLModel), "qwen3": rope_index(m3.Qwen3VLModel)}
    out = dict(
        source=f"transformers {transformers.__version__}: Qwen2VLModel / Qwen3VLModel "
               "get_rope_index, Qwen2VLRotaryEmbedding / Qwen3VLTextRotaryEmbedding and "
               "apply_rotary_pos_emb (float32)",
        parts=[list(p) if isinstance(p, tuple) else p for p in PARTS], merge=MERGE,
        positions={name: p[:, 0].T.tolist() for name, p in positions.items()},  # [L, 3]
        qwen2=rotated(m2, c2.Qwen2VLTextConfig, m2.Qwen2VLRotaryEmbedding, SECTIONS["qwen2"],
                      positions["qwen2"]),
        qwen3=rotated(m3, c3.Qwen3VLTextConfig, m3.Qwen3VLTextRotaryEmbedding,
                      SECTIONS["qwen3"], positions["qwen3"]),
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
