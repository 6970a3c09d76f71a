"""Stick-breaking attention (Tan et al. 2025): golden values from the authors' PyTorch
reference, its defining product written out, the weights' properties for all inputs, the
O(L) chunked kernel against dense (values and gradients), packing, and the refusals."""

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posjax import encoders
from posjax.attention import check_compatible, multi_head_attention
from posjax.errors import ConfigError

GOLDEN = json.loads((Path(__file__).parent / "golden" / "stickbreaking.json").read_text())
H, DH = 2, 4


def _attend(q, k, v, *, impl="dense", segments=None, block_size=256, positions=None, **hp):
    batch, length = q.shape[:2]
    pos = positions if positions is not None else jnp.broadcast_to(
        jnp.arange(length, dtype=jnp.int32), (batch, length))
    seg = jnp.ones((batch, length), jnp.int32) if segments is None else segments
    return multi_head_attention(q, k, v, encoding=encoders.get("stickbreaking", **hp),
                                params={}, q_pos=pos, k_pos=pos, q_seg=seg, k_seg=seg,
                                causal=True, x=jnp.zeros((batch, length, 4)), impl=impl,
                                block_size=block_size)


def _qkv(length, batch=1, seed=0, shift=1.0):
    rng = np.random.default_rng(seed)
    return (jnp.asarray(0.8 * (rng.normal(size=(batch, length, H, DH)) + shift), jnp.float32),
            jnp.asarray(0.8 * (rng.normal(size=(batch, length, H, DH)) - shift), jnp.float32),
            jnp.asarray(rng.normal(size=(batch, length, H, DH)), jnp.float32))


@pytest.mark.parametrize("impl", ["dense", "chunked"])
@pytest.mark.parametrize("index", [0, 1])
def test_goldens_from_the_authors_pytorch_reference(impl, index):
    case = GOLDEN["cases"][index]
    q, k, v = (jnp.asarray(case[n], jnp.float32) for n in ("q", "k", "v"))
    hp = dict(attend_current=case["attend_current"])
    out = _attend(q, k, v, impl=impl, block_size=4, **hp)
    np.testing.assert_allclose(np.asarray(out), case["out"], rtol=1e-5, atol=1e-5)
    paper = _attend(q, k, v, impl=impl, block_size=4, remainder=False, **hp)
    np.testing.assert_allclose(np.asarray(paper), case["out_paper"], rtol=1e-5, atol=1e-5)


def _weights(z, attend_current):
    """A [L, L] from the logits z by the paper's product, in float64."""
    beta = 1.0 / (1.0 + np.exp(-np.asarray(z, np.float64)))
    length = len(z)
    a = np.zeros((length, length))
    for i in range(length):
        last = i + 1 if attend_current else i
        for j in range(last):
            a[i, j] = beta[i, j] * np.prod(1.0 - beta[i, j + 1:last])
    return a


@pytest.mark.parametrize("attend_current", [False, True])
def test_each_key_takes_what_the_keys_between_it_and_the_query_left(attend_current):
    q, k, v = _qkv(11, seed=3, shift=0.0)
    out = np.asarray(_attend(q, k, v, attend_current=attend_current, remainder=False))
    for h in range(H):
        z = np.asarray(q[0, :, h] @ k[0, :, h].T, np.float64) / np.sqrt(DH)
        expected = _weights(z, attend_current) @ np.asarray(v[0, :, h], np.float64)
        np.testing.assert_allclose(out[0, :, h], expected, rtol=1e-5, atol=1e-6)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.floats(-2.0, 2.0))
def test_weights_sum_to_at_most_one_and_the_remainder_makes_it_one(seed, shift):
    """With every value 1 the output is sum_j A_ij (<= 1, the stick), and with the remainder
    on, exactly 1; position values never enter."""
    q, k, _ = _qkv(12, seed=seed, shift=shift)
    ones = jnp.ones_like(q)
    taken = np.asarray(_attend(q, k, ones, remainder=False))
    assert (taken >= 0).all() and (taken <= 1 + 1e-6).all()
    np.testing.assert_allclose(np.asarray(_attend(q, k, ones)), 1.0, rtol=1e-5)
    scattered = jnp.asarray(np.random.default_rng(seed).permutation(1000)[:12][None])
    np.testing.assert_allclose(np.asarray(_attend(q, k, ones, remainder=False,
                                                  positions=scattered)), taken)


@pytest.mark.parametrize("attend_current", [False, True])
def test_chunked_gives_dense_values_and_gradients(attend_current):
    q, k, v = _qkv(45, batch=2, seed=5)

    def loss(q, k, v, impl):
        out = _attend(q, k, v, impl=impl, block_size=8, attend_current=attend_current)
        return jnp.sum(out * jnp.cos(out))

    dense, chunked = (jax.value_and_grad(loss, argnums=(0, 1, 2))(q, k, v, impl)
                      for impl in ("dense", "chunked"))
    for a, b in zip(jax.tree.leaves(dense), jax.tree.leaves(chunked), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)


def test_chunked_equals_dense_at_2048_tokens():
    q, k, v = _qkv(2048, seed=7)
    dense = _attend(q, k, v)
    chunked = _attend(q, k, v, impl="chunked", block_size=256)
    np.testing.assert_allclose(np.asarray(chunked), np.asarray(dense), rtol=1e-4, atol=1e-5)


def test_packed_segments_equal_each_sequence_alone_and_padding_gives_zero():
    q, k, v = _qkv(14, seed=9)
    seg = jnp.asarray([[1] * 6 + [2] * 5 + [0] * 3], jnp.int32)
    packed = np.asarray(_attend(q, k, v, segments=seg, impl="chunked", block_size=4))
    for start, stop in ((0, 6), (6, 11)):
        alone = _attend(q[:, start:stop], k[:, start:stop], v[:, start:stop])
        np.testing.assert_allclose(packed[:, start:stop], np.asarray(alone), rtol=1e-5,
                                   atol=1e-6)
    np.testing.assert_array_equal(packed[:, 11:], 0.0)


@pytest.mark.parametrize("impl", ["fused", "linear"])
def test_kernels_that_cannot_carry_it_refuse_in_one_line(impl):
    with pytest.raises(ConfigError, match="'stickbreaking'.*use attention=dense or chunked"):
        check_compatible(encoders.get("stickbreaking"), impl, causal=True)


def test_it_is_causal_only():
    with pytest.raises(ConfigError, match="'stickbreaking' is defined only for causal"):
        check_compatible(encoders.get("stickbreaking"), "dense", causal=False)
