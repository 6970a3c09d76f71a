"""Softmax attention for one example and one head: dense and chunked (online softmax).

Both implementations share one signature,

    attend(q, k, v, *, mask, bias=None, rel=None, content=None, scale=None,
           block_size=256, sink=None, softcap=0.0) -> [Lq, Dv]
      q: [Lq, Dh], k: [Lk, Dh], v: [Lk, Dv]; mask: masks.Mask
      bias: Bias or None   (q_pos block, k_pos block) -> float32[lq, lk]   logits site
      rel:  Rel or None    content-position site (score terms and value terms)
      content: Content or None   content-dependent site (FoX, CoPE, PaTH), see Content
      mask.q_pos / k_pos may be pytrees whose leaves lead with Lq / Lk: the sites' query-
      and key-side work prepared once for the whole sequence rides along with the
      positions, and each block's sites receive their block of it
      scale: factor on q.k (default 1/sqrt(Dh)); block_size: the chunked kernel's block
      sink: None, or this head's learned sink logit (a float32 scalar, GPT-OSS), see below
      softcap: c > 0 caps the logits at +-c (Gemma 2's attn_logit_softcapping), 0 = none

and compute, in float32,

    s_ij = scale * q_i.k_j + rel.score_ij + bias_ij        (rel.score alone if replaces_content)
    s_ij += content(s, allowed)_ij                          (reads the logits so far)
    s_ij = c tanh(s_ij / c)                                 (with softcap c > 0 only)
    p_ij = softmax_j(s_ij over allowed j)                   (masks.allowed; empty row -> 0)
    out_i = sum_j p_ij v_j + rel.value(p)_i                 (cast back to v.dtype)

With a sink logit s (GPT-OSS; Hugging Face transformers' `gpt_oss` attention) the softmax's
denominator gains exp(s) and nothing else: p_ij = exp(s_ij) / (exp(s) + sum_j exp(s_ij)), no
value attached, so a row's weights sum to less than 1 (a very negative s is plain attention).
The chunked kernel starts its running max at s and its running sum at exp(s - s) = 1.

except where the content site's s_ij are log-weights (Content.normalize False, stick-
breaking): then p_ij = exp(s_ij) as it is, and its remainder 1 - sum_j p_ij may go to v_i.

`multi_head_attention` (posjax.attention) lifts them over heads and batch with jax.vmap.

(A sink joins only normalised weights: posjax.attention refuses it with log-weights.)

The chunked kernel (the flash-attention recurrence: Rabe & Staats 2021, "Self-attention does
not need O(n^2) memory"; Dao et al. 2022) walks query blocks with `lax.map` and key blocks with
`lax.scan`, keeping a running max m, sum l and unnormalised output per query:

    m' = max(m, max_j s_ij),  e_ij = exp(s_ij - m'),  c = exp(m - m'),
    l' = c l + sum_j e_ij,    o' = c o + e v + rel.value(e),    and out = o / l at the end.

This needs `rel.value` to be linear in the weights (true for Shaw's R^V: sum_j p_ij R^V_ij).
Each block's mask, bias and relative terms are computed from the positions inside the block,
so no [L, L] score, bias or mask matrix exists; both block bodies are rematerialised
(`jax.checkpoint`) so reverse mode also stays O(L) memory. Key blocks that causality or the
sliding window (mask.window) or the chunks (mask.chunk) hide wholly are skipped with a
`lax.cond` on block counters, so a windowed layer computes O(L W) scores, a chunked one
O(L C).

A content-dependent term may depend on every key between j and i (CoPE counts gates over
them, PaTH multiplies their Householder reflections). It carries a state per query from
block to block, and the key blocks are then visited from the last to the first, so the carry
holds what the keys after the current block contributed (online softmax does not depend on
the order); dense attention is one block from the site's starting carry. Encodings without
this site keep the forward order, bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from posjax.attention import masks

# (q_pos block, k_pos block) -> float32[lq, lk]: this head's additive logits; a block is
# of mask.q_pos / k_pos: an array [lq], or a pytree whose leaves lead with lq (dispatch passes
# {"pos": [lq], ...} with the prepared query-side work beside the positions).
Bias = Callable[[jax.Array, jax.Array], jax.Array]


class Rel(NamedTuple):
    """One head's content-position terms, called on blocks.

    score: (q [lq, Dh], k [lk, Dh], q_pos, k_pos) -> float32[lq, lk], or None
    value: (probs float32[lq, lk], q_pos, k_pos) -> [lq, Dv], linear in probs, or None
    (q_pos, k_pos: blocks of mask.q_pos / k_pos, [lq] and [lk], or pytrees leading with them
    as for Bias)
    replaces_content: the score replaces scale * q.k instead of adding to it (ReRoPE)
    """

    score: Callable | None = None
    value: Callable | None = None
    replaces_content: bool = False


class Content(NamedTuple):
    """One head's content-dependent term, called on blocks (visited last to first):

    score: (logits float32[lq, lk], ok bool[lq, lk], q_info, k_info, carry)
           -> (float32[lq, lk] added to the logits, the carry for the block before)
      logits: the block's scores so far; ok: which pairs attention allows; q_info / k_info:
      the block's positions and prepared sides (see posjax.attention)
    init: (q_info) -> the carry before the last key block, for this block of queries
    replaces_content: the term replaces the logits instead of adding to them (PaTH)
    normalize: False when the logits are already log-weights (<= 0) that need no softmax:
      the weights are exp(s) as they are, not divided by their sum (stick-breaking)
    remainder_to_self: with normalize False, the weight left over, 1 - sum_j w_ij, goes to
      the query's own value v_i (the stick-breaking authors' code)
    """

    score: Callable
    init: Callable
    replaces_content: bool = False
    normalize: bool = True
    remainder_to_self: bool = False


def _normalizes(content: Content | None) -> bool:
    return content is None or content.normalize


def _unnormalized(acc, total, v_self, q_seg, content: Content):
    """float32[lq, Dv]: acc = sum_j w_ij v_j, plus (1 - total) v_i when the remainder goes
    to the query's own value v_self [lq, Dv]; padding queries (q_seg 0) get 0."""
    if content.remainder_to_self:
        acc = acc + (1.0 - total)[:, None] * v_self.astype(jnp.float32)
    return acc * (q_seg != 0)[:, None]


def _with_content(s, ok, q_pos, k_pos, content: Content | None, carry):
    """(s + content's term, its carry); s unchanged without the site."""
    if content is None:
        return s, carry
    term, carry = content.score(s, ok, q_pos, k_pos, carry)
    return (term if content.replaces_content else s + term), carry


def _scores(q, k, q_pos, k_pos, bias: Bias | None, rel: Rel | None, scale: float) -> jax.Array:
    """float32[lq, lk]: scale * q.k + rel.score + bias for one block."""
    if rel is not None and rel.replaces_content:
        s = rel.score(q, k, q_pos, k_pos).astype(jnp.float32)
    else:
        s = scale * jnp.dot(q, k.T, preferred_element_type=jnp.float32)
        if rel is not None and rel.score is not None:
            s = s + rel.score(q, k, q_pos, k_pos)
    if bias is not None:
        s = s + bias(q_pos, k_pos)
    return s


def capped(s, softcap: float):
    """softcap * tanh(s / softcap): the logits squashed into (-softcap, softcap), as Gemma 2
    caps its attention logits (transformers' `attn_logit_softcapping`); s itself for 0."""
    return softcap * jnp.tanh(s / softcap) if softcap else s


def _weights_times_v(p, v, q_pos, k_pos, rel: Rel | None) -> jax.Array:
    """float32[lq, Dv]: p @ v + rel.value(p), for (normalised or not) weights p."""
    out = jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
    if rel is not None and rel.value is not None:
        out = out + rel.value(p, q_pos, k_pos)
    return out


def _has_keys(m):
    """1.0 where the running max is a real score, 0.0 for a fully-masked row (output 0)."""
    return (m > 0.5 * masks.NEG).astype(jnp.float32)


def _scale(q, scale: float | None) -> float:
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale


def _sink_value(sink):
    """The sink logit as float32, -inf and below clipped to masks.NEG (finite, so that
    exp(s - max) never meets inf - inf)."""
    return jnp.maximum(jnp.asarray(sink, jnp.float32), masks.NEG)


def _weights(s, ok, sink=None):
    """Softmax weights over the last axis of the logits `s` (masked entries already NEG), a
    row with no allowed key (`ok`) zeroed; a sink logit (broadcastable to s[..., :1]) joins
    the denominator only. The result does not depend on the subtracted max, so its gradient
    is skipped."""
    m = s.max(-1, keepdims=True)
    if sink is not None:
        sink = _sink_value(sink)
        m = jnp.maximum(m, sink)
    m = lax.stop_gradient(m)
    e = jnp.exp(s - m)
    total = e.sum(-1, keepdims=True)
    if sink is not None:
        total = total + jnp.exp(sink - m)
    # Masked entries underflow to 0 unless the whole row is masked; such rows are zeroed by
    # a per-row factor (masking the [lq, lk] weights again doubles the CPU backward pass, and
    # so does deriving the factor from the row max).
    return e * (ok.any(-1, keepdims=True) / total)


def _sink_start(sink, shape):
    """(running max, running sum) of an online softmax before its first key block, with a
    sink logit s broadcastable to `shape`: the max at s, the sum at exp(s - s) = 1, whose
    gradient reaches s."""
    s = _sink_value(sink)
    m = lax.stop_gradient(s)
    return jnp.broadcast_to(m, shape), jnp.broadcast_to(jnp.exp(s - m), shape)


def dense(q, k, v, *, mask: masks.Mask, bias=None, rel=None, content=None, scale=None,
          block_size=256, sink=None, softcap=0.0):
    """Attention with the whole [Lq, Lk] score matrix in memory (see module docstring).

    q: [Lq, Dh], k: [Lk, Dh], v: [Lk, Dv] -> [Lq, Dv]. block_size is accepted so every
    implementation has one signature; dense has no blocks.
    """
    del block_size
    lq, lk = q.shape[0], k.shape[0]
    ok = masks.allowed(
        masks.token_indices(mask.q_offset, lq),
        masks.token_indices(0, lk),
        mask.q_seg,
        mask.k_seg,
        causal=mask.causal,
        window=mask.window,
    )
    s = _scores(q, k, mask.q_pos, mask.k_pos, bias, rel, _scale(q, scale))
    carry = None if content is None else content.init(mask.q_pos)
    s, _ = _with_content(s, ok, mask.q_pos, mask.k_pos, content, carry)
    s = jnp.where(ok, capped(s, softcap), masks.NEG)
    if not _normalizes(content):  # log-weights: exp(NEG) = 0 masks, nothing to divide
        p = jnp.exp(s)
        out = _weights_times_v(p, v, mask.q_pos, mask.k_pos, rel)
        v_self = lax.dynamic_slice_in_dim(v, mask.q_offset, lq)
        return _unnormalized(out, p.sum(-1), v_self, mask.q_seg, content).astype(v.dtype)
    p = _weights(s, ok, sink)
    return _weights_times_v(p, v, mask.q_pos, mask.k_pos, rel).astype(v.dtype)


def _blocks(tree, size: int, count: int):
    """Each leaf [n, ...] -> [count, size, ...], zero-padded at the end (padding gets
    segment 0)."""

    def split(x):
        pad = count * size - x.shape[0]
        x = jnp.pad(x, [(0, pad)] + [(0, 0)] * (x.ndim - 1))
        return x.reshape(count, size, *x.shape[1:])

    return jax.tree.map(split, tree)


def _initial_carry(bq: int, dv: int, content: Content | None, q_pos, sink=None):
    """(running max, sum, output, content carry) before the first key block: the max at
    NEG, or at 0 for weights that need no softmax (exp(s - 0) is the weight itself); with a
    sink logit s, the max at s and the sum at exp(s - s) = 1 (whose gradient reaches s)."""
    if sink is not None:
        return (
            *_sink_start(sink, (bq,)),
            jnp.zeros((bq, dv), jnp.float32),
            None if content is None else content.init(q_pos),
        )
    return (
        jnp.full((bq,), masks.NEG if _normalizes(content) else 0.0, jnp.float32),
        jnp.zeros((bq,), jnp.float32),
        jnp.zeros((bq, dv), jnp.float32),
        None if content is None else content.init(q_pos),
    )


def chunked(q, k, v, *, mask: masks.Mask, bias=None, rel=None, content=None, scale=None,
            block_size=256, sink=None, softcap=0.0):
    """Online-softmax attention over blocks of queries and keys, O(L) memory both ways.

    q: [Lq, Dh], k: [Lk, Dh], v: [Lk, Dv] -> [Lq, Dv]. Lengths that are not a multiple of the
    block are padded with segment-0 tokens (masked keys, zero-output queries) and sliced off.
    """
    lq, lk, dv = q.shape[0], k.shape[0], v.shape[-1]
    bq, bk = min(block_size, lq), min(block_size, lk)
    nq, nk = -(-lq // bq), -(-lk // bk)
    scale, normalize = _scale(q, scale), _normalizes(content)
    k_blocks = (
        jnp.arange(nk, dtype=jnp.int32) * bk,
        _blocks(k, bk, nk),
        _blocks(v, bk, nk),
        _blocks(mask.k_seg, bk, nk),
        _blocks(mask.k_pos, bk, nk),
    )

    def q_block(xs):
        q_start, qb, q_seg, q_pos = xs
        q_idx = masks.token_indices(q_start + mask.q_offset, bq)

        def update(carry, kxs):
            m, total, acc, content_carry = carry
            k_start, kb, vb, k_seg, k_pos = kxs
            ok = masks.allowed(q_idx, masks.token_indices(k_start, bk), q_seg, k_seg,
                               causal=mask.causal, window=mask.window)
            s, content_carry = _with_content(_scores(qb, kb, q_pos, k_pos, bias, rel, scale),
                                             ok, q_pos, k_pos, content, content_carry)
            s = jnp.where(ok, capped(s, softcap), masks.NEG)
            # o / l does not depend on the running max, so its gradient is skipped; weights
            # that need no softmax keep m = 0.
            m_new = lax.stop_gradient(jnp.maximum(m, s.max(-1))) if normalize else m
            # Masked entries underflow to 0 once the row has seen a real score; before that
            # they add junk that c = exp(NEG - real max) = 0 wipes, or _has_keys zeroes.
            e = jnp.exp(s - m_new[:, None])
            c = jnp.exp(m - m_new)
            acc = c[:, None] * acc + _weights_times_v(e, vb, q_pos, k_pos, rel)
            return m_new, c * total + e.sum(-1), acc, content_carry

        @jax.checkpoint
        def step(carry, kxs):
            visible = masks.block_visible(q_idx[0], bq, kxs[0], causal=mask.causal, k_len=bk,
                                          window=mask.window, chunk=mask.chunk)
            return lax.cond(visible, update, lambda c, _: c, carry, kxs), None

        init = _initial_carry(bq, dv, content, q_pos, sink)
        (m, total, acc, _), _ = lax.scan(step, init, k_blocks, reverse=content is not None)
        if normalize:
            # A row with no key has acc 0 (and total 0 if its block saw no key block).
            return acc * (_has_keys(m) / jnp.where(total > 0, total, 1.0))[:, None]
        v_self = jnp.take(v, jnp.minimum(q_idx, lk - 1), axis=0)
        return _unnormalized(acc, total, v_self, q_seg, content)

    out = lax.map(
        jax.checkpoint(q_block),
        (
            jnp.arange(nq, dtype=jnp.int32) * bq,
            _blocks(q, bq, nq),
            _blocks(mask.q_seg, bq, nq),
            _blocks(mask.q_pos, bq, nq),
        ),
    )
    return out.reshape(nq * bq, dv)[:lq].astype(v.dtype)


# The attend implementations, by the name users pass as `attention=`.
IMPLS: dict[str, Callable[..., jax.Array]] = {"dense": dense, "chunked": chunked}
