"""Stick-breaking attention (Tan, Shen, Yang, Courville, Panda, ICLR 2025, "Scaling
Stick-Breaking Attention: An Efficient Implementation and In-depth Study";
shawntan/stickbreaking-attention): no softmax and no position encoding.

With z_ij = q_i.k_j / sqrt(Dh) and beta_ij = sigmoid(z_ij), query i takes from key j < i the
share of its "stick" that the keys between them left over,

    A_ij = beta_ij prod_{j<k<i} (1 - beta_ik),   o_i = sum_j A_ij v_j,

so the nearest key with a high beta wins: a recency bias learnt from the content, with no
positions. In log space, as the authors compute it,

    log A_ij = log sigmoid(z_ij) + sum_{j<k<i} log sigmoid(-z_ik).

The sum over the keys after j is a per-query carry that the kernels pass from key block to
key block (visited last to first), so the chunked kernel stays O(L) in memory; the weights
are used as they are, without a softmax (posjax.attention.softmax, Content.normalize).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp

from posjax.encoders import register
from posjax.encoders.base import Encoding, Params

# The log-weight of a pair that takes nothing (exp underflows to exactly 0).
_NOTHING = -1e30


@register("stickbreaking")
@dataclasses.dataclass(frozen=True)
class StickBreaking(Encoding):
    """Each key takes sigmoid(q.k / sqrt(Dh)) of what later keys left; no softmax, no PE.

    Causal only; the weights are those of the module docstring.

    attend_current: the query's own token is a key too (k <= i in the product, j <= i);
    False, the authors' default, as the paper's j < i. remainder: the share no key took,
    1 - sum_j A_ij, goes to the query's own value v_i, as the authors' reference and their
    tests add it; False leaves it out, as the paper's equation o_i = sum_j A_ij v_j does.
    """

    name: ClassVar[str] = "stickbreaking"
    causal_only: ClassVar[bool] = True
    replaces_content: ClassVar[bool] = True
    normalizes: ClassVar[bool] = False

    attend_current: bool = False
    remainder: bool = True

    @property
    def remainder_to_self(self) -> bool:
        return self.remainder

    def content_prepare(self, params: Params, x, q, k, segment_ids):
        """(token index int32[B, L, H], the same): which key is the query itself."""
        del params, x, k, segment_ids
        index = jnp.arange(q.shape[1], dtype=jnp.int32)[None, :, None]
        index = jnp.broadcast_to(index, q.shape[:3])
        return index, index

    def content_score(self, params: Params, logits, ok, q_side, k_side, carry):
        """float32[lq, lk]: log A of this block (replacing the logits z), and the carry
        sum_k log sigmoid(-z_ik) over this block's and the later blocks' allowed keys."""
        del params
        allowed = ok if self.attend_current else ok & (k_side[None, :] < q_side[:, None])
        log_beta = jnp.where(allowed, jax.nn.log_sigmoid(-logits), 0.0)
        from_here = jnp.cumsum(log_beta[:, ::-1], axis=-1)[:, ::-1]  # keys k >= j
        after = jnp.pad(from_here[:, 1:], ((0, 0), (0, 1))) + carry[:, None]  # keys k > j
        log_a = jnp.where(allowed, jax.nn.log_sigmoid(logits) + after, _NOTHING)
        return log_a, carry + from_here[:, 0]
