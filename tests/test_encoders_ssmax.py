"""SSMax (Nakanishi 2025): softmax((s log n) z) with n the keys a query sees, against the
paper's equation written out in numpy, chunked = dense, and the paths that refuse it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posjax import encoders
from posjax.attention import check_compatible, multi_head_attention
from posjax.encoders import Dims
from posjax.encoders.ssmax import keys_seen
from posjax.errors import ConfigError

B, L, H, DH = 2, 11, 2, 8


def _qkv(length=L, seed=0):
    rng = np.random.default_rng(seed)
    return [jnp.asarray(rng.normal(size=(B, length, H, DH)), jnp.float32) for _ in range(3)]


def _attend(encoding, params, q, k, v, seg, *, causal=True, impl="dense", positions=None,
            block_size=256):
    pos = positions if positions is not None else jnp.broadcast_to(
        jnp.arange(q.shape[1], dtype=jnp.int32), q.shape[:2])
    return multi_head_attention(q, k, v, encoding=encoding.for_model(causal), params=params,
                                q_pos=pos, k_pos=pos, q_seg=seg, k_seg=seg, causal=causal,
                                x=jnp.zeros(q.shape[:2] + (4,)), impl=impl,
                                block_size=block_size)


def _segments():
    # Row 0: segments of 4, 5 and 2 tokens; row 1: 9 tokens then 2 of padding.
    return jnp.asarray([[1] * 4 + [2] * 5 + [3] * 2, [1] * 9 + [0] * 2], jnp.int32)


def _reference(q, k, v, seg, s, causal):
    """The paper's equation, one query at a time: softmax over the keys it sees of
    (s_h log n) q.k / sqrt(Dh), n the number of those keys (NoPE: p=0)."""
    q, k, v, seg = (np.asarray(a, np.float64) for a in (q, k, v, seg))
    out = np.zeros_like(v)
    for b in range(B):
        for i in range(L):
            if seg[b, i] == 0:
                continue
            keys = [j for j in range(L) if seg[b, j] == seg[b, i] and (not causal or j <= i)]
            for h in range(H):
                z = q[b, i, h] @ k[b, keys, h].T / np.sqrt(DH)
                z = s[h] * np.log(len(keys)) * z
                w = np.exp(z - z.max())
                out[b, i, h] = (w / w.sum()) @ v[b, keys, h]
    return out


@pytest.mark.parametrize("causal", [True, False])
def test_attention_is_the_papers_softmax_of_s_log_n_times_the_logits(causal):
    q, k, v = _qkv()
    enc = encoders.get("ssmax", p=0.0)
    params = enc.init(jax.random.key(0), Dims(16, H, DH, 64))
    params["s"] = jnp.asarray([0.7, 1.9], jnp.float32)
    out = _attend(enc, params, q, k, v, _segments(), causal=causal)
    expected = _reference(q, k, v, _segments(), [0.7, 1.9], causal)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-5)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=5), st.booleans())
def test_keys_seen_counts_the_keys_the_mask_allows(lengths, causal):
    # Padded to one length (one compiled shape); the tail is padding.
    seg = np.concatenate([np.full(n, i + 1) for i, n in enumerate(lengths)])
    seg = np.pad(seg, (0, 32 - len(seg)))
    n = np.asarray(keys_seen(jnp.asarray(seg[None], jnp.int32), causal))[0]
    for i in range(len(seg)):
        same = [j for j in range(len(seg)) if seg[j] == seg[i] and (not causal or j <= i)]
        if seg[i] != 0:
            assert n[i] == len(same)
        assert n[i] >= 1


def test_s_at_one_over_log_n_is_plain_rope_softmax():
    """One bidirectional segment of n tokens and s = 1 / log n: the factor is 1."""
    q, k, v = _qkv()
    seg = jnp.ones((B, L), jnp.int32)
    enc = encoders.get("ssmax", s_init=1.0 / np.log(L))
    params = enc.init(jax.random.key(0), Dims(16, H, DH, 64))
    ssmax = _attend(enc, params, q, k, v, seg, causal=False)
    rope = _attend(encoders.get("rope"), {}, q, k, v, seg, causal=False)
    np.testing.assert_allclose(np.asarray(ssmax), np.asarray(rope), rtol=1e-5, atol=1e-6)


def test_default_s_makes_the_training_length_plain_softmax():
    params = encoders.get("ssmax").init(jax.random.key(0), Dims(16, H, DH, 128))
    np.testing.assert_allclose(np.asarray(params["s"]) * np.log(128), 1.0, rtol=1e-6)
    assert "b" not in params
    with_bias = encoders.get("ssmax", learn_bias=True).init(jax.random.key(0),
                                                            Dims(16, H, DH, 128))
    np.testing.assert_array_equal(np.asarray(with_bias["b"]), 0.0)


def test_n_comes_from_the_mask_so_shifted_positions_change_nothing():
    q, k, v = _qkv()
    enc = encoders.get("ssmax")
    params = enc.init(jax.random.key(0), Dims(16, H, DH, 64))
    seg = jnp.ones((B, L), jnp.int32)
    pos = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), (B, L))
    base = _attend(enc, params, q, k, v, seg, positions=pos)
    shifted = _attend(enc, params, q, k, v, seg, positions=pos + 1000)
    np.testing.assert_allclose(np.asarray(base), np.asarray(shifted), rtol=1e-4, atol=1e-5)


def test_the_bias_variant_adds_b_to_the_factor():
    q, k, v = _qkv()
    seg = _segments()
    enc = encoders.get("ssmax", p=0.0, learn_bias=True)
    params = enc.init(jax.random.key(0), Dims(16, H, DH, 64))
    params["s"] = jnp.zeros(H)
    params["b"] = jnp.asarray([1.0, 1.0])  # factor 1: plain softmax attention
    out = _attend(enc, params, q, k, v, seg)
    plain = _attend(encoders.get("none"), {}, q, k, v, seg)
    np.testing.assert_allclose(np.asarray(out), np.asarray(plain), rtol=1e-5, atol=1e-6)


def test_chunked_gives_dense_values_and_gradients():
    q, k, v = _qkv(length=37)
    seg = jnp.ones((B, 37), jnp.int32).at[0, 20:].set(2)
    enc = encoders.get("ssmax", learn_bias=True)
    params = enc.init(jax.random.key(0), Dims(16, H, DH, 64))

    def loss(params, q, impl):
        return jnp.sum(_attend(enc, params, q, k, v, seg, impl=impl, block_size=8) ** 2)

    dense, chunked = (jax.value_and_grad(loss, argnums=(0, 1))(params, q, impl)
                      for impl in ("dense", "chunked"))
    for a, b in zip(jax.tree.leaves(dense), jax.tree.leaves(chunked), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("impl", ["fused", "linear"])
def test_kernels_without_the_logits_refuse_in_one_line(impl):
    with pytest.raises(ConfigError, match="'ssmax'.*use attention=dense or chunked") as err:
        check_compatible(encoders.get("ssmax"), impl, causal=True)
    assert "\n" not in str(err.value)


def test_rerope_and_a_negative_s_are_refused():
    with pytest.raises(ConfigError, match="rerope_window"):
        encoders.get("ssmax", rerope_window=8)
    with pytest.raises(ConfigError, match="s_init"):
        encoders.get("ssmax", s_init=-1.0)


def test_a_sliding_window_is_refused_where_n_would_count_keys_it_hides():
    """n counted the query's segment (i + 1 keys) where a window of W let it see min(W, i + 1),
    so training ran with the wrong factor and no word."""
    with pytest.raises(ConfigError, match=r"encoding 'ssmax' cannot run in a layer with a "
                       r"sliding window of 5 \(model.window, or a layer_pattern entry's\): "
                       r"its n counts .* entry such as "
                       r"ssmax\(window=0\)"):
        check_compatible(encoders.get("ssmax"), "dense", True, window=5)
    check_compatible(encoders.get("ssmax"), "dense", True, window=0)
    check_compatible(encoders.get("fox"), "chunked", True, window=5)  # FoX counts nothing


def test_fewer_queries_than_keys_are_refused_for_a_content_site():
    """content_prepare reads one sequence's x and segment ids: with Lq < Lk the queries took
    n = 1..Lq where, aligned to the last keys, they see Lk - Lq + 1..Lk."""
    enc = encoders.get("ssmax")
    params = enc.init(jax.random.key(0), Dims(16, 2, 8, 64))
    q, k = jnp.ones((1, 7, 2, 8)), jnp.ones((1, 20, 2, 8))
    with pytest.raises(ValueError, match="needs as many queries as keys .* got 7 queries and "
                                         "20 keys"):
        multi_head_attention(q, k, k, encoding=enc, params=params, q_pos=jnp.arange(7)[None],
                             k_pos=jnp.arange(20)[None], q_seg=None, k_seg=None, causal=True,
                             x=jnp.zeros((1, 20, 16)))
