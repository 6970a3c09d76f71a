"""Golden outputs of stick-breaking attention, for tests/test_encoders_stickbreaking.py.

    git clone https://github.com/shawntan/stickbreaking-attention /tmp/sb
    python scripts/golden_stickbreaking.py --reference=/tmp/sb/stickbreaking_attention/sb_ref.py \
        --commit=$(git -C /tmp/sb rev-parse HEAD) > tests/golden/stickbreaking.json
    (needs torch and numpy, e.g. in a venv of its own; the tests need neither)

The authors' plain-PyTorch reference `stickbreaking(q, k, v, mask, cum_weight)` (sb_ref.py,
the function their tests check the Triton kernels against), called as their tests call it:
`mask` = ones.triu(0) (attend_current False) or ones.triu(1) (True), `cum_weight` =
ones.tril(-1), in float64. It returns (A @ v, 1 - sum_j A_ij); "out" adds rem * v as their
tests' `ref_fwd` does (remainder=True), "out_paper" is A @ v alone (the paper's equation).
"""

import argparse
import importlib.util
import json

import numpy as np

BATCH, HEADS, LENGTH, HEAD_DIM = 1, 2, 9, 4


def _reference(path: str):
    spec = importlib.util.spec_from_file_location("sb_ref", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.stickbreaking


def case(stickbreaking, attend_current: bool, seed: int) -> dict:
    import torch

    rng = np.random.default_rng(seed)
    # [B, H, L, D] as the authors' code takes them; q and k shifted as in their tests, so
    # that the betas spread over (0, 1).
    q = 0.8 * (rng.normal(size=(BATCH, HEADS, LENGTH, HEAD_DIM)) + 1)
    k = 0.8 * (rng.normal(size=(BATCH, HEADS, LENGTH, HEAD_DIM)) - 1)
    v = rng.normal(size=(BATCH, HEADS, LENGTH, HEAD_DIM))
    ones = torch.ones(LENGTH, LENGTH, dtype=torch.float64)
    mask = ones.triu(1 if attend_current else 0).bool()
    tq, tk, tv = (torch.tensor(a, dtype=torch.float64) for a in (q, k, v))
    o, rem = stickbreaking(tq, tk, tv, mask, ones.tril(-1))
    out = o + rem[..., None] * tv
    # posjax's layout is [B, L, H, D]
    layout = lambda a: np.asarray(a).transpose(0, 2, 1, 3).tolist()
    return dict(attend_current=attend_current, q=layout(q), k=layout(k), v=layout(v),
                out=layout(out.numpy()), out_paper=layout(o.numpy()))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reference", required=True, help="path to the authors' sb_ref.py")
    parser.add_argument("--commit", default="", help="the authors' repository's commit")
    args = parser.parse_args()
    stickbreaking = _reference(args.reference)
    cases = [case(stickbreaking, attend_current, seed)
             for seed, attend_current in enumerate((False, True))]
    print(json.dumps(dict(
        source="shawntan/stickbreaking-attention stickbreaking_attention/sb_ref.py "
               f"stickbreaking() at commit {args.commit or '?'}, float64, mask and cum_weight "
               "as in tests/test_attn.py",
        cases=cases)))


if __name__ == "__main__":
    main()
