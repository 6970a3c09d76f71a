"""Golden outputs of the gated delta rule, for tests/test_gated_deltanet.py.

    git clone https://github.com/fla-org/flash-linear-attention /tmp/fla
    python scripts/golden_gated_deltanet.py --reference=/tmp/fla/fla/ops/gated_delta_rule/naive.py \
        --commit=$(git -C /tmp/fla rev-parse HEAD)    # writes tests/golden/gated_deltanet.json
    (needs torch, numpy and einops, e.g. in a venv of its own; the tests need none of them)

fla's plain-PyTorch references (naive.py: `naive_recurrent_gated_delta_rule`, the per-token
recurrence, and `naive_chunk_gated_delta_rule`, the chunkwise WY form; both compute in
float32) on small fixed inputs in posjax's layout [B, L, H, D]. q and k are stored raw and
handed to fla L2-normalised as fla's GDN layer does (`use_qk_l2norm_in_kernel`: x / sqrt(sum
x^2 + 1e-6)); q's scale is fla's default Dk ** -0.5. A "segments" case runs each packed
segment through fla alone (fla's naive code has no segment ids) and concatenates, which is
what posjax's state reset must reproduce.
"""

import argparse
import importlib.util
import json
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "tests" / "golden" / "gated_deltanet.json"
# (name, batch, length, heads, dk, dv, chunk_size, log-gate spread, segment lengths or None)
CASES = (
    ("plain", 2, 13, 2, 4, 3, 4, 1.0, None),
    ("strong_decay", 1, 21, 3, 8, 5, 8, 4.0, None),
    ("one_chunk", 1, 9, 2, 6, 6, 16, 0.5, None),
    ("segments", 1, 14, 2, 4, 3, 4, 1.0, (5, 6, 3)),
)


def _reference(path: str):
    spec = importlib.util.spec_from_file_location("fla_naive", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _l2norm(x):
    return x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-6)


def _run(naive, q, k, v, g, beta, chunk_size):
    """fla's two forms on float64 NumPy inputs -> (recurrent, chunked) as NumPy."""
    import torch

    t = lambda a: torch.tensor(a, dtype=torch.float32)
    qn, kn = t(_l2norm(q)), t(_l2norm(k))
    rec, _ = naive.naive_recurrent_gated_delta_rule(qn, kn, t(v), t(beta), t(g))
    chunk, _ = naive.naive_chunk_gated_delta_rule(qn, kn, t(v), t(g), t(beta),
                                                  chunk_size=chunk_size)
    return rec.numpy().astype(np.float64), chunk.numpy().astype(np.float64)


def case(naive, seed: int, name, batch, length, heads, dk, dv, chunk_size, spread, segments):
    rng = np.random.default_rng(seed)
    q, k = (rng.normal(size=(batch, length, heads, dk)) for _ in range(2))
    v = rng.normal(size=(batch, length, heads, dv))
    # g = log alpha <= 0 (fla's gate -exp(A) softplus(.)), beta in (0, 1) (sigmoid).
    g = -spread * np.log1p(np.exp(rng.normal(size=(batch, length, heads))))
    beta = 1.0 / (1.0 + np.exp(-rng.normal(size=(batch, length, heads))))
    seg = np.ones((batch, length), np.int64)
    if segments is None:
        rec, chunk = _run(naive, q, k, v, g, beta, chunk_size)
    else:
        bounds = np.cumsum((0, *segments))
        parts = [_run(naive, *(x[:, a:b] for x in (q, k, v, g, beta)), chunk_size)
                 for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        rec, chunk = (np.concatenate([p[i] for p in parts], axis=1) for i in (0, 1))
        for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
            seg[:, a:b] = i + 1
    return dict(name=name, chunk_size=chunk_size, q=q.tolist(), k=k.tolist(), v=v.tolist(),
                g=g.tolist(), beta=beta.tolist(), segment_ids=seg.tolist(),
                recurrent=rec.tolist(), chunked=chunk.tolist())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reference", required=True, help="path to fla's naive.py")
    parser.add_argument("--commit", default="", help="fla's commit")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    naive = _reference(args.reference)
    cases = [case(naive, seed, *spec) for seed, spec in enumerate(CASES)]
    source = ("fla-org/flash-linear-attention fla/ops/gated_delta_rule/naive.py "
              "naive_recurrent_gated_delta_rule and naive_chunk_gated_delta_rule at commit "
              f"{args.commit or '?'} (float32 inside), q and k L2-normalised (eps 1e-6), "
              "scale Dk ** -0.5; inputs float64, layout [B, L, H, D]")
    Path(args.out).write_text(json.dumps(dict(source=source, cases=cases)) + "\n")


if __name__ == "__main__":
    main()
