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

Both are causal: a gate counts or forgets the tokens between a key and the query after it.
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

    def content_prepare(self, params: Params, x, q, k):
        """(D, D): D = cumsum_t log f_t, float32[B, L, H], the same on both sides. Packed
        segments need no reset: a pair in one segment sums only that segment's gates."""
        del q, k
        cumulative = jnp.cumsum(self.log_forget(params, x), axis=1)
        return cumulative, cumulative

    def content_score(self, params: Params, logits, ok, q_side, k_side, carry):
        """float32[lq, lk]: D_i - D_j (the mask removes j > i); the carry is unused."""
        del params, logits, ok
        return q_side[:, None] - k_side[None, :], carry


@register("cope")
@dataclasses.dataclass(frozen=True)
class ContextualPosition(Encoding):
    """CoPE, contextual position encoding (Golovneva et al. 2024; facebookresearch/RAM
    projects/cope, its default: the position term is divided by sqrt(Dh) with q.k).

    npos_max: the size of the position table e[0 .. npos_max - 1], positions clamped to the
    last entry; 0 means the training length + 1 (the authors' block size + 1). The table is
    one per layer, shared by the heads, initialised to zeros as in the authors' code.
    """

    name: ClassVar[str] = "cope"
    causal_only: ClassVar[bool] = True

    npos_max: int = 0

    def table_size(self, dims: Dims) -> int:
        return self.npos_max or dims.max_len + 1

    def init(self, rng: jax.Array, dims: Dims) -> Params:
        del rng
        self.check(dims)
        return {"table": jnp.zeros((dims.head_dim, self.table_size(dims)), jnp.float32)}

    def content_prepare(self, params: Params, x, q, k):
        """(q . e[n] for every table entry n: float32[B, L, H, npos_max], None)."""
        del x, k
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
