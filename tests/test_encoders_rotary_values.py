"""VO-RoPE (Su 2025): values rotated by the key's position, the output back by the query's;
its defining property (the output depends on relative positions only), the equation written
out, and every kernel carrying it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posjax import encoders
from posjax.attention import multi_head_attention
from posjax.encoders.rotary import apply_rotary, frequencies
from posjax.errors import ConfigError

B, L, H, DH = 2, 9, 2, 8
NAMES = ("vo_rope", "qkvo_rope")


def _qkv(length=L, seed=0):
    rng = np.random.default_rng(seed)
    return [jnp.asarray(rng.normal(size=(B, length, H, DH)), jnp.float32) for _ in range(3)]


def _attend(name, q, k, v, positions, *, impl="dense", causal=True, block_size=256, **hp):
    seg = jnp.ones(q.shape[:2], jnp.int32)
    return multi_head_attention(q, k, v, encoding=encoders.get(name, **hp), params={},
                                q_pos=positions, k_pos=positions, q_seg=seg, k_seg=seg,
                                causal=causal, impl=impl, block_size=block_size)


def _positions(offset=0, length=L):
    return jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32) + offset, (B, length))


def _rotation(angles):
    """[pairs] angles -> the [2 pairs, 2 pairs] interleaved rotation matrix."""
    r = np.zeros((2 * len(angles),) * 2)
    for i, a in enumerate(angles):
        r[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]]
    return r


@pytest.mark.parametrize("name", NAMES)
def test_output_is_the_weighted_sum_of_values_rotated_by_the_relative_position(name):
    q, k, v = _qkv()
    pos = np.arange(L) * 3 + 5  # not 0..L-1, so absolute and relative positions differ
    out = np.asarray(_attend(name, q, k, v, jnp.broadcast_to(jnp.asarray(pos), (B, L))))
    inv_freq = np.asarray(frequencies(DH, 10000.0), np.float64)
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    for b in range(B):
        for h in range(H):
            for i in range(L):
                qi, keys = q[b, i, h], k[b, :i + 1, h]
                if name == "qkvo_rope":  # RoPE's q.k: q^T R_{j-i} k
                    keys = np.stack([_rotation((pos[j] - pos[i]) * inv_freq) @ keys[j]
                                     for j in range(i + 1)])
                z = keys @ qi / np.sqrt(DH)
                a = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
                expected = sum(a[j] * _rotation((pos[j] - pos[i]) * inv_freq) @ v[b, j, h]
                               for j in range(i + 1))
                np.testing.assert_allclose(out[b, i, h], expected, rtol=1e-4, atol=1e-5)


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(NAMES), st.integers(-5000, 5000), st.booleans())
def test_output_depends_only_on_relative_positions(name, offset, causal):
    q, k, v = _qkv()
    base = _attend(name, q, k, v, _positions(), causal=causal)
    shifted = _attend(name, q, k, v, _positions(offset), causal=causal)
    np.testing.assert_allclose(np.asarray(shifted), np.asarray(base), rtol=2e-4, atol=2e-4)


def test_vo_rope_at_one_position_is_plain_attention_and_qkvo_adds_ropes_weights():
    q, k, v = _qkv()
    same = jnp.zeros((B, L), jnp.int32)
    np.testing.assert_allclose(np.asarray(_attend("vo_rope", q, k, v, same)),
                               np.asarray(_attend("none", q, k, v, same)), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(_attend("qkvo_rope", q, k, v, same)),
                               np.asarray(_attend("rope", q, k, v, same)), rtol=1e-6)
    assert not np.allclose(np.asarray(_attend("vo_rope", q, k, v, _positions())),
                           np.asarray(_attend("none", q, k, v, _positions())), atol=1e-3)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("impl", ["chunked", "fused", "linear"])
def test_every_kernel_carries_the_value_site(name, impl):
    q, k, v = _qkv(length=21)
    pos = _positions(length=21)
    if impl == "linear":  # no dense counterpart: against the rotated values done by hand
        enc = encoders.get(name)
        inv = frequencies(DH, 10000.0)
        rot = _attend("rope" if name == "qkvo_rope" else "none", q, k, enc.rotate_value(
            {}, v, pos), pos, impl=impl)
        expected = apply_rotary(rot, -pos, inv)
    else:
        expected = _attend(name, q, k, v, pos)
    out = _attend(name, q, k, v, pos, impl=impl, block_size=8)
    np.testing.assert_allclose(np.asarray(out), np.asarray(expected), rtol=1e-5, atol=1e-5)


def test_chunked_gives_the_dense_gradients():
    q, k, v = _qkv(length=21)
    pos = _positions(length=21)

    def loss(q, v, impl):
        return jnp.sum(_attend("qkvo_rope", q, k, v, pos, impl=impl, block_size=8) ** 2)

    dense, chunked = (jax.grad(loss, argnums=(0, 1))(q, v, impl) for impl in ("dense", "chunked"))
    for a, b in zip(dense, chunked, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)


def test_rerope_is_refused_in_one_line():
    for name in NAMES:
        with pytest.raises(ConfigError, match=f"{name} rerope_window=8.*use rope"):
            encoders.get(name, rerope_window=8)


def test_a_dynamic_map_turns_values_and_outputs_by_the_same_frequencies():
    """Under dynamic NTK the output was turned back with the frequencies of the queries'
    length, the values with the keys': one query at position 2 over keys 0..19 (training
    length 8) read key 19 as R_17 of another frequency set, 0.08 off."""
    enc = encoders.get("vo_rope", scaling={"rope_type": "dynamic", "factor": 4.0,
                                           "original_max_position_embeddings": 8})
    v = jnp.asarray(np.random.default_rng(0).normal(size=(1, 20, H, DH)), jnp.float32)
    keys, query = jnp.arange(20, dtype=jnp.int32)[None], jnp.int32([[2]])
    out = enc.unrotate_output({}, enc.rotate_value({}, v, keys)[:, 19:], query, keys)
    inv_freq = np.asarray(enc._inv_freq({}, DH, jnp.int32(20)), np.float64)
    expected = np.asarray(v[0, 19], np.float64) @ _rotation(17 * inv_freq).T
    np.testing.assert_allclose(np.asarray(out[0, 0]), expected, rtol=1e-4, atol=1e-5)
