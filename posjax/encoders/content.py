"""Positions that depend on the content: the content-dependent site (see posjax.encoders.base).

  fox   Forgetting Transformer (Lin et al., ICLR 2025): a forget gate per token and head,
        f_t = sigmoid(w . x_t + b), and logits  + sum_{t in (j, i]} log f_t  =  D_i - D_j
        with D = cumsum(log f). It is a per-position quantity on each side, so the chunked
        kernel reads its blocks of D and stays O(L) in memory.
  cope  Contextual position encoding (Golovneva et al. 2024): gates g_ij = sigmoid(q_i.k_j /
        sqrt(Dh)), position p_ij = sum_{t in [j, i]} g_it (clamped to npos_max - 1), and the
        logits get  (q_i . e[p_ij]) / sqrt(Dh)  with e interpolated linearly between
        floor(p_ij) and ceil(p_ij) of a learned table. The sum over the keys between j and i
        is the carry the chunked kernel passes from key block to key block.
  path  PaTH attention (Yang et al., NeurIPS 2025): a Householder-like transform per token,
        H_t = I - beta_t w_t w_t^T, with w_t (unit) and beta_t in (0, 2) from x_t, and the
        score q_i^T H_i H_{i-1} ... H_{j+1} k_j / sqrt(Dh) in place of q.k: RoPE's fixed
        rotations become accumulated, data-dependent reflections. The kernel carries
        H_{t} ... H_i q_i per query while it walks the keys from the last to the first.

All three are causal: a gate counts or forgets the tokens between a key and the query after it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import jax
import jax.numpy as jnp
from jax import lax

from posjax.encoders import register
from posjax.encoders.base import Dims, Encoding, Params
from posjax.errors import ConfigError


@register("fox")
@dataclasses.dataclass(frozen=True)
class ForgettingGate(Encoding):
    """Forgetting Transformer's forget gate (Lin et al. 2025; zhixuan-lin/forgetting-transformer).

    bias_ij = sum_{t in (j, i]} log sigmoid(w_h . x_t + b_h) per head h, so a query forgets
    the tokens before it at a rate its content sets; used without another position encoding
    (NoPE) as in the paper. The gate projection is initialised as FoX's `nn.Linear(D, H)`:
    weight and bias U(-1/sqrt(D), 1/sqrt(D)).
    """

    name: ClassVar[str] = "fox"
    causal_only: ClassVar[bool] = True

    def init(self, rng: jax.Array, dims: Dims) -> Params:
        self.check(dims)
        bound = 1.0 / math.sqrt(dims.d_model)
        k_weight, k_bias = jax.random.split(rng)
        uniform = lambda key, shape: jax.random.uniform(key, shape, jnp.float32, -bound, bound)
        return {"gate_weight": uniform(k_weight, (dims.d_model, dims.num_heads)),
                "gate_bias": uniform(k_bias, (dims.num_heads,))}

    def log_forget(self, params: Params, x: jax.Array) -> jax.Array:
        """x: [B, L, D] -> float32[B, L, H]: log f_t, the log forget gate of each token."""
        logits = jnp.einsum("bld,dh->blh", x.astype(jnp.float32), params["gate_weight"])
        return jax.nn.log_sigmoid(logits + params["gate_bias"])

    def content_prepare(self, params: Params, x, q, k, segment_ids):
        """(D, D): D = cumsum_t log f_t, float32[B, L, H], the same on both sides. Packed
        segments need no reset: a pair in one segment sums only that segment's gates."""
        del q, k, segment_ids
        cumulative = jnp.cumsum(self.log_forget(params, x), axis=1)
        return cumulative, cumulative

    def content_score(self, params: Params, logits, ok, q_side, k_side, carry):
        """float32[lq, lk]: D_i - D_j (the mask removes j > i); the carry is unused."""
        del params, logits, ok
        return q_side[:, None] - k_side[None, :], carry

    def bias_rows_columns(self, params: Params, x):
        """(u, w) = (D_i, -D_j), float32[B, H, L] each from x [B, L, D]: content_score's
        D_i - D_j as a row and a column term (the flash_bias kernel's form)."""
        cumulative = jnp.cumsum(self.log_forget(params, x), axis=1).transpose(0, 2, 1)
        return cumulative, -cumulative


@register("cope")
@dataclasses.dataclass(frozen=True)
class ContextualPosition(Encoding):
    """CoPE, contextual position encoding (Golovneva et al. 2024; facebookresearch/RAM).

    As the authors' projects/cope code by default: the position term is divided by sqrt(Dh)
    with q.k, and the gates use q.k / sqrt(Dh). npos_max: the size of the position table
    e[0 .. npos_max - 1], positions clamped to the last entry; 0 means the training length
    + 1 (the authors' block size + 1). The table is one per layer, shared by the heads,
    initialised to zeros as in the authors' code.
    """

    name: ClassVar[str] = "cope"
    causal_only: ClassVar[bool] = True

    npos_max: int = 0

    def __post_init__(self):
        if self.npos_max < 0:
            raise ConfigError(f"cope npos_max={self.npos_max} is the position table's size: "
                              "give one >= 1 (0: the training length + 1)")

    def table_size(self, dims: Dims) -> int:
        return self.npos_max or dims.max_len + 1

    def init(self, rng: jax.Array, dims: Dims) -> Params:
        del rng
        self.check(dims)
        return {"table": jnp.zeros((dims.head_dim, self.table_size(dims)), jnp.float32)}

    def content_prepare(self, params: Params, x, q, k, segment_ids):
        """(q . e[n] for every table entry n: float32[B, L, H, npos_max], None)."""
        del x, k, segment_ids
        return jnp.einsum("blhd,dn->blhn", q.astype(jnp.float32), params["table"]), None

    def positions(self, logits, ok, carry, npos_max: int):
        """float32[lq, lk]: p_ij = sum of the allowed gates sigmoid(logits) over the keys of
        this block from j on, plus `carry` (the later blocks' sum), clamped to npos_max - 1;
        and the carry for the block before."""
        gates = jnp.where(ok, jax.nn.sigmoid(logits), 0.0)
        suffix = jnp.flip(jnp.cumsum(jnp.flip(gates, -1), -1), -1) + carry[:, None]
        return jnp.minimum(suffix, npos_max - 1), carry + gates.sum(-1)

    def content_score(self, params: Params, logits, ok, q_side, k_side, carry):
        """float32[lq, lk]: (1 - w) q.e[floor p] + w q.e[ceil p], w = p - floor p, over
        sqrt(Dh); the gradient reaches p through w only, as in the authors' code."""
        del k_side
        npos_max, head_dim = params["table"].shape[1], params["table"].shape[0]
        position, carry = self.positions(logits, ok, carry, npos_max)
        floor = lax.stop_gradient(jnp.floor(position))
        at = lambda index: jnp.take_along_axis(q_side, index.astype(jnp.int32), axis=-1)
        weight = position - floor
        term = at(jnp.ceil(position)) * weight + at(floor) * (1.0 - weight)
        return term / math.sqrt(head_dim), carry


def _linear(key: jax.Array, fan_in: int, shape: tuple[int, ...]) -> jax.Array:
    """PyTorch's default init of nn.Linear / nn.Conv1d: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1.0 / math.sqrt(fan_in)
    return jax.random.uniform(key, shape, jnp.float32, -bound, bound)


def causal_short_conv(x: jax.Array, kernel: jax.Array, segment_ids: jax.Array) -> jax.Array:
    """Depthwise causal convolution within each segment: x float32[B, L, C], kernel [K, C]
    -> float32[B, L, C], out_t = sum_m kernel[m] x_{t-K+1+m} over taps in x_t's segment
    (PyTorch's Conv1d with K - 1 zeros of left padding, as fla's ShortConvolution)."""
    taps = kernel.shape[0]
    out = jnp.zeros_like(x)
    for shift in range(taps):
        earlier = jnp.pad(x, [(0, 0), (shift, 0), (0, 0)])[:, :x.shape[1]]
        same = jnp.pad(segment_ids, [(0, 0), (shift, 0)])[:, :x.shape[1]] == segment_ids
        out = out + jnp.where(same[..., None], earlier, 0.0) * kernel[taps - 1 - shift]
    return out


def householder_scores(queries, k, w, beta, ok):
    """PaTH's scores of one head's block: queries float32[lq, Dh] (each H_{t} ... H_i q_i for
    the tokens t after this key block), k, w float32[lk, Dh], beta float32[lk], ok
    bool[lq, lk] -> (float32[lq, lk] with entry (i, t) = that query . k_t after the
    reflections of the keys after t, the queries carried past this block).

    Walks t from the last key to the first: score with k_t, then reflect by H_t the queries
    that may attend to t (ok), so a query only meets the reflections between it and a key.
    """

    def step(carried, key):
        k_t, w_t, beta_t, ok_t = key
        score = carried @ k_t
        reflected = carried - beta_t * (carried @ w_t)[:, None] * w_t[None, :]
        return jnp.where(ok_t[:, None], reflected, carried), score

    carried, columns = lax.scan(step, queries, (k, w, beta, ok.T), reverse=True)
    return columns.T, carried


@register("path")
@dataclasses.dataclass(frozen=True)
class PathTransform(Encoding):
    """PaTH attention (Yang et al. 2025; fla-org/flash-linear-attention fla/layers/path_attn.py).

    Its defaults follow fla's layer: w from a low-rank projection (D -> w_rank -> H * Dh),
    a causal short convolution of w_conv taps with SiLU, then L2-normalised per head;
    beta_t = 2 sigmoid(x_t . u_h + c_h), so H_t may have a negative eigenvalue. w_rank=0
    projects at full rank, w_conv=0 skips the convolution. Used without another encoding.
    """

    name: ClassVar[str] = "path"
    causal_only: ClassVar[bool] = True
    replaces_content: ClassVar[bool] = True

    w_rank: int = 32
    w_conv: int = 3

    def init(self, rng: jax.Array, dims: Dims) -> Params:
        self.check(dims)
        k_beta, k_bias, k_down, k_up, k_conv = jax.random.split(rng, 5)
        width, d = dims.num_heads * dims.head_dim, dims.d_model
        params = {"beta_weight": _linear(k_beta, d, (d, dims.num_heads)),
                  "beta_bias": _linear(k_bias, d, (dims.num_heads,))}
        if self.w_rank:
            params["w_down"] = _linear(k_down, d, (d, self.w_rank))
            params["w_up"] = _linear(k_up, self.w_rank, (self.w_rank, width))
        else:
            params["w_weight"] = _linear(k_down, d, (d, width))
        if self.w_conv:
            params["w_conv"] = _linear(k_conv, self.w_conv, (self.w_conv, width))
        return params

    def check(self, dims: Dims) -> None:
        super().check(dims)
        if self.w_rank < 0 or self.w_conv < 0:
            raise ConfigError(f"path w_rank={self.w_rank}, w_conv={self.w_conv}: use 0 (off) "
                              "or a positive size")

    def householders(self, params: Params, x, segment_ids):
        """x: [B, L, D] -> (w float32[B, L, H, Dh] unit vectors, beta float32[B, L, H])."""
        x = x.astype(jnp.float32)
        heads = params["beta_bias"].shape[0]
        if "w_weight" in params:
            w = x @ params["w_weight"]
        else:
            w = x @ params["w_down"] @ params["w_up"]
        if "w_conv" in params:
            w = jax.nn.silu(causal_short_conv(w, params["w_conv"], segment_ids))
        w = w.reshape(*w.shape[:2], heads, -1)
        # fla's l2_norm: x / sqrt(sum x^2 + 1e-6)
        w = w * lax.rsqrt(jnp.sum(w * w, -1, keepdims=True) + 1e-6)
        beta = 2.0 * jax.nn.sigmoid(x @ params["beta_weight"] + params["beta_bias"])
        return w, beta

    def content_prepare(self, params: Params, x, q, k, segment_ids):
        """({"q": q}, {"k": k, "w": w, "beta": beta}) in float32, leaves [B, L, H, ...]."""
        w, beta = self.householders(params, x, segment_ids)
        return {"q": q.astype(jnp.float32)}, {"k": k.astype(jnp.float32), "w": w,
                                              "beta": beta}

    def content_carry(self, q_side):
        """Before the last key block each query is itself: float32[lq, Dh]."""
        return q_side["q"]

    def content_score(self, params: Params, logits, ok, q_side, k_side, carry):
        """float32[lq, lk]: the transported q.k over sqrt(Dh), replacing the logits."""
        del params, logits, q_side
        scores, carry = householder_scores(carry, k_side["k"], k_side["w"], k_side["beta"], ok)
        return scores / math.sqrt(carry.shape[-1]), carry
