"""Who may attend to whom: causal, padding and packed-segment masks for one example.

Every function here works on any block of an example (a slice of its query and key tokens),
so the chunked kernel computes each block's mask from that block's slices and never builds an
`[L, L]` mask. Three rules combine with AND:

  causal   key token index <= query token index (token order, not position values, so packed
           or randomized positions do not change what is visible);
  padding  segment id 0 is padding: never attended to; a padding query attends to nothing
           and the kernels give it output 0;
  segments a token attends only within its own segment id (packed sequences do not leak);

and, with a sliding window W > 0 (model.window, Gemma's and Mistral's local layers),
  window   query token index - key token index < W: a causal query sees its W latest keys,
           itself included (0 = no window).

Chunked attention (C > 0, model.attention_chunk: Llama 4's local layers) is the segments
rule on segment ids cut at every C token indices (`chunk_segments`): a token attends within
its chunk [c C, (c + 1) C) of its own segment, so every kernel that reads segment ids carries
it (transformers' chunked_overlay: kv_idx // C == q_idx // C, on top of the causal mask).

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
    window: static; W > 0 keeps the keys with q_idx - k_idx < W (module docstring), 0 = all
    chunk: static; C > 0 when the segment ids are cut at every C tokens (`chunk_segments`):
        the segments rule already masks, and the chunked kernel skips the key blocks outside
        a query block's chunks (`block_visible`)
    """

    q_seg: jax.Array
    k_seg: jax.Array
    q_pos: jax.Array
    k_pos: jax.Array
    causal: bool
    q_offset: int = 0
    window: int = 0
    chunk: int = 0


jax.tree_util.register_dataclass(
    Mask,
    data_fields=["q_seg", "k_seg", "q_pos", "k_pos"],
    meta_fields=["causal", "q_offset", "window", "chunk"],
)


def make(q_seg, k_seg, q_pos, k_pos, *, causal: bool, window: int = 0, chunk: int = 0
         ) -> Mask:
    """Mask for one example; queries are aligned to the last keys (q_offset = Lk - Lq);
    window: the sliding window W (0 = none); chunk: the segment ids' chunk C (0 = none)."""
    return Mask(q_seg, k_seg, q_pos, k_pos, causal, k_seg.shape[0] - q_seg.shape[0], window,
                chunk)


def chunk_segments(q_seg, k_seg, batch: int, lq: int, lk: int, chunk: int):
    """(q_seg int32[batch, lq], k_seg int32[batch, lk]): the segment ids cut at every `chunk`
    token indices (queries aligned to the last keys), so that the segments rule keeps a key
    only in its query's chunk. Padding (0) stays padding; None (whole rows) becomes one
    segment per chunk. A segment s > 0 in chunk c becomes (s - 1) * n + c + 1 (n chunks in a
    row), distinct for distinct (s, c) while s <= lk, as a row's documents are."""
    n = -(-lk // chunk)
    if (lk + 1) * n >= 2**31:
        raise ValueError(f"attention chunks of {chunk} tokens in a row of {lk} number past "
                         "int32's segment ids: give a larger chunk")

    def cut(seg, idx):
        chunks = idx // chunk
        if seg is None:
            return jnp.broadcast_to(chunks + 1, (batch, idx.shape[0]))
        return jnp.where(seg == 0, 0, (seg - 1) * n + chunks + 1).astype(jnp.int32)

    return cut(q_seg, token_indices(lk - lq, lq)), cut(k_seg, token_indices(0, lk))


def causal_mask(q_idx: jax.Array, k_idx: jax.Array) -> jax.Array:
    """bool[lq, lk]: key token index <= query token index. q_idx: int[lq], k_idx: int[lk]."""
    return k_idx[None, :] <= q_idx[:, None]


def segment_mask(q_seg: jax.Array, k_seg: jax.Array) -> jax.Array:
    """bool[lq, lk]: same segment and the key is not padding (segment 0).

    A padding query (segment 0) matches only padding keys, which are excluded, so its row is
    empty: that is how padding queries get output 0.
    """
    return (q_seg[:, None] == k_seg[None, :]) & (k_seg[None, :] != 0)


def window_mask(q_idx: jax.Array, k_idx: jax.Array, window: int) -> jax.Array:
    """bool[lq, lk]: q_idx - k_idx < window (the key is among the query's `window` latest
    tokens, or after it: causality is the other rule's)."""
    return q_idx[:, None] - k_idx[None, :] < window


def allowed(q_idx, k_idx, q_seg, k_seg, *, causal: bool, window: int = 0) -> jax.Array:
    """bool[lq, lk]: the block's attention pattern from its token indices and segment ids
    (and the sliding window, W > 0)."""
    ok = segment_mask(q_seg, k_seg)
    if causal:
        ok &= causal_mask(q_idx, k_idx)
    return ok & window_mask(q_idx, k_idx, window) if window else ok


def block_visible(q_start, q_len: int, k_start, *, causal: bool, k_len: int = 1,
                  window: int = 0, chunk: int = 0):
    """False when causality, the sliding window W > 0 or the chunks of C > 0 tokens hide a
    whole key block [k_start, k_start + k_len) from the query block [q_start, q_start +
    q_len) (token indices); lets the chunked kernel skip it, so a windowed layer costs
    O(L W), not O(L^2), and a chunked one O(L C).

    The arguments are block counters, not data, so under vmap the answer stays unbatched and
    a `lax.cond` on it really skips work.
    """
    visible = jnp.bool_(True)
    if causal:
        visible &= k_start <= q_start + q_len - 1
    if window:  # the block's last key is within the first query's window
        visible &= k_start + k_len - 1 > q_start - window
    if chunk:  # the key block overlaps the chunks of the query block's first and last query
        visible &= k_start + k_len - 1 >= q_start // chunk * chunk
        visible &= k_start < ((q_start + q_len - 1) // chunk + 1) * chunk
    return visible


def token_indices(start, length: int) -> jax.Array:
    """int32[length]: token indices of a block beginning at token `start`."""
    return start + jnp.arange(length, dtype=jnp.int32)
