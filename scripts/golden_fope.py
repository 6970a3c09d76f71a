"""Golden outputs of FoPE, for tests/test_encodings_polar_fourier.py.

    git clone https://github.com/TsinghuaC3I/Fourier-Position-Embedding /tmp/fope
    python scripts/golden_fope.py --reference=/tmp/fope \
        --commit=$(git -C /tmp/fope rev-parse HEAD) > tests/golden/fope.json
    (needs torch and numpy, e.g. in a venv of its own; the tests need neither)

The authors' `FourierEmbedding` (with the `RotaryEmbedding` it extends) of olmo/model.py.
Importing their `olmo` package needs OLMo's training stack, so this script reads those two
classes (and `_non_meta_init_device`) out of the checkout's model.py and runs them as they
are, with a config holding their ModelConfig's defaults (read from olmo/config.py) and the
paper's FoPE settings, as their configs set them: rope_clamp_floor_freq and
rope_clamp_floor_to_zero (frequencies below 2 pi / max_sequence_length zeroed), fourier with
eye_xavier_norm init, separate sin/cos bases, a basis per head, zero frequencies ignored.
Their module draws the coefficients (torch.manual_seed(seed)); it then maps q and k
[B, H, L, Dh] of positions 0..L-1, in float64 apart from their float32 angles
(rope_full_precision off, so their float32 cast does not apply).
"""

import __future__

import argparse
import ast
import contextlib
import json
import math
import typing
from pathlib import Path
from types import SimpleNamespace

import numpy as np

BATCH, HEADS, LENGTH = 1, 2, 9


def _defaults(config_py: str) -> dict:
    """ModelConfig's fields with literal defaults, from the source of olmo/config.py."""
    tree = ast.parse(config_py)
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelConfig")
    out = {}
    for node in model.body:
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            with contextlib.suppress(ValueError):  # a default that is not a literal
                out[node.target.id] = ast.literal_eval(node.value)
    return out


def _authors_classes(model_py: str, path: str) -> dict:
    import torch

    wanted = {"_non_meta_init_device", "RotaryEmbedding", "FourierEmbedding"}
    tree = ast.parse(model_py)
    body = [n for n in tree.body if getattr(n, "name", None) in wanted]
    namespace = {"torch": torch, "nn": torch.nn, "F": torch.nn.functional, "math": math,
                 **{n: getattr(typing, n) for n in ("Optional", "Tuple", "Dict", "List")}}
    code = compile(ast.Module(body=body, type_ignores=[]), path, "exec",
                   flags=__future__.annotations.compiler_flag, dont_inherit=True)
    exec(code, namespace)  # the authors' classes, unchanged
    return namespace


def case(classes, defaults, head_dim, theta, max_len, gain, seed) -> dict:
    import torch

    config = SimpleNamespace(**dict(
        defaults, d_model=HEADS * head_dim, n_heads=HEADS, max_sequence_length=max_len,
        rope_theta=theta, rope_full_precision=False, rope_clamp_floor_freq=True,
        rope_clamp_floor_to_zero=True, fourier=True, fourier_init="eye_xavier_norm",
        fourier_init_norm_gain=gain, fourier_separate_basis=True, fourier_separate_head=True,
        fourier_ignore_zero=True, init_device="cpu"))
    torch.manual_seed(seed)
    module = classes["FourierEmbedding"](config, {}).double()
    rng = np.random.default_rng(seed)
    q, k = (rng.normal(size=(BATCH, HEADS, LENGTH, head_dim)) for _ in range(2))
    with torch.no_grad():
        tq, tk = (module(torch.tensor(a), LENGTH) for a in (q, k))
    layout = lambda a: np.asarray(a).transpose(0, 2, 1, 3).tolist()  # posjax: [B, L, H, D]
    return dict(head_dim=head_dim, theta=theta, max_len=max_len, init_gain=gain,
                q=layout(q), k=layout(k), q_out=layout(tq.numpy()), k_out=layout(tk.numpy()),
                cos_coef=module.cos_coef.detach().numpy().tolist(),
                sin_coef=module.sin_coef.detach().numpy().tolist(),
                scores=(tq @ tk.transpose(-1, -2)).numpy().tolist())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reference", required=True,
                        help="a checkout of TsinghuaC3I/Fourier-Position-Embedding")
    parser.add_argument("--commit", default="", help="that checkout's commit")
    args = parser.parse_args()
    olmo = Path(args.reference) / "olmo"
    classes = _authors_classes((olmo / "model.py").read_text(), str(olmo / "model.py"))
    defaults = _defaults((olmo / "config.py").read_text())
    # D = d = 3 kept frequencies (the identity start); D = 8 > d = 4 (the strided start)
    cases = [case(classes, defaults, 16, 10000.0, 64, 0.3, 0),
             case(classes, defaults, 16, 100.0, 512, 0.6, 1)]
    print(json.dumps(dict(
        source="TsinghuaC3I/Fourier-Position-Embedding olmo/model.py FourierEmbedding and "
               f"RotaryEmbedding at commit {args.commit or '?'}, the paper's FoPE config keys "
               "(rope_clamp_floor_freq, rope_clamp_floor_to_zero, fourier_init="
               "eye_xavier_norm, separate basis and head, ignore zero), float64",
        cases=cases)))


if __name__ == "__main__":
    main()
