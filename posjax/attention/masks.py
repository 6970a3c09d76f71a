"""Who may attend to whom: causal, padding and packed-segment masks for one example.

Every function here works on any block of an example (a slice of its query and key tokens),
so the chunked kernel computes each block's mask from that block's slices and never builds an
`[L, L]` mask. Three rules combine with AND:

  causal   key token index <= query token index (token order, not position values, so packed
           or randomized positions do not change what is visible);
  padding  segment id 0 is padding: never attended to; a padding query attends to nothing
           and the kernels give it output 0;
  segments a token attends only within its own segment id (packed sequences do not leak).

Token indices: with Lq queries and Lk keys the queries are the *last* Lq tokens
(`q_idx = Lk - Lq + arange(Lq)`), the usual alignment when queries extend a key cache;
for self-attention (Lq = Lk) both are `arange(L)`.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

# Masked logits: a large *finite* negative number, so `max` and `exp(s - max)` never meet
# `inf - inf`; fully-masked rows are zeroed explicitly by the kernels.
NEG = -1e30


@dataclasses.dataclass(frozen=True)
class Mask:
    """The tokens of one example as the attention kernels see them.

    q_seg: int32[Lq], k_seg: int32[Lk]   segment ids, 0 = padding
    q_pos: int32[Lq] or [Lq, ndim], k_pos: int32[Lk] or [Lk, ndim]
        position values, handed to the encoding's bias / relative sites (never used to
        mask); or a pytree of them with the sites' prepared work (leaves leading with Lq, Lk)
    causal: static; mask keys after the query in token order
    q_offset: static; token index of the first query (Lk - Lq, see module docstring)
    """

    q_seg: jax.Array
    k_seg: jax.Array
    q_pos: jax.Array
    k_pos: jax.Array
    causal: bool
    q_offset: int = 0


jax.tree_util.register_dataclass(
    Mask,
    data_fields=["q_seg", "k_seg", "q_pos", "k_pos"],
    meta_fields=["causal", "q_offset"],
)


def make(q_seg, k_seg, q_pos, k_pos, *, causal: bool) -> Mask:
    """Mask for one example; queries are aligned to the last keys (q_offset = Lk - Lq)."""
    return Mask(q_seg, k_seg, q_pos, k_pos, causal, k_seg.shape[0] - q_seg.shape[0])


def causal_mask(q_idx: jax.Array, k_idx: jax.Array) -> jax.Array:
    """bool[lq, lk]: key token index <= query token index. q_idx: int[lq], k_idx: int[lk]."""
    return k_idx[None, :] <= q_idx[:, None]


def segment_mask(q_seg: jax.Array, k_seg: jax.Array) -> jax.Array:
    """bool[lq, lk]: same segment and the key is not padding (segment 0).

    A padding query (segment 0) matches only padding keys, which are excluded, so its row is
    empty: that is how padding queries get output 0.
    """
    return (q_seg[:, None] == k_seg[None, :]) & (k_seg[None, :] != 0)


def allowed(q_idx, k_idx, q_seg, k_seg, *, causal: bool) -> jax.Array:
    """bool[lq, lk]: the block's attention pattern from its token indices and segment ids."""
    ok = segment_mask(q_seg, k_seg)
    return ok & causal_mask(q_idx, k_idx) if causal else ok


def block_visible(q_start, q_len: int, k_start, *, causal: bool):
    """False when causality hides a whole key block starting at k_start from the query block
    [q_start, q_start + q_len) (token indices); lets the chunked kernel skip it.

    The arguments are block counters, not data, so under vmap the answer stays unbatched and
    a `lax.cond` on it really skips work.
    """
    if not causal:
        return jnp.bool_(True)
    return k_start <= q_start + q_len - 1


def token_indices(start, length: int) -> jax.Array:
    """int32[length]: token indices of a block beginning at token `start`."""
    return start + jnp.arange(length, dtype=jnp.int32)
