"""Softmax attention whose logits mix across heads (DAPE), for one example and all its heads:
dense and chunked (online softmax, O(L) memory).

    attend(q, k, v, *, mask, bias, mix, scale, block_size=256, sink=None, softcap=0.0)
      -> [Lq, H, Dv]
      q: [Lq, H, Dh], k: [Lk, H, Dh], v: [Lk, H, Dv]; mask: masks.Mask (as softmax.py's)
      bias: (q_pos block, k_pos block) -> float32[H, lq, lk]     the static bias B
      mix:  (a float32[H, lq, lk], b float32[H, lq, lk]) -> float32[H, lq, lk]

    s_hij = a_hij + b_hij + mix(a, b)_hij,   a = scale * q.k,   then softmax_j per head,
    with sink float32[H] (or None) each head's learned sink logit in its denominator only,
    and softcap c > 0 capping s at +-c (softmax.py's module docstring).

softmax.py's kernels see one head at a time (lifted over heads with vmap), which is what
every other site needs; a term that reads every head's logit of a pair needs the heads
together, so these kernels take them whole. The chunked kernel is softmax.chunked's
recurrence with a head axis on its running max, sum and output; both block bodies are
rematerialised, and key blocks hidden by causality or the sliding window are skipped.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from posjax.attention import masks
from posjax.attention.softmax import _blocks, _has_keys, _sink_start, _weights, capped


def _logits(q, k, q_pos, k_pos, bias: Callable, mix: Callable, scale: float, softcap: float):
    """float32[H, lq, lk]: a + b + mix(a, b) for one block, capped at +-softcap (0: not)."""
    a = scale * jnp.einsum("qhd,khd->hqk", q, k, preferred_element_type=jnp.float32)
    b = bias(q_pos, k_pos)
    return capped(a + b + mix(a, b), softcap)


def _times_v(p, v):
    """float32[lq, H, Dv]: per head p [H, lq, lk] times v [lk, H, Dv]."""
    return jnp.einsum("hqk,khd->qhd", p.astype(v.dtype), v, preferred_element_type=jnp.float32)


def dense(q, k, v, *, mask: masks.Mask, bias, mix, scale: float, block_size=256, sink=None,
          softcap=0.0):
    """All heads with their [H, Lq, Lk] logits in memory -> [Lq, H, Dv] (module docstring)."""
    del block_size
    lq, lk = q.shape[0], k.shape[0]
    ok = masks.allowed(masks.token_indices(mask.q_offset, lq), masks.token_indices(0, lk),
                       mask.q_seg, mask.k_seg, causal=mask.causal, window=mask.window)
    s = jnp.where(ok, _logits(q, k, mask.q_pos, mask.k_pos, bias, mix, scale, softcap),
                  masks.NEG)
    p = _weights(s, ok, None if sink is None else sink[:, None, None])  # s: [H, lq, lk]
    return _times_v(p, v).astype(v.dtype)


def chunked(q, k, v, *, mask: masks.Mask, bias, mix, scale: float, block_size=256,
            sink=None, softcap=0.0):
    """Online softmax over blocks of queries and keys, all heads at once -> [Lq, H, Dv]."""
    lq, lk, heads, dv = q.shape[0], k.shape[0], q.shape[1], v.shape[-1]
    bq, bk = min(block_size, lq), min(block_size, lk)
    nq, nk = -(-lq // bq), -(-lk // bk)
    k_blocks = (jnp.arange(nk, dtype=jnp.int32) * bk, _blocks(k, bk, nk), _blocks(v, bk, nk),
                _blocks(mask.k_seg, bk, nk), _blocks(mask.k_pos, bk, nk))

    def q_block(xs):
        q_start, qb, q_seg, q_pos = xs
        q_idx = masks.token_indices(q_start + mask.q_offset, bq)

        def update(carry, kxs):
            m, total, acc = carry
            k_start, kb, vb, k_seg, k_pos = kxs
            ok = masks.allowed(q_idx, masks.token_indices(k_start, bk), q_seg, k_seg,
                               causal=mask.causal, window=mask.window)
            s = jnp.where(ok, _logits(qb, kb, q_pos, k_pos, bias, mix, scale, softcap),
                          masks.NEG)
            m_new = lax.stop_gradient(jnp.maximum(m, s.max(-1)))  # [H, bq]
            e = jnp.exp(s - m_new[..., None])
            c = jnp.exp(m - m_new)
            acc = c.T[..., None] * acc + _times_v(e, vb)
            return m_new, c * total + e.sum(-1), acc

        @jax.checkpoint
        def step(carry, kxs):
            visible = masks.block_visible(q_idx[0], bq, kxs[0], causal=mask.causal, k_len=bk,
                                          window=mask.window, chunk=mask.chunk)
            return lax.cond(visible, update, lambda c, _: c, carry, kxs), None

        if sink is None:
            m0, total0 = jnp.full((heads, bq), masks.NEG, jnp.float32), jnp.zeros((heads, bq))
        else:
            m0, total0 = _sink_start(sink[:, None], (heads, bq))
        init = (m0, total0.astype(jnp.float32), jnp.zeros((bq, heads, dv), jnp.float32))
        (m, total, acc), _ = lax.scan(step, init, k_blocks)
        return acc * (_has_keys(m) / total).T[..., None]

    out = lax.map(jax.checkpoint(q_block), (jnp.arange(nq, dtype=jnp.int32) * bq,
                                            _blocks(q, bq, nq), _blocks(mask.q_seg, bq, nq),
                                            _blocks(mask.q_pos, bq, nq)))
    return out.reshape(nq * bq, heads, dv)[:lq].astype(v.dtype)


# The attend implementations, by the name users pass as `attention=`.
IMPLS: dict[str, Callable[..., jax.Array]] = {"dense": dense, "chunked": chunked}
