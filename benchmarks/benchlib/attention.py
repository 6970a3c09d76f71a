"""Causal attention cases of the benchmarks: an encoding by label, its inputs, and the
jitted forward and forward+backward of posjax's attention with it."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from posjax import encoders
from posjax.attention import multi_head_attention
from posjax.encoders.base import Dims

# label -> (registry name, hyperparameters, group); the group is the kind of position term,
# which benchmarks/bench_attention.py sets its overhead targets by.
ENCODINGS = {
    "none": ("none", {}, "plain"),
    "rope": ("rope", {}, "rotary"),
    "xpos": ("xpos", {}, "rotary"),
    "rope+logn": ("rope", {"logn_train_len": 512}, "rotary"),
    "t5": ("t5", {}, "bias"),
    "alibi": ("alibi", {}, "bias"),
    "kerple_log": ("kerple_log", {}, "bias"),
    "fire": ("fire", {}, "bias"),
    "tupe": ("tupe", {}, "bias"),
    "shaw": ("shaw", {}, "content"),
    "xl": ("xl", {}, "content"),
    "deberta": ("deberta", {}, "content"),
    "rerope": ("rope", {"rerope_window": 256}, "content"),
}


def encoding(label: str, heads: int, head_dim: int):
    """(the encoding of ENCODINGS[label], its parameters) for `heads` heads of `head_dim`."""
    name, hp, _ = ENCODINGS[label]
    enc = encoders.get(name, **hp)
    params = enc.init(jax.random.key(0), Dims(heads * head_dim, heads, head_dim, max_len=512))
    return enc, params


def inputs(length: int, heads: int, head_dim: int):
    """(q, k, v: [1, length, heads, head_dim], positions, segment ids: [1, length])."""
    kq, kk, kv = jax.random.split(jax.random.key(1), 3)
    shape = (1, length, heads, head_dim)
    q, k, v = (jax.random.normal(x, shape, jnp.float32) for x in (kq, kk, kv))
    pos = jnp.arange(length, dtype=jnp.int32)[None]
    seg = jnp.ones((1, length), jnp.int32)
    return q, k, v, pos, seg


def functions(enc, impl: str, block_size: int):
    """(forward, forward+backward) jitted functions of (q, k, v, params, pos, seg)."""

    def forward(q, k, v, params, pos, seg):
        return multi_head_attention(
            q, k, v, encoding=enc, params=params, q_pos=pos, k_pos=pos, q_seg=seg, k_seg=seg,
            causal=True, impl=impl, block_size=block_size,
        )  # fmt: skip

    def loss(q, k, v, params, pos, seg):
        return jnp.sum(forward(q, k, v, params, pos, seg) * v)

    return jax.jit(forward), jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3)))
