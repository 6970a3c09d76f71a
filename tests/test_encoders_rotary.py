"""Properties of the rotary encodings: relativity, norms, layouts, dtypes, variants, errors."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posjax.encoders import Dims, get, rotary
from posjax.encoders.rotary import apply_rotary, frequencies, rotate_by_angles
from posjax.errors import ConfigError

FAST = settings(max_examples=25, deadline=None)
D = 16
DIMS = Dims(d_model=64, num_heads=4, head_dim=D, max_len=128)


def _vectors(seed, *shape):
    return np.random.RandomState(seed).standard_normal(shape).astype(np.float32)


def _ref_rotate(x, angles):
    """float64 interleaved rotation of x [..., 2P] by angles [..., P] (RoFormer eq. 34)."""
    x = np.asarray(x, np.float64)
    a, b = x[..., 0::2], x[..., 1::2]
    cos, sin = np.cos(angles), np.sin(angles)
    out = np.stack([a * cos - b * sin, b * cos + a * sin], axis=-1)
    return out.reshape(x.shape)


def _rope_score(q, k, m, n, inv_freq, layout="interleaved"):
    """(R_m q) . (R_n k) through apply_rotary, q and k: [D]."""
    rq = apply_rotary(jnp.asarray(q)[None, None], jnp.array([m]), inv_freq, layout)
    rk = apply_rotary(jnp.asarray(k)[None, None], jnp.array([n]), inv_freq, layout)
    return float(jnp.sum(rq.astype(jnp.float32) * rk.astype(jnp.float32)))


def _angle_bound(q, k, m, n, inv_freq):
    """A sound error bound for a float32 RoPE score against exact q^T R_{n-m} k.

    Each float32 angle a = pos * theta_i is rounded by at most |a| 2^-24 (half an ulp) and
    sin/cos of the rounded angle are accurate to ~3e-8 (measured over [0, 1.2e6]); a pair's
    contribution moves by at most |q_i| |k_i| times its two angle errors. We allow twice that
    (2^-23 per angle, plus 1e-7 for sin/cos) and 1e-5 |q| |k| for the float32 products and sum.
    Near position 10^6 the fastest pair (theta_0 = 1) may be off by ~0.06 rad, so a single
    relative tolerance would be unsound there; slow pairs stay at the 1e-3 level or better.
    """
    inv = np.asarray(inv_freq, np.float64)
    qn = np.hypot(q[0::2], q[1::2]).astype(np.float64)
    kn = np.hypot(k[0::2], k[1::2]).astype(np.float64)
    per_angle = 2.0**-23 * (abs(m) + abs(n)) * inv + 2e-7
    return float(np.sum(qn * kn * per_angle) + 1e-5 * np.linalg.norm(q) * np.linalg.norm(k))


def _exact_score(q, k, r, inv_freq):
    rk = _ref_rotate(k, r * np.asarray(inv_freq, np.float64))
    return float(np.dot(np.asarray(q, np.float64), rk))


@FAST
@given(
    m=st.integers(0, 4096),
    n=st.integers(0, 4096),
    shift=st.integers(0, 4096),
    seed=st.integers(0, 2**16),
)
def test_rope_score_depends_only_on_relative_position(m, n, shift, seed):
    q, k = _vectors(seed, 2, D)
    inv = frequencies(D)
    exact = _exact_score(q, k, n - m, inv)
    for a, b in ((m, n), (m + shift, n + shift)):
        assert abs(_rope_score(q, k, a, b, inv) - exact) <= _angle_bound(q, k, a, b, inv)


@FAST
@given(
    m=st.integers(10**6 - 5000, 10**6 + 5000),
    r=st.integers(-3000, 3000),
    seed=st.integers(0, 2**16),
)
def test_rope_relative_near_a_million_in_float32(m, r, seed):
    q, k = _vectors(seed, 2, D)
    inv = frequencies(D)
    exact = _exact_score(q, k, r, inv)
    assert abs(_rope_score(q, k, m, m + r, inv) - exact) <= _angle_bound(q, k, m, m + r, inv)


@FAST
@given(pos=st.integers(-(10**5), 10**5), seed=st.integers(0, 2**16))
def test_rotation_keeps_norms(pos, seed):
    x = _vectors(seed, 1, 3, 2, D)
    positions = jnp.array([[pos, pos + 1, 7 * pos]])
    for layout in ("interleaved", "half"):
        y = np.asarray(apply_rotary(jnp.asarray(x), positions, frequencies(D), layout))
        np.testing.assert_allclose(
            np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5
        )


@FAST
@given(seed=st.integers(0, 2**16), pos=st.integers(0, 10**4))
def test_interleaved_and_half_agree_under_the_dim_permutation(seed, pos):
    # Half-layout dim i is interleaved dim 2i and half-layout dim i + D/2 is dim 2i + 1.
    perm = np.concatenate([np.arange(0, D, 2), np.arange(1, D, 2)])
    x = _vectors(seed, 2, 3, 2, D)
    positions = jnp.array([[pos, pos + 3, 0], [1, 2, 3]])
    inter = np.asarray(apply_rotary(jnp.asarray(x), positions, frequencies(D), "interleaved"))
    half = np.asarray(apply_rotary(jnp.asarray(x[..., perm]), positions, frequencies(D), "half"))
    np.testing.assert_allclose(half, inter[..., perm], rtol=1e-6, atol=1e-6)


def test_efficient_form_matches_the_rotation_matrix():
    # q * cos + rotate(q) * sin with rotate(q) = (-q1, q0, -q3, q2, ...).
    x = _vectors(0, D)
    angles = 5 * np.asarray(frequencies(D), np.float64)
    rot = np.stack([-x[1::2], x[0::2]], axis=-1).reshape(D)
    expected = x * np.repeat(np.cos(angles), 2) + rot * np.repeat(np.sin(angles), 2)
    got = apply_rotary(jnp.asarray(x)[None, None], jnp.array([5]), frequencies(D))[0, 0]
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_partial_rotary_leaves_the_tail_untouched(layout):
    x = jnp.asarray(_vectors(1, 2, 5, 3, D))
    positions = jnp.arange(10).reshape(2, 5) * 37
    y = apply_rotary(x, positions, frequencies(4), layout)
    np.testing.assert_array_equal(np.asarray(y[..., 4:]), np.asarray(x[..., 4:]))
    assert not np.allclose(np.asarray(y[..., :4]), np.asarray(x[..., :4]))

    enc = get("rope", fraction=0.25, layout=layout)
    assert enc.rot_dim(D) == 4
    q, k = enc.rotate({}, x, x, positions, positions)
    np.testing.assert_array_equal(np.asarray(q[..., 4:]), np.asarray(x[..., 4:]))
    np.testing.assert_allclose(np.asarray(q), np.asarray(y), rtol=1e-6)


def test_angles_are_float32_for_bfloat16_inputs():
    x32 = jnp.asarray(_vectors(2, 1, 4, 1, D))
    positions = jnp.array([[1000, 1001, 1002, 1003]])
    inv = frequencies(D)
    got = apply_rotary(x32.astype(jnp.bfloat16), positions, inv)
    assert got.dtype == jnp.bfloat16
    reference = apply_rotary(x32.astype(jnp.bfloat16).astype(jnp.float32), positions, inv)
    # One bfloat16 rounding of the float32 result: relative 2^-8 of each value.
    np.testing.assert_allclose(
        np.asarray(got, np.float32), np.asarray(reference), rtol=2**-8, atol=1e-6
    )
    # Angles rounded to bfloat16 (1001 is not representable) would be far off: the test bites.
    bf16_angles = positions.astype(jnp.bfloat16)[..., None] * inv.astype(jnp.bfloat16)
    wrong = rotate_by_angles(x32, bf16_angles.astype(jnp.float32)[..., None, :])
    assert np.abs(np.asarray(wrong) - np.asarray(reference)).max() > 0.1


def test_rope_encoding_sites_and_hashability():
    enc = get("rope", theta=500.0, layout="half", scaling={"rope_type": "linear", "factor": 2.0})
    assert enc.sites() == ("rotate",)
    assert not enc.replaces_content and not enc.causal_only
    assert enc.scores_only_through_qk
    assert hash(enc) == hash(
        get("rope", theta=500.0, layout="half", scaling={"factor": 2.0, "rope_type": "linear"})
    )
    assert enc.init(jax.random.key(0), DIMS) == {}


def test_learned_frequencies_start_at_theta_powers_and_are_used():
    enc = get("rope", learned_freqs=True, fraction=0.5)
    params = enc.init(jax.random.key(0), DIMS)
    np.testing.assert_allclose(np.asarray(params["inv_freq"]), np.asarray(frequencies(8)))
    x = jnp.asarray(_vectors(3, 1, 4, 2, D))
    pos = jnp.arange(4)[None] * 11
    doubled = {"inv_freq": 2 * params["inv_freq"]}
    q, _ = enc.rotate(doubled, x, x, pos, pos)
    np.testing.assert_allclose(
        np.asarray(q), np.asarray(apply_rotary(x, 2 * pos, frequencies(8))), rtol=1e-5, atol=1e-5
    )


def test_yarn_attention_factor_and_logn_scale_q_and_k():
    cfg = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    enc = get("rope", scaling=cfg, logn_train_len=8)
    x = jnp.asarray(_vectors(4, 1, 20, 2, D))
    pos = jnp.arange(20)[None]
    q, k = enc.rotate({}, x, x, pos, pos)
    inv = frequencies(D, scaling=cfg)
    factor = 0.1 * math.log(4.0) + 1.0
    logn = np.maximum(1.0, np.log(np.arange(20) + 1.0) / np.log(8.0))[None, :, None, None]
    np.testing.assert_allclose(
        np.asarray(k), factor * np.asarray(apply_rotary(x, pos, inv)), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        np.asarray(q), factor * logn * np.asarray(apply_rotary(x, pos, inv)), rtol=1e-5, atol=1e-6
    )


def _naive_rerope(q, k, q_pos, k_pos, inv, w, leak):
    """a_ij = q_i^T R_{r'} k_j / sqrt(D), r = j - i capped (or leaky) past -w; float64."""
    out = np.zeros((len(q_pos), len(k_pos)))
    for i, m in enumerate(q_pos):
        for j, n in enumerate(k_pos):
            r = float(n - m)
            if r <= -w:
                r = (r + w) / leak - w if leak else -w
            out[i, j] = _exact_score(q[i], k[j], r, inv)
    return out / math.sqrt(q.shape[-1])


@pytest.mark.parametrize("leak", [0.0, 4.0])
def test_rerope_matches_the_capped_score(leak):
    w = 6
    enc = get("rope", rerope_window=w, rerope_leak=leak)
    assert enc.sites() == ("rel_score",) and enc.rotate is None
    assert enc.replaces_content and enc.causal_only and not enc.scores_only_through_qk
    enc.check(DIMS)
    q, k = _vectors(5, 2, 20, D)
    q_pos = np.arange(20) + 3
    k_pos = np.arange(20) + 3
    got = enc.rel_score({}, jnp.asarray(q), jnp.asarray(k), q_pos, k_pos, jnp.int32(0))
    expected = _naive_rerope(q, k, q_pos, k_pos, frequencies(D), w, leak)
    causal = k_pos[None, :] <= q_pos[:, None]
    np.testing.assert_allclose(np.asarray(got)[causal], expected[causal], atol=1e-4)


def _naive_self_extend(q, k, q_pos, k_pos, inv, w, group):
    """Self-Extend (Jin et al. 2024), float64: within the window the plain distance; past it
    key floor(n / G) minus query floor(m / G) + w - floor(w / G)."""
    out = np.zeros((len(q_pos), len(k_pos)))
    for i, m in enumerate(q_pos):
        for j, n in enumerate(k_pos):
            r = n - m if m - n < w else n // group - (m // group + w - w // group)
            out[i, j] = _exact_score(q[i], k[j], float(r), inv)
    return out / math.sqrt(q.shape[-1])


@pytest.mark.parametrize("group", [1, 3, 8])
def test_self_extend_groups_distances_past_the_window(group):
    w = 5
    enc = get("rope", rerope_window=w, self_extend_group=group)
    q, k = _vectors(7, 2, 30, D)
    pos = np.arange(30) + 2
    got = np.asarray(enc.rel_score({}, jnp.asarray(q), jnp.asarray(k), pos, pos, 0))
    causal = pos[None, :] <= pos[:, None]
    expected = _naive_self_extend(q, k, pos, pos, frequencies(D), w, group)
    np.testing.assert_allclose(got[causal], expected[causal], atol=1e-4)
    if group == 1:  # G = 1 groups nothing: plain RoPE at every distance
        plain = np.asarray([[_rope_score(q[i], k[j], m, n, frequencies(D)) for j, n in
                             enumerate(pos)] for i, m in enumerate(pos)]) / math.sqrt(D)
        np.testing.assert_allclose(got[causal], plain[causal], atol=1e-4)


def test_self_extend_at_evaluation_keeps_every_distance_in_the_trained_range():
    from posjax.eval.methods import apply_methods

    enc = apply_methods(get("rope"), "self_extend", train_len=128, length=1024)
    w, group = enc.rerope_window, enc.self_extend_group
    assert w == 64 and (1023 // group + w - w // group) < 128
    assert (1023 // (group - 1) + w - w // (group - 1)) >= 128  # the smallest such group
    with pytest.raises(ConfigError, match="self_extend_group=2: use 0 .* rerope_window > 0"):
        get("rope", self_extend_group=2)
    with pytest.raises(ConfigError, match="self_extend_group and sink_tokens each set what"):
        get("rope", rerope_window=8, self_extend_group=2, sink_tokens=4)
    sinks = apply_methods(get("rope"), "sinks", train_len=128, length=1024)
    assert (sinks.sink_tokens, sinks.rerope_window) == (4, 124)


def _streaming_llm(q, k, v, sinks, window, inv):
    """StreamingLLM with a real cache, float64: query i sees the first `sinks` tokens and the
    last `window`, at their positions in the cache (sinks 0.., then the window in order)."""
    length, out = len(q), np.zeros_like(v, dtype=np.float64)
    for i in range(length):
        kept = [j for j in range(i + 1) if j < sinks or i - j < window]
        cache_pos = {j: (j if j < sinks else min(i, sinks + window - 1) - (i - j)) for j in kept}
        query_pos = min(i, sinks + window - 1)
        scores = np.array([_exact_score(q[i], k[j], cache_pos[j] - query_pos, inv)
                           for j in kept]) / math.sqrt(q.shape[-1])
        weights = np.exp(scores - scores.max())
        out[i] = weights @ v[kept] / weights.sum()
    return out


@pytest.mark.parametrize("impl", ["dense", "chunked"])
def test_attention_sinks_equal_streaming_llm_with_a_real_cache(impl):
    from posjax.attention import multi_head_attention

    sinks, window, length = 3, 6, 25
    enc = get("rope", rerope_window=window, sink_tokens=sinks)
    q, k, v = _vectors(11, 3, length, D)
    pos = jnp.arange(length)[None]
    seg = jnp.ones((1, length), jnp.int32)
    got = multi_head_attention(*(jnp.asarray(a)[None, :, None] for a in (q, k, v)),
                               encoding=enc, params={}, q_pos=pos, k_pos=pos, q_seg=seg,
                               k_seg=seg, causal=True, impl=impl, block_size=8)
    expected = _streaming_llm(q, k, v, sinks, window, frequencies(D))
    np.testing.assert_allclose(np.asarray(got)[0, :, 0], expected, atol=1e-4)


def test_rerope_score_runs_under_jit_and_vmap_over_batch_and_heads():
    enc = get("rope", rerope_window=4, logn_train_len=8)
    q, k = (jnp.asarray(a) for a in _vectors(9, 2, 2, 10, 3, D))  # [B, L, H, D]
    pos = jnp.stack([jnp.arange(10), jnp.arange(10) + 100])

    def one(qh, kh, qp, kp, head):
        return enc.rel_score({}, qh, kh, qp, kp, head)

    per_head = jax.vmap(one, in_axes=(1, 1, None, None, 0))
    batched = jax.jit(jax.vmap(per_head, in_axes=(0, 0, 0, 0, None)))
    got = batched(q, k, pos, pos, jnp.arange(3))
    assert got.shape == (2, 3, 10, 10) and got.dtype == jnp.float32
    direct = enc.rel_score({}, q[1, :, 2], k[1, :, 2], pos[1], pos[1], 2)
    np.testing.assert_allclose(np.asarray(got[1, 2]), np.asarray(direct), rtol=1e-5, atol=1e-6)


def test_rerope_equals_plain_rope_inside_the_window():
    enc = get("rope", rerope_window=32)
    plain = get("rope")
    q, k = _vectors(6, 2, 1, 10, 1, D)
    pos = jnp.arange(10)[None] + 500
    got = enc.rel_score({}, jnp.asarray(q[0, :, 0]), jnp.asarray(k[0, :, 0]), pos[0], pos[0], 0)
    rq, rk = plain.rotate({}, jnp.asarray(q), jnp.asarray(k), pos, pos)
    expected = jnp.einsum("qd,kd->qk", rq[0, :, 0], rk[0, :, 0]) / math.sqrt(D)
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-5, atol=1e-5)


def _xpos_reference(q, k, m, n, theta=10000.0, scale_base=512.0):
    inv = np.asarray(frequencies(D, theta), np.float64)
    zeta = (2 * np.arange(D // 2) + 0.4 * D) / (1.4 * D)
    rk = _ref_rotate(k, (n - m) * inv)
    pair = (np.asarray(q, np.float64) * rk).reshape(-1, 2).sum(-1)
    return float(np.sum(zeta ** ((m - n) / scale_base) * pair))


@FAST
@given(
    m=st.integers(0, 10**6),
    back=st.integers(0, 2048),
    seed=st.integers(0, 2**16),
)
def test_xpos_score_depends_only_on_relative_position(m, back, seed):
    enc = get("xpos")
    assert enc.causal_only and enc.sites() == ("rotate",)
    q, k = _vectors(seed, 2, D)
    n = max(m - back, 0)
    rq, rk = enc.rotate(
        {},
        jnp.asarray(q)[None, None, None],
        jnp.asarray(k)[None, None, None],
        jnp.array([[m]]),
        jnp.array([[n]]),
    )
    got = float(jnp.sum(rq * rk))
    assert np.isfinite(got)
    # The decay factor is at most 1 for n <= m, so the plain-RoPE angle bound still holds.
    bound = _angle_bound(q, k, m, n, frequencies(D))
    assert abs(got - _xpos_reference(q, k, m, n)) <= bound


def test_rope2d_is_relative_and_invertible():
    enc = get("rope2d")
    assert enc.theta == 100.0
    q, k = _vectors(7, 2, 1, 1, 2, D)
    p1 = jnp.array([[[3, 11]]])
    p2 = jnp.array([[[9, 4]]])
    origin = jnp.zeros((1, 1, 2), jnp.int32)

    def score(a, b):
        rq, rk = enc.rotate({}, jnp.asarray(q), jnp.asarray(k), a, b)
        return np.einsum("blhd,blhd->h", np.asarray(rq), np.asarray(rk))

    # R_{x1,y1}^T R_{x2,y2} = R_{x2-x1, y2-y1}
    np.testing.assert_allclose(score(p1, p2), score(origin, p2 - p1), rtol=1e-5, atol=1e-5)
    turned, _ = enc.rotate({}, jnp.asarray(q), jnp.asarray(q), p1, p1)
    back, _ = enc.rotate({}, turned, turned, -p1, -p1)
    np.testing.assert_allclose(np.asarray(back), q, rtol=1e-5, atol=1e-5)
    # Block a of the pairs turns by axis a only: moving y leaves the x block alone.
    moved, _ = enc.rotate({}, jnp.asarray(q), jnp.asarray(q), p1.at[..., 1].set(0), p1)
    np.testing.assert_allclose(np.asarray(moved)[..., : D // 2], np.asarray(turned)[..., : D // 2])


def test_rope2d_and_mixed_reject_bad_dims_and_1d_positions():
    with pytest.raises(ConfigError, match="divisible by 4") as err:
        get("rope2d").check(Dims(d_model=66 * 2, num_heads=2, head_dim=66))
    assert "\n" not in str(err.value) and "64 or 68" in str(err.value)
    with pytest.raises(ConfigError, match="divisible by 6"):
        get("rope_mixed", ndim=3).init(jax.random.key(0), DIMS)
    x = jnp.zeros((1, 4, 2, D))
    flat = jnp.zeros((1, 4), jnp.int32)
    for name in ("rope2d", "rope_mixed"):
        enc = get(name)
        params = enc.init(jax.random.key(0), DIMS)
        with pytest.raises(ConfigError, match=r"positions int32\[B, L, 2\]"):
            enc.rotate(params, x, x, flat, flat)


def test_position_axes_are_declared_by_the_encoding():
    # Callers shape positions from this alone: [B, L] when None, [B, L, A] for A axes.
    from posjax import encoders

    assert get("rope2d").position_axes == 2 and get("rope_mixed").position_axes == 2
    assert get("rope2d", ndim=3).position_axes == 3
    assert get("rope_mixed", ndim=3).position_axes == 3
    flat = [n for n in encoders.names() if n not in ("rope2d", "rope_mixed")]
    assert all(get(n).position_axes is None for n in flat)


def test_rope_mixed_init_is_a_random_rotation_per_head_and_relative():
    enc = get("rope_mixed")
    params = enc.init(jax.random.key(1), DIMS)
    freqs = np.asarray(params["freqs"])
    assert freqs.shape == (2, 4, D // 2)
    np.testing.assert_array_equal(freqs, np.asarray(enc.init(jax.random.key(1), DIMS)["freqs"]))
    magnitude = np.asarray(frequencies(D // 2, 10.0))
    blk = D // 4
    for h in range(4):
        # Column b*blk + i of head h: direction b (a unit vector) times magnitude i.
        dirs = np.stack([freqs[:, h, b * blk] / magnitude[0] for b in range(2)])
        np.testing.assert_allclose(dirs @ dirs.T, np.eye(2), atol=1e-6)
        assert np.linalg.det(dirs) > 0
        for b in range(2):
            np.testing.assert_allclose(
                freqs[:, h, b * blk : (b + 1) * blk], np.outer(dirs[b], magnitude), rtol=1e-5
            )

    q, k = _vectors(8, 2, 1, 1, 4, D)
    p1, p2 = jnp.array([[[2, 7]]]), jnp.array([[[13, 1]]])

    def score(a, b):
        rq, rk = enc.rotate(params, jnp.asarray(q), jnp.asarray(k), a, b)
        return np.einsum("blhd,blhd->h", np.asarray(rq), np.asarray(rk))

    np.testing.assert_allclose(
        score(p1, p2), score(jnp.zeros_like(p1), p2 - p1), rtol=1e-5, atol=1e-5
    )


def test_one_line_config_errors():
    with pytest.raises(ConfigError) as err:
        get("rope").init(jax.random.key(0), Dims(d_model=252, num_heads=4, head_dim=63))
    assert str(err.value) == "rope needs an even head_dim, got 63: choose an even head_dim"
    with pytest.raises(ConfigError, match="collapses to plain RoPE"):
        get("rope", rerope_window=128).check(DIMS)
    with pytest.raises(ConfigError, match="unknown rotary layout 'halves'"):
        get("rope", layout="halves")
    with pytest.raises(ConfigError, match="unknown rope_scaling type 'yarm'.*did you mean 'yarn'"):
        get("rope", scaling={"rope_type": "yarm", "factor": 2.0})
    with pytest.raises(ConfigError, match="rerope_leak needs rerope_window"):
        get("rope", rerope_leak=4.0)
    with pytest.raises(ConfigError, match="cannot combine with dynamic"):
        dynamic = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 64}
        get("rope", rerope_window=8, scaling=dynamic)
    with pytest.raises(ConfigError, match="2-D positions need rope2d"):
        apply_rotary(jnp.zeros((1, 4, 2, D)), jnp.zeros((1, 4, 2), jnp.int32), frequencies(D))


def test_public_names():
    assert rotary.attention_factor(None) == 1.0
    assert frequencies(8).dtype == jnp.float32 and frequencies(8).shape == (4,)


def test_yarn_attention_factor_on_all_dims_or_only_the_rotated_ones():
    # YaRN's paper scales the logits by the factor squared; Hugging Face multiplies cos and
    # sin by it, so with partial rotary the pass-through dims keep their scale.
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    q = jax.random.normal(jax.random.key(0), (1, 5, 2, 16))
    pos = jnp.arange(5)[None]
    factor = rotary.attention_factor(yarn)
    assert factor > 1.0
    outputs = {}
    for dims in ("all", "rotated"):
        enc = get("rope", fraction=0.5, scaling=yarn, attention_factor_dims=dims)
        outputs[dims] = np.asarray(enc.rotate({}, q, q, pos, pos)[0])
    np.testing.assert_allclose(outputs["all"][..., 8:], np.asarray(q)[..., 8:] * factor,
                               rtol=1e-6)
    np.testing.assert_allclose(outputs["rotated"][..., 8:], np.asarray(q)[..., 8:], rtol=1e-6)
    np.testing.assert_allclose(outputs["rotated"][..., :8], outputs["all"][..., :8], rtol=1e-6)
    with pytest.raises(ConfigError, match="unknown rope attention_factor_dims 'some'"):
        get("rope", attention_factor_dims="some")


@pytest.mark.parametrize("call, message", [
    (lambda: frequencies(7), "dim=7: RoPE rotates pairs of dimensions, so dim is even"),
    (lambda: frequencies(0), "dim=0: RoPE rotates pairs"),
    (lambda: frequencies(8, 0.0), "RoPE theta must be > 0, got 0.0"),
    (lambda: frequencies(8, -5.0), "RoPE theta must be > 0, got -5.0"),
    (lambda: get("rope").rotate({}, jnp.ones((1, 4, 1, 7)), jnp.ones((1, 4, 1, 7)),
                                jnp.arange(4)[None], jnp.arange(4)[None]),
     "rope needs an even head_dim, got 7"),
    (lambda: get("rope").init(jax.random.key(0), Dims(16, 2, 8, max_len=-5)),
     "Dims max_len=-5: every size of a model is >= 1"),
    (lambda: get("rope").init(jax.random.key(0), Dims(16, 2, 0)), "Dims head_dim=0"),
    (lambda: get("rope", theta="abc"), "encoding 'rope' theta='abc' is not a number"),
])
def test_bad_arguments_from_python_are_one_line_naming_them(call, message):
    """From Python these gave inf/NaN frequencies, a 7th dimension passed through unrotated,
    a ReRoPE message with ReRoPE off, a ZeroDivisionError and a TypeError."""
    with pytest.raises(ConfigError) as raised:
        call()
    assert message in str(raised.value) and "\n" not in str(raised.value)


# transformers' modeling_llama4 (Llama4TextAttention, attn_temperature_tuning), its expression
# evaluated by torch in float32: log1p(floor((pos + 1) / floor_scale)) * attn_scale + 1
LLAMA4_TEMPERATURE = {4: ([0, 2, 3, 7, 8, 100],
                          [1.0, 1.0, 1.06931471824646, 1.1098612546920776, 1.1098612546920776,
                           1.3258097171783447]),
                      8192: ([8190, 8191, 16383, 131071],
                             [1.0, 1.06931471824646, 1.1098612546920776, 1.2833213806152344])}


@pytest.mark.parametrize("floor", [4, 8192])
def test_llama4_temperature_scales_queries_as_transformers_does(floor):
    positions, golden = LLAMA4_TEMPERATURE[floor]
    enc = get("rope", p=0.0, temperature_floor=floor)  # Llama 4's NoPE layers
    pos = jnp.array([positions])
    q = jnp.asarray(_vectors(0, 1, len(positions), 2, D))
    k = jnp.asarray(_vectors(1, 1, len(positions), 2, D))
    turned_q, turned_k = enc.rotate({}, q, k, pos, pos)
    np.testing.assert_allclose(turned_q, q * np.array(golden)[None, :, None, None], rtol=1e-6)
    np.testing.assert_array_equal(turned_k, k)
    # a map of frequencies (YaRN's attention factor too) leaves a layer that rotates no pair
    scaled = dataclasses.replace(enc, scaling={"rope_type": "yarn", "factor": 4.0,
                                              "original_max_position_embeddings": 128})
    np.testing.assert_array_equal(scaled.rotate({}, q, k, pos, pos)[1], k)
    with pytest.raises(ConfigError, match=r"^rope temperature_floor=-1: use 0 \(off\)"):
        get("rope", temperature_floor=-1)
    with pytest.raises(ConfigError, match=r"^vo_rope temperature_floor=4: VO-RoPE leaves q"):
        get("vo_rope", temperature_floor=4)


@FAST
@given(m=st.integers(0, 5000), n=st.integers(0, 5000), seed=st.integers(0, 99))
def test_temperature_multiplies_the_score_by_the_querys_factor_alone(m, n, seed):
    """On RoPE too: the score is RoPE's, relative in n - m, times the query's factor."""
    q, k = _vectors(seed, D), _vectors(seed + 1, D)
    tuned = get("rope", temperature_floor=64, temperature_scale=0.5)
    tq, tk = tuned.rotate({}, jnp.asarray(q)[None, None, None], jnp.asarray(k)[None, None, None],
                          jnp.array([[m]]), jnp.array([[n]]))
    factor = 1.0 + 0.5 * math.log1p(math.floor((m + 1) / 64))
    plain = _rope_score(q, k, m, n, frequencies(D, 10000.0))
    np.testing.assert_allclose(float(jnp.sum(tq * tk)), factor * plain, rtol=2e-4, atol=2e-4)
