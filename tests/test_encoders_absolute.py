"""Absolute encodings (input site) and position transforms: formulas and properties."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posjax import encoders
from posjax.encoders.absolute import floater_table, hierarchical_table, sinusoidal
from posjax.encoders.base import Dims
from posjax.encoders.positions import randomize_positions, shift_positions
from posjax.errors import ConfigError

DIMS = Dims(d_model=8, num_heads=2, head_dim=4, max_len=16)
FAST = settings(max_examples=25, deadline=None)


@functools.cache
def jit_site(enc, site):
    """enc.<site> jitted once per encoding (eager dispatch compiles every op separately)."""
    return jax.jit(getattr(enc, site), static_argnums=(1,) if site == "init" else ())


def sinusoidal_reference(positions, dim, base=10000.0):
    """The Vaswani et al. formula, index by index, in float64."""
    out = np.zeros((len(positions), dim))
    for row, k in enumerate(positions):
        for j in range(dim):
            angle = k / base ** (2 * (j // 2) / dim)
            out[row, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return out


def test_sinusoidal_golden():
    p = np.asarray(sinusoidal(jnp.arange(3), 4))
    assert p.dtype == np.float32
    np.testing.assert_allclose(p[0], [0.0, 1.0, 0.0, 1.0], atol=1e-7)
    want = [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)]  # 10000^(-2/4) = 0.01
    np.testing.assert_allclose(p[1], want, rtol=1e-6)


@FAST
@given(
    positions=st.lists(st.integers(0, 4096), min_size=6, max_size=6),
    dim=st.sampled_from([1, 2, 3, 8, 17, 32]),  # few shapes: each new one compiles
    base=st.sampled_from([10.0, 100.0, 10000.0, 500000.0]),
)
def test_sinusoidal_matches_formula(positions, dim, base):
    got = np.asarray(sinusoidal(jnp.asarray(positions), dim, base))
    assert got.shape == (len(positions), dim)
    # float32 angles: the error grows like position * 2^-24.
    np.testing.assert_allclose(got, sinusoidal_reference(positions, dim, base), atol=1e-3)


def test_sinusoidal_encoding_adds_in_float32_and_keeps_dtype():
    enc = encoders.get("sinusoidal")
    params = jit_site(enc, "init")(jax.random.key(0), DIMS)
    assert params == {}
    x = jnp.ones((2, 5, 8), jnp.bfloat16)
    pos = jnp.tile(jnp.arange(5), (2, 1))
    out = jit_site(enc, "embed")(params, x, pos)
    assert out.dtype == jnp.bfloat16
    want = (1.0 + sinusoidal(pos, 8)).astype(jnp.bfloat16)
    np.testing.assert_array_equal(np.asarray(out, np.float32), np.asarray(want, np.float32))


def test_none_has_no_sites_and_no_params():
    enc = encoders.get("none")
    assert enc.sites() == ()
    assert jit_site(enc, "init")(jax.random.key(0), DIMS) == {}
    assert enc.scores_only_through_qk


def test_learned_lookup_and_bounds():
    enc = encoders.get("learned")
    params = jit_site(enc, "init")(jax.random.key(1), DIMS)
    table = np.asarray(params["table"])
    assert table.shape == (16, 8)
    assert 0.01 < table.std() < 0.03
    x = jax.random.normal(jax.random.key(2), (2, 4, 8))
    pos = jnp.asarray([[0, 1, 2, 3], [5, 0, 15, 7]])
    out = np.asarray(jit_site(enc, "embed")(params, x, pos))
    np.testing.assert_allclose(out, np.asarray(x) + table[np.asarray(pos)], rtol=1e-6)
    assert enc.max_positions(DIMS) == 16
    past = jit_site(enc, "embed")(params, x, jnp.full((2, 4), 16))
    assert np.isnan(np.asarray(past)).all()


def test_multiplicative_is_x_times_one_plus_p():
    enc = encoders.get("multiplicative")
    params = jit_site(enc, "init")(jax.random.key(3), DIMS)
    table = np.asarray(params["table"])
    x = jax.random.normal(jax.random.key(4), (1, 3, 8))
    pos = jnp.asarray([[2, 9, 4]])
    out = np.asarray(jit_site(enc, "embed")(params, x, pos))
    np.testing.assert_allclose(out, np.asarray(x) * (1.0 + table[[2, 9, 4]]), rtol=1e-6)
    assert enc.max_positions(DIMS) == 16


def test_hierarchical_reproduces_table_below_n_and_extends_to_n_squared():
    n, alpha = 16, 0.4
    learned = encoders.get("learned")
    params = jit_site(learned, "init")(jax.random.key(5), DIMS)
    table = np.asarray(params["table"], np.float64)
    below = np.asarray(hierarchical_table(params["table"], jnp.arange(n), alpha))
    np.testing.assert_allclose(below, table, rtol=1e-5, atol=1e-7)
    u = (table - alpha * table[0]) / (1 - alpha)
    ks = np.arange(n * n)
    want = alpha * u[ks // n] + (1 - alpha) * u[ks % n]
    got = np.asarray(hierarchical_table(params["table"], jnp.asarray(ks), alpha))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert len(np.unique(got.round(6), axis=0)) == n * n
    assert np.isnan(np.asarray(hierarchical_table(params["table"], jnp.asarray([n * n])))).all()

    hier = encoders.get("hierarchical")
    assert hier.max_positions(DIMS) == n * n
    hier_params = jit_site(hier, "init")(jax.random.key(5), DIMS)
    assert jax.tree.map(jnp.shape, hier_params) == jax.tree.map(jnp.shape, params)
    x = jnp.zeros((1, n, 8))
    pos = jnp.arange(n)[None]
    np.testing.assert_allclose(
        np.asarray(jit_site(hier, "embed")(params, x, pos)),
        np.asarray(jit_site(learned, "embed")(params, x, pos)),
        atol=1e-6,
    )


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
def test_hierarchical_rejects_bad_alpha(alpha):
    with pytest.raises(ConfigError, match="alpha"):
        encoders.get("hierarchical", alpha=alpha).init(jax.random.key(0), DIMS)


def test_floater_finite_distinct_and_jittable():
    enc = encoders.get("floater", max_positions_hint=40, steps_per_position=2)
    params = jit_site(enc, "init")(jax.random.key(6), DIMS)
    x = jnp.zeros((2, 6, 8), jnp.bfloat16)
    pos = jnp.asarray([[0, 1, 2, 3, 4, 5], [39, 30, 20, 10, 1, 0]])
    eager = enc.embed(params, x, pos)
    jitted = jit_site(enc, "embed")(params, x, pos)
    assert eager.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(eager, np.float32), np.asarray(jitted, np.float32))

    table = np.asarray(jax.jit(floater_table, static_argnums=(1, 2, 3))(params, 40, 0.1, 2))
    assert table.shape == (40, 8) and np.isfinite(table).all()
    np.testing.assert_allclose(table[0], np.asarray(params["p0"]), rtol=1e-6)
    gaps = np.linalg.norm(table[:, None] - table[None], axis=-1) + np.eye(40)
    assert gaps.min() > 1e-6
    assert np.abs(table).max() < 1.0  # small h keeps p near p(0)

    grads = jax.jit(jax.grad(lambda p: floater_table(p, 12, 0.1, 1).sum()))(params)
    assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grads))


def test_floater_rk4_matches_a_fine_integration():
    params = jit_site(encoders.get("floater"), "init")(jax.random.key(7), DIMS)
    params = {**params, "w_out": params["w_out"] * 50.0}  # a visibly curved trajectory
    coarse = np.asarray(floater_table(params, 20, 0.1, 1))
    fine = np.asarray(floater_table(params, 20, 0.1, 8))
    np.testing.assert_allclose(coarse, fine, atol=1e-5)
    assert np.abs(fine[-1] - fine[0]).max() > 1e-2


def test_floater_zero_initial_state():
    enc = encoders.get("floater", learn_initial=False)
    params = jit_site(enc, "init")(jax.random.key(8), DIMS)
    assert "p0" not in params
    np.testing.assert_array_equal(np.asarray(floater_table(params, 3))[0], np.zeros(8))


def test_randomize_positions_sorted_distinct_in_range_deterministic():
    pos = jnp.tile(jnp.arange(10), (4, 1))
    out = np.asarray(randomize_positions(jax.random.key(9), pos, 2048))
    assert out.shape == (4, 10) and out.dtype == np.asarray(pos).dtype
    assert (np.diff(out, axis=1) > 0).all()
    assert out.min() >= 0 and out.max() < 2048
    again = np.asarray(randomize_positions(jax.random.key(9), pos, 2048))
    np.testing.assert_array_equal(out, again)
    other = np.asarray(randomize_positions(jax.random.key(10), pos, 2048))
    assert not np.array_equal(out, other)
    assert len({tuple(row) for row in out}) == 4  # rows draw independently


def test_randomize_positions_draws_each_packed_segment_on_its_own():
    packed = jnp.asarray([[0, 1, 2, 0, 1, 2, 3, 0]])
    segments = jnp.asarray([[1, 1, 1, 2, 2, 2, 2, 3]])
    out = np.asarray(randomize_positions(jax.random.key(11), packed, 100, segments))[0]
    assert (np.diff(out[0:3]) > 0).all() and (np.diff(out[3:7]) > 0).all()
    assert len(set(out)) == 8  # segments of a row take disjoint draws
    assert out.min() >= 0 and out.max() < 100


def test_randomize_positions_short_segment_spans_the_whole_range():
    # A 2-token segment packed after a long one must draw like a 2-token sequence: its larger
    # position is the max of 2 uniform draws from [0, M), mean ~ 2M/3, not the row's 2
    # smallest draws (mean ~ 2M/(L+1)).
    m, length = 1000, 64
    positions = jnp.concatenate([jnp.arange(length - 2), jnp.arange(2)])[None]
    segments = jnp.asarray([[1] * (length - 2) + [2, 2]])
    keys = jax.random.split(jax.random.key(0), 400)
    draw = jax.vmap(lambda k: randomize_positions(k, positions, m, segments)[0, -1])
    assert abs(float(np.mean(np.asarray(draw(keys)))) / m - 2 / 3) < 0.05


def test_randomize_positions_full_range_and_errors():
    out = np.asarray(randomize_positions(jax.random.key(12), jnp.arange(8)[None], 8))
    np.testing.assert_array_equal(out[0], np.arange(8))
    with pytest.raises(ConfigError, match="max_position=5"):
        randomize_positions(jax.random.key(0), jnp.arange(8)[None], 5)


def test_shift_positions():
    pos = jnp.arange(4, dtype=jnp.int32)[None]
    out = shift_positions(pos, 100)
    assert out.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(out), [[100, 101, 102, 103]])


def test_unknown_hyperparameter_is_a_config_error_with_suggestion():
    with pytest.raises(ConfigError, match="did you mean 'base'"):
        encoders.get("sinusoidal", bse=10.0)
    with pytest.raises(ConfigError, match="did you mean 'delta'"):
        encoders.get("floater", delt=0.5)
    with pytest.raises(ConfigError, match="did you mean 'learned'"):
        encoders.get("learnd")


@pytest.mark.parametrize(
    "name, hparams, match",
    [
        ("floater", {"delta": 0.0}, "delta"),
        ("floater", {"hidden": 0}, "hidden"),
        ("floater", {"steps_per_position": 0}, "steps_per_position"),
        ("sinusoidal", {"base": 1.0}, "base"),
        ("sinusoidal", {"spacing": "t5"}, "^unknown sinusoidal spacing 't5'; valid: t2t, vaswani$"),
    ],
)
def test_bad_hyperparameters(name, hparams, match):
    with pytest.raises(ConfigError, match=match):
        encoders.get(name, **hparams).init(jax.random.key(0), DIMS)


def test_encodings_are_hashable():
    for name in ("none", "learned", "sinusoidal", "multiplicative", "hierarchical", "floater"):
        enc = encoders.get(name)
        assert hash(enc) == hash(encoders.get(name))
        assert enc.sites() in ((), ("embed",))


def _replaced_copies(base):
    """(helper, copy) pairs: the frequency copies inverse_frequencies replaced, as written.

    The sinusoid's `base ** -(arange(0, d, 2) / d)` for every dim 2..256, RoPE's
    `power(base, -(arange(d // 2) * (2 / d)))` for every even dim.
    """
    from posjax.encoders.base import inverse_frequencies

    b = jnp.asarray(base, jnp.float32)

    def sinusoid(d):
        return b ** -(jnp.arange(0, d, 2, dtype=jnp.float32) / d)

    def rope(d):
        return jnp.power(b, -(jnp.arange(d // 2, dtype=jnp.float32) * (2 / d)))

    return [(inverse_frequencies(d, base), sinusoid(d)) for d in range(2, 257)] + [
        (inverse_frequencies(d, base), rope(d)) for d in range(2, 257, 2)
    ]


def test_one_frequency_helper_reproduces_the_copies_it_replaced_bit_for_bit():
    # Trained results must reproduce to the last digit. Under jit as the models run it (base
    # traced, as dynamic NTK passes it), and eagerly for a few dims.
    from posjax.encoders.base import inverse_frequencies

    replaced = jax.jit(_replaced_copies)
    for base in (10000.0, 500.0):
        for new, old in replaced(jnp.float32(base)):
            np.testing.assert_array_equal(np.asarray(new), np.asarray(old))
    for dim in (2, 7, 96, 100, 128):
        old = jnp.power(jnp.float32(500.0), -(jnp.arange(0, dim, 2, dtype=jnp.float32) / dim))
        np.testing.assert_array_equal(np.asarray(inverse_frequencies(dim, 500.0)), np.asarray(old))
    # The analysis's numpy float64 copy, for the even dims it accepts.
    for dim in range(2, 257, 2):
        for theta in (10000.0, 500.0):
            got = inverse_frequencies(dim, theta, xp=np)
            assert got.dtype == np.float64
            np.testing.assert_array_equal(got, theta ** (-2.0 * np.arange(dim // 2) / dim))
    assert inverse_frequencies(5, 10.0).shape == (3,)  # ceil(d / 2), as the sinusoid needs
    assert inverse_frequencies(5, 10.0).dtype == jnp.float32


def test_sinusoidal_half_layout_is_sines_then_cosines():
    # RoFormer's and x-transformers' code: concat(sin, cos); the paper interleaves them.
    pos = jnp.arange(7)
    half = np.asarray(sinusoidal(pos, 8, layout="half"))
    inter = np.asarray(sinusoidal(pos, 8))
    np.testing.assert_array_equal(half[:, :4], inter[:, 0::2])
    np.testing.assert_array_equal(half[:, 4:], inter[:, 1::2])
    enc = encoders.get("sinusoidal", layout="half")
    x = jnp.zeros((1, 7, 8))
    np.testing.assert_array_equal(np.asarray(enc.embed({}, x, pos[None]))[0], half)
    with pytest.raises(ConfigError, match="unknown sinusoidal layout 'halves'"):
        encoders.get("sinusoidal", layout="halves").check(Dims(8, 2, 4))


def test_positions_below_zero_read_nan_from_a_learned_or_hierarchical_table():
    """jnp.take read position -1 as the table's last row, where the module promises NaN
    outside the table rather than a silently reused row."""
    enc = encoders.get("learned")
    params = enc.init(jax.random.key(0), Dims(4, 1, 4, 8))
    out = np.asarray(enc.embed(params, jnp.zeros((1, 3, 4)), jnp.asarray([[8, -1, 3]])))
    assert np.isnan(out[0, :2]).all() and np.isfinite(out[0, 2]).all()
    table = jnp.arange(12.0).reshape(3, 4)
    extended = np.asarray(hierarchical_table(table, jnp.asarray([-1, 0, 8, 9])))
    assert np.isnan(extended[0]).all() and np.isnan(extended[3]).all()
    np.testing.assert_allclose(extended[1], table[0])


def test_a_sinusoid_base_at_or_below_zero_is_refused():
    with pytest.raises(ConfigError, match=r"sinusoidal base=0.0 must be > 0"):
        sinusoidal(jnp.arange(2), 4, base=0.0)
