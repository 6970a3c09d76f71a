"""Golden outputs of the content-dependent encodings, for tests/test_encoders_content.py.

    git clone https://github.com/facebookresearch/RAM /tmp/RAM   # CoPE's authors' code
    git clone https://github.com/fla-org/flash-linear-attention /tmp/fla   # PaTH's
    python scripts/golden_content.py \
        --cope_source=/tmp/RAM/projects/cope/src/cope/context_position.py \
        --path_source=/tmp/fla/fla/ops/path_attn/naive.py > tests/golden/content.json
    (needs torch, einops and numpy, e.g. in a venv of its own; the tests need none of them)

cope: the authors' `ContextPosSelfAttn.forward` (its defaults: gates from q.k / sqrt(Dh), the
  position term divided by sqrt(Dh) with q.k, `cope_npos` table entries) on a causal mask,
  one example per head (their batch axis is batch x heads, the table shared by the heads).
fox: the Forgetting Transformer's reference is a Triton kernel (GPU only), so its golden is
  the paper's equation (Lin et al. 2025, eq. 5-6) in float64 NumPy:
  out_i = sum_{j<=i} exp(q_i.k_j / sqrt(Dh)) prod_{t=j+1..i} f_t v_j / (the same without v),
  f_t = sigmoid(x_t . w_h + b_h), written as an explicit product of the gates.
path: fla's `naive_path_attn` (the PyTorch reference of its Triton kernel: the chunkwise
  UT-transform form, chunk 4 here so several chunks meet) with the forget gate off (g = 0),
  on given unit w and beta in (0, 2); the test feeds the same w and beta to posjax's kernel.
"""

import argparse
import importlib.util
import json
import math
from types import SimpleNamespace

import numpy as np

BATCH, LENGTH, HEADS, HEAD_DIM, D_MODEL, COPE_NPOS = 1, 7, 2, 4, 6, 5
PATH_LENGTH, PATH_CHUNK = 10, 4


def _inputs(seed):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.normal(size=(BATCH, LENGTH, HEADS, HEAD_DIM)) for _ in range(3))
    return q, k, v, rng.normal(size=(BATCH, LENGTH, D_MODEL)), rng


def fox_case():
    q, k, v, x, rng = _inputs(0)
    weight, bias = rng.normal(size=(D_MODEL, HEADS)), rng.normal(size=HEADS) + 2.0
    forget = 1.0 / (1.0 + np.exp(-(x @ weight + bias)))  # [B, L, H]
    out = np.zeros_like(v)
    for b in range(BATCH):
        for h in range(HEADS):
            for i in range(LENGTH):
                keep = np.array([np.prod(forget[b, j + 1:i + 1, h]) for j in range(i + 1)])
                w = np.exp(q[b, i, h] @ k[b, :i + 1, h].T / math.sqrt(HEAD_DIM)) * keep
                out[b, i, h] = w @ v[b, :i + 1, h] / w.sum()
    return dict(source="the FoX paper's equation (float64 NumPy; the authors' kernel is "
                "Triton, GPU only)", q=q, k=k, v=v, x=x,
                params=dict(gate_weight=weight, gate_bias=bias), out=out)


def cope_case(source: str):
    import torch

    module = _module("context_position", source)
    q, k, v, x, rng = _inputs(1)
    table = rng.normal(size=(HEAD_DIM, COPE_NPOS))
    cfg = SimpleNamespace(drop=0.0, cope_layers=1, pos_emb="cope", cope_npos=COPE_NPOS,
                          head_dim=HEAD_DIM, cope_sep_key=False, cope_val_gates=False,
                          cope_nodiv=False)
    layer = module.ContextPosSelfAttn(cfg, lay_ind=0).double().eval()
    with torch.no_grad():
        layer.pos_emb.copy_(torch.tensor(table)[None])
        heads_first = lambda a: torch.tensor(a).permute(0, 2, 1, 3).reshape(-1, LENGTH, HEAD_DIM)
        mask = torch.tril(torch.ones(LENGTH, LENGTH, dtype=torch.float64))
        mask = mask.expand(BATCH * HEADS, LENGTH, LENGTH)
        out = layer(heads_first(q), heads_first(k), heads_first(k), heads_first(v), mask)
    out = out.reshape(BATCH, HEADS, LENGTH, HEAD_DIM).permute(0, 2, 1, 3).numpy()
    return dict(source="facebookresearch/RAM projects/cope ContextPosSelfAttn (float64)",
                q=q, k=k, v=v, x=x, params=dict(table=table), out=out)


def _module(name: str, source: str):
    spec = importlib.util.spec_from_file_location(name, source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def path_case(source: str):
    import torch

    rng = np.random.default_rng(2)
    q, k, v, w = (rng.normal(size=(BATCH, PATH_LENGTH, HEADS, HEAD_DIM)) for _ in range(4))
    w = w / np.linalg.norm(w, axis=-1, keepdims=True)
    beta = 2.0 / (1.0 + np.exp(-rng.normal(size=(BATCH, PATH_LENGTH, HEADS))))
    tensors = [torch.tensor(a) for a in (q, k, v, w, beta)]
    g = torch.zeros(BATCH, PATH_LENGTH, HEADS, dtype=torch.float64)
    out = _module("naive", source).naive_path_attn(*tensors, g, scale=HEAD_DIM ** -0.5,
                                                   chunk_size=PATH_CHUNK)
    return dict(source="fla-org/flash-linear-attention fla/ops/path_attn/naive.py "
                "naive_path_attn (float32 inside)", q=q, k=k, v=v,
                x=np.zeros((BATCH, PATH_LENGTH, D_MODEL)), params=dict(w=w, beta=beta),
                out=out.numpy())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cope_source", required=True,
                        help="path of RAM's projects/cope/src/cope/context_position.py")
    parser.add_argument("--path_source", required=True,
                        help="path of fla's fla/ops/path_attn/naive.py")
    args = parser.parse_args()
    lists = lambda tree: {key: (lists(value) if isinstance(value, dict) else
                                value.tolist() if isinstance(value, np.ndarray) else value)
                          for key, value in tree.items()}
    print(json.dumps({"fox": lists(fox_case()), "cope": lists(cope_case(args.cope_source)),
                      "path": lists(path_case(args.path_source))}))


if __name__ == "__main__":
    main()
