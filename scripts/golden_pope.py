"""Golden outputs of PoPE, for tests/test_encodings_polar_fourier.py.

    git clone https://github.com/lucidrains/PoPE-pytorch /tmp/pope
    python scripts/golden_pope.py --reference=/tmp/pope \
        --commit=$(git -C /tmp/pope rev-parse HEAD) > tests/golden/pope.json
    (needs torch, einops, torch-einops-utils and numpy, e.g. in a venv of its own; the tests
    need none of them)

lucidrains/PoPE-pytorch is a port of the paper (arXiv 2509.10534), not the authors' code.
Its `PoPE(dim, heads=H)` module gives (freqs, clamped bias) for the positions 0..L-1;
`attention.compute_attn_similarity_non_fused` (the path its `compute_attn_similarity` takes
off CUDA; that wrapper only accepts head_dim 32..256) is q'.k' after `apply_pope_to_qk` (no
1/sqrt(Dh)) and `flash_attn_with_pope(..., fused=False, causal=True)` the attention output,
all in float64. The raw phase bias is drawn past [-2 pi, 0] on purpose, so the clamp is
part of the golden.
"""

import argparse
import json
import sys

import numpy as np

BATCH, HEADS, LENGTH, HEAD_DIM = 1, 2, 9, 8


def case(pope_pkg, rot_dim: int, theta: float, seed: int) -> dict:
    import torch

    rng = np.random.default_rng(seed)
    q, k, v = (rng.normal(size=(BATCH, HEADS, LENGTH, HEAD_DIM)) for _ in range(3))
    bias = rng.uniform(-8.0, 1.5, size=(HEADS, rot_dim))
    module = pope_pkg.PoPE(rot_dim, heads=HEADS, theta=theta).double()
    with torch.no_grad():
        module.bias.copy_(torch.tensor(bias))
        pos_emb = module(LENGTH)
        tq, tk, tv = (torch.tensor(a, dtype=torch.float64) for a in (q, k, v))
        scores = pope_pkg.attention.compute_attn_similarity_non_fused(tq, tk, pos_emb)
        out = pope_pkg.flash_attn_with_pope(tq, tk, tv, pos_emb=pos_emb, causal=True,
                                            fused=False)
    # posjax's layout is [B, L, H, D]
    layout = lambda a: np.asarray(a).transpose(0, 2, 1, 3).tolist()
    return dict(theta=theta, fraction=rot_dim / HEAD_DIM, q=layout(q), k=layout(k),
                v=layout(v), bias=bias.tolist(), scores=np.asarray(scores).tolist(),
                out=layout(out.numpy()))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reference", required=True,
                        help="a checkout of lucidrains/PoPE-pytorch (holding PoPE_pytorch/)")
    parser.add_argument("--commit", default="", help="that checkout's commit")
    args = parser.parse_args()
    sys.path.insert(0, args.reference)
    import PoPE_pytorch
    import PoPE_pytorch.attention

    cases = [case(PoPE_pytorch, HEAD_DIM, 10000.0, 0), case(PoPE_pytorch, 6, 100.0, 1)]
    print(json.dumps(dict(
        source="lucidrains/PoPE-pytorch PoPE_pytorch/pope.py PoPE, apply_pope_to_qk and "
               "PoPE_pytorch/attention.py compute_attn_similarity_non_fused, flash_attn_with_pope "
               f"(fused=False, causal=True) at commit {args.commit or '?'}, float64",
        cases=cases)))


if __name__ == "__main__":
    main()
