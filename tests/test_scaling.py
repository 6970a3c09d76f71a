"""Length-extension frequency maps (PI, NTK, dynamic NTK, YaRN, llama3) and log-n scaling."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posjax.encoders import get, scaling
from posjax.encoders.rotary import apply_rotary, attention_factor, frequencies
from posjax.errors import ConfigError

FAST = settings(max_examples=25, deadline=None)
TRAIN = 512


def _cfg(kind, factor, **extra):
    return {"rope_type": kind, "factor": factor, "original_max_position_embeddings": TRAIN, **extra}


def _plain(dim, theta=10000.0):
    return theta ** (-2.0 * np.arange(dim // 2) / dim)


@pytest.mark.parametrize("kind", sorted(scaling.SCALINGS))
@pytest.mark.parametrize("dim", [8, 64, 128])
def test_every_map_is_plain_rope_at_factor_one(kind, dim):
    # dynamic at factor 1 still grows its base past L_train (HF formula), so it is checked at
    # lengths up to L_train, where it is plain at any factor.
    got = frequencies(dim, 10000.0, _cfg(kind, 1.0), seq_len=TRAIN)
    np.testing.assert_allclose(np.asarray(got), _plain(dim), rtol=1e-6)
    assert attention_factor(_cfg(kind, 1.0)) == 1.0


def test_plain_frequencies():
    np.testing.assert_allclose(np.asarray(frequencies(8, 10000.0)), [1.0, 0.1, 0.01, 0.001])
    np.testing.assert_allclose(np.asarray(frequencies(128, 500.0)), _plain(128, 500.0), rtol=1e-6)


@FAST
@given(s=st.floats(1.0, 64.0), seed=st.integers(0, 2**16))
def test_position_interpolation_equals_positions_over_s(s, seed):
    x = jnp.asarray(np.random.RandomState(seed).standard_normal((1, 6, 2, 32)), jnp.float32)
    pos = jnp.array([[0, 1, 7, 100, 511, 2047]])
    scaled = apply_rotary(x, pos, frequencies(32, scaling=_cfg("linear", s)))
    interpolated = apply_rotary(x, pos / s, frequencies(32))
    # Angles reach 2047 rad, where one float32 rounding is 1.2e-4 rad; the two orders of
    # operations differ by a few roundings (s = 1.03125, seed 141: 2.9e-4 on |x| ~ 2).
    np.testing.assert_allclose(np.asarray(scaled), np.asarray(interpolated), atol=6e-4)


@pytest.mark.parametrize("s", [2.0, 8.0])
def test_ntk_raises_the_base(s):
    d = 64
    base = 10000.0 * s ** (d / (d - 2))
    got = np.asarray(frequencies(d, 10000.0, {"rope_type": "ntk", "factor": s}))
    np.testing.assert_allclose(got, _plain(d, base), rtol=1e-5)
    # The exponent d/(d-2) is chosen so the lowest frequency is exactly interpolated by s.
    np.testing.assert_allclose(got[-1], _plain(d)[-1] / s, rtol=1e-5)
    assert got[0] == 1.0


def test_dynamic_ntk():
    d, s = 64, 4.0
    cfg = _cfg("dynamic", s)
    for length in (1, 100, TRAIN, None):
        np.testing.assert_allclose(
            np.asarray(frequencies(d, scaling=cfg, seq_len=length)), _plain(d), rtol=1e-6
        )
    length = 4 * TRAIN
    base = 10000.0 * ((s * length / TRAIN) - (s - 1)) ** (d / (d - 2))
    np.testing.assert_allclose(
        np.asarray(frequencies(d, scaling=cfg, seq_len=length)), _plain(d, base), rtol=1e-5
    )
    # The current length may be traced.
    traced = jax.jit(lambda n: frequencies(d, scaling=cfg, seq_len=n))(jnp.int32(length))
    np.testing.assert_allclose(np.asarray(traced), _plain(d, base), rtol=1e-5)


def test_yarn_ramp_and_attention_factor():
    # d = 128, L_train = 4096, theta = 10000: the pair turning beta times over L_train is
    # i(beta) = 128 ln(4096 / (2 pi beta)) / (2 ln 10000):
    # i(32) = 128 * ln(20.37) / 18.42 = 20.94 -> floor 20; i(1) = 128 * ln(651.9) / 18.42 = 45.03
    # -> ceil 46. So pairs 0..20 keep theta_i, pairs >= 46 are divided by s, between blend.
    s, d = 8.0, 128
    cfg = {"rope_type": "yarn", "factor": s, "original_max_position_embeddings": 4096}
    got = np.asarray(frequencies(d, 10000.0, cfg))
    plain = _plain(d)
    np.testing.assert_allclose(got[:21], plain[:21], rtol=1e-6)
    np.testing.assert_allclose(got[46:], plain[46:] / s, rtol=1e-6)
    gamma = 1 - (np.arange(21, 46) - 20) / 26
    np.testing.assert_allclose(
        got[21:46], (1 - gamma) * plain[21:46] / s + gamma * plain[21:46], rtol=1e-5
    )
    assert attention_factor(cfg) == pytest.approx(0.1 * math.log(s) + 1)
    assert attention_factor({**cfg, "attention_factor": 1.5}) == 1.5
    assert attention_factor({**cfg, "mscale": 1.0, "mscale_all_dim": 1.0}) == 1.0
    assert attention_factor(_cfg("linear", s)) == 1.0


def test_llama3_frequency_bands():
    # Defaults: s = 8, low = 1, high = 4, L_old = 8192, so wavelengths > 8192 are divided by 8,
    # wavelengths < 2048 kept, and in between blended by a = (8192 / wavelength - 1) / 3.
    d, theta = 128, 500000.0
    got = np.asarray(frequencies(d, theta, {"rope_type": "llama3"}))
    plain = _plain(d, theta)
    wavelength = 2 * np.pi / plain
    low, high = wavelength > 8192, wavelength < 2048
    mid = ~low & ~high
    assert low.any() and high.any() and mid.any()
    np.testing.assert_allclose(got[high], plain[high], rtol=1e-6)
    np.testing.assert_allclose(got[low], plain[low] / 8, rtol=1e-6)
    a = (8192 / wavelength[mid] - 1) / 3
    np.testing.assert_allclose(got[mid], (1 - a) * plain[mid] / 8 + a * plain[mid], rtol=1e-5)


def test_older_type_key_and_tuple_form_are_accepted():
    cfg = {"type": "linear", "factor": 2.0}
    expected = _plain(32) / 2
    np.testing.assert_allclose(np.asarray(frequencies(32, scaling=cfg)), expected, rtol=1e-6)
    frozen = scaling.freeze(cfg)
    assert frozen == (("factor", 2.0), ("type", "linear"))
    np.testing.assert_allclose(np.asarray(frequencies(32, scaling=frozen)), expected, rtol=1e-6)
    assert get("rope", scaling=cfg).scaling == frozen


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"rope_type": "quadratic", "factor": 2.0}, "unknown rope_scaling type 'quadratic'"),
        ({"factor": 2.0}, "has no 'rope_type'"),
        ({"rope_type": "linear"}, "needs 'factor'"),
        ({"rope_type": "yarn", "factor": 2.0}, "needs 'original_max_position_embeddings'"),
        ({"rope_type": "linear", "factor": 0.5}, "factor 0.5 < 1"),
        ({"rope_type": "linear", "factor": "2"}, "must be a number"),
    ],
)
def test_bad_scaling_is_a_one_line_config_error(cfg, message):
    with pytest.raises(ConfigError, match=message) as err:
        frequencies(64, scaling=cfg)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=message):
        get("rope", scaling=cfg)


def test_unknown_type_lists_the_valid_types():
    with pytest.raises(ConfigError) as err:
        frequencies(64, scaling={"rope_type": "longrope", "factor": 2.0})
    assert str(err.value).endswith("valid: default, dynamic, linear, llama3, ntk, yarn")


def test_logn_scale():
    pos = jnp.arange(2048)
    got = np.asarray(scaling.logn_scale(pos, 512))
    assert got.dtype == np.float32
    # n = position + 1, so the last trained position (511) has n = L_train and scale exactly 1.
    assert (got[:512] == 1.0).all()
    np.testing.assert_allclose(got[512:], np.log(np.arange(513, 2049)) / np.log(512), rtol=1e-6)
    with pytest.raises(ConfigError, match="training length >= 2"):
        scaling.logn_scale(pos, 1)
