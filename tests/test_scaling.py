"""Length-extension frequency maps (PI, NTK, dynamic NTK, YaRN, llama3) and log-n scaling."""

import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posjax.encoders import Dims, get, scaling
from posjax.encoders.rotary import apply_rotary, attention_factor, frequencies
from posjax.errors import ConfigError
from posjax.eval.methods import apply_methods

FAST = settings(max_examples=25, deadline=None)
TRAIN = 512


def _cfg(kind, factor, **extra):
    # "default" reads no factor, so a factor in its block is refused.
    factor = {} if kind == "default" else {"factor": factor}
    return {"rope_type": kind, **factor, "original_max_position_embeddings": TRAIN, **extra}


def _plain(dim, theta=10000.0):
    return theta ** (-2.0 * np.arange(dim // 2) / dim)


@pytest.mark.parametrize("kind", sorted(scaling.SCALINGS))
@pytest.mark.parametrize("dim", [8, 64, 128])
def test_every_map_is_plain_rope_at_factor_one(kind, dim):
    # dynamic at factor 1 still grows its base past L_train (HF formula), so it is checked at
    # lengths up to L_train, where it is plain at any factor.
    # LongRoPE's factor one is every pair's factor at one, long and short.
    ones = ({"long_factor": [1.0] * (dim // 2), "short_factor": [1.0] * (dim // 2)}
            if kind == "longrope" else {})
    got = frequencies(dim, 10000.0, _cfg(kind, 1.0, **ones), seq_len=TRAIN)
    np.testing.assert_allclose(np.asarray(got), _plain(dim), rtol=1e-6)
    assert attention_factor(_cfg(kind, 1.0, **ones)) == 1.0


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
    # DeepSeek's pair: the whole factor its model applies, mscale(s, mscale) (not HF's ratio).
    deepseek = {**cfg, "mscale": 0.5, "mscale_all_dim": 1.0}
    assert attention_factor(deepseek) == pytest.approx(0.05 * math.log(s) + 1)
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


def test_longrope_switches_to_its_long_factors_past_the_training_length_only():
    pairs = 8
    block = _cfg("longrope", 4.0, long_factor=[2.0] * pairs, short_factor=[1.5] * pairs)
    at = lambda length: np.asarray(frequencies(2 * pairs, 10000.0, block, seq_len=length))
    np.testing.assert_allclose(at(TRAIN), _plain(2 * pairs) / 1.5, rtol=1e-6)
    np.testing.assert_allclose(at(TRAIN + 1), _plain(2 * pairs) / 2.0, rtol=1e-6)
    assert attention_factor(block) == pytest.approx(math.sqrt(1 + math.log(4) / math.log(TRAIN)))
    with pytest.raises(ConfigError, match="long_factor has 3 factors but the rotary dim 16 has "
                                          "8 pairs: give one factor per pair"):
        frequencies(16, 10000.0, {**block, "long_factor": [1.0, 1.0, 1.0]})


def test_unknown_type_lists_the_valid_types():
    with pytest.raises(ConfigError) as err:
        frequencies(64, scaling={"rope_type": "ntk_by_parts", "factor": 2.0})
    assert str(err.value).endswith("valid: default, dynamic, linear, llama3, longrope, ntk, yarn")


GOLDEN = json.loads((Path(__file__).parent / "golden" / "hf_rope.json").read_text())


def _case_id(case):
    length = f"-L{case['seq_len']}" if "seq_len" in case else ""
    return f"{case['name']}-d{case['head_dim']}{length}"


@pytest.mark.parametrize("case", GOLDEN["cases"], ids=_case_id)
def test_frequencies_and_attention_factor_match_hugging_face(case):
    # tests/golden/hf_rope.json: transformers' own init functions (scripts/golden_hf_rope.py).
    # The block goes to the RoPE encoding as is, with the theta and fraction it names.
    enc = get("rope", theta=case["theta"], fraction=case["fraction"], scaling=case["scaling"])
    head_dim = case["head_dim"]
    enc.check(Dims(d_model=2 * head_dim, num_heads=2, head_dim=head_dim))
    got = frequencies(enc.rot_dim(head_dim), enc.theta, enc.scaling, case.get("seq_len"))
    # Both sides are float32, a few roundings apart (HF writes 1 / base^e, posjax base^-e, and
    # blends YaRN's two sets in another order): at most 13 ulps (DeepSeek's factor 40).
    np.testing.assert_allclose(np.asarray(got), case["inv_freq"], rtol=2e-6)
    factor = attention_factor(enc.scaling)
    if "logit_factor" in case:
        # DeepSeek: q and k each carry the factor, so q.k gets the total its attention applies.
        assert factor**2 == pytest.approx(case["logit_factor"], rel=1e-9)
    else:
        assert factor == pytest.approx(case["attention_factor"], rel=1e-9)


def test_deepseek_total_qk_multiplier_is_hugging_faces_while_the_rotary_factor_alone_is_not():
    """posjax puts DeepSeek's whole factor on q and k; Hugging Face splits it between the rotary
    factor and its attention's softmax scale. The README and RoPE's docstring quote these
    numbers (DeepSeek-V3: 1.8739 in total, 1.3689 against HF's 1.0 on the rotation)."""
    cases = [case for case in GOLDEN["cases"] if "logit_factor" in case]
    assert {case["name"] for case in cases} == {"deepseek_v3", "deepseek_mscale_differs"}
    for case in cases:
        factor = attention_factor(get("rope", scaling=case["scaling"]).scaling)
        assert factor**2 == pytest.approx(case["logit_factor"], rel=1e-9)
        assert factor - case["attention_factor"] > 0.3
    v3 = next(case for case in cases if case["name"] == "deepseek_v3")
    assert round(v3["logit_factor"], 4) == 1.8739
    assert round(attention_factor(get("rope", scaling=v3["scaling"]).scaling), 4) == 1.3689
    assert v3["attention_factor"] == 1.0
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    rope_row = next(line for line in readme.splitlines() if line.startswith("| `rope`, `xpos` |"))
    for doc in (rope_row, get("rope").__doc__):
        assert "1.8739" in doc and "1.3689" in doc and "mscale_all_dim" in doc
        assert "fresh Hugging Face module's first call" in " ".join(doc.split())


def test_golden_file_records_its_source():
    assert GOLDEN["transformers"] and GOLDEN["torch"]
    assert all("ROPE_INIT_FUNCTIONS" in c["function"] or c["name"] == "default_v5"
               for c in GOLDEN["cases"])


def test_rope_theta_and_partial_rotary_factor_equal_to_the_encoding_are_honoured():
    block = {"rope_type": "default", "rope_theta": 500000, "partial_rotary_factor": 0.5}
    enc = get("rope", theta=500000.0, fraction=0.5, scaling=block)
    enc.check(Dims(d_model=128, num_heads=2, head_dim=64))
    got = frequencies(enc.rot_dim(64), enc.theta, enc.scaling)
    np.testing.assert_allclose(np.asarray(got), _plain(32, 500000.0), rtol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "block", "message"),
    [
        ({}, {"rope_type": "default", "rope_theta": 500000},
         "rope_scaling has rope_theta=500000 but theta=10000: set theta=500000 (encoding "
         "hyperparameter) or drop rope_theta"),
        ({"theta": 500000.0}, {"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.25},
         "rope_scaling has partial_rotary_factor=0.25 but fraction=1: set fraction=0.25 (encoding "
         "hyperparameter) or drop partial_rotary_factor"),
    ],
)
def test_rope_theta_or_partial_rotary_factor_unlike_the_encoding_is_refused(kwargs, block, message):
    with pytest.raises(ConfigError) as err:
        get("rope", **kwargs, scaling=block)
    assert str(err.value) == message


def test_a_bare_frequency_call_refuses_another_rope_theta():
    with pytest.raises(ConfigError, match="rope_theta=500000 but theta=10000"):
        frequencies(64, 10000.0, {"rope_type": "llama3", "rope_theta": 500000.0})


@pytest.mark.parametrize(
    ("kind", "key", "accepted"),
    [
        ("default", "factor", "default accepts rope_type, type"),
        ("default", "mrope_section", "default accepts rope_type, type"),
        ("linear", "attention_factor", "linear accepts factor, rope_type"),
        ("ntk", "beta_fast", "ntk accepts factor, rope_type"),
        ("dynamic", "mscale", "dynamic accepts factor, rope_type"),
        ("yarn", "low_freq_factor", "yarn accepts factor, attention_factor, beta_fast"),
        ("llama3", "beta_slow", "llama3 accepts factor, low_freq_factor, high_freq_factor"),
        ("yarn", "finetuned", "yarn accepts factor"),
    ],
)
def test_a_key_the_map_does_not_read_is_refused(kind, key, accepted):
    cfg = {**_cfg(kind, 2.0), key: 1.0}
    for use in (lambda: frequencies(64, scaling=cfg), lambda: get("rope", scaling=cfg),
                lambda: attention_factor(cfg)):
        with pytest.raises(ConfigError) as err:
            use()
        text = str(err.value)
        assert text.startswith(f"rope_scaling type {kind!r} does not read {key!r}: drop it; ")
        assert accepted in text and "max_position_embeddings" in text and "\n" not in text


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"rope_type": "yarn", "type": "linear", "factor": 2.0},
         "rope_type='yarn' but type='linear': drop 'type'"),
        ({"type": "dynamic", "factor": 2.0},
         "type 'dynamic' needs 'original_max_position_embeddings': add the model's training "
         "length \\(its config's max_position_embeddings\\)"),
        (_cfg("dynamic", 2.0, max_position_embeddings=2 * TRAIN),
         "dynamic has original_max_position_embeddings=512 but max_position_embeddings=1024"),
        (_cfg("yarn", 2.0, mscale=1.0), "has mscale=1.0 and mscale_all_dim=None: DeepSeek's pair"),
        (_cfg("yarn", 2.0, mscale_all_dim=1.0), "has mscale=None and mscale_all_dim=1.0"),
        (_cfg("yarn", 2.0, mscale=0, mscale_all_dim=1.0), "needs both, > 0"),
        (_cfg("yarn", 2.0, mscale=1.0, mscale_all_dim=1.0, attention_factor=1.2),
         "has attention_factor and mscale/mscale_all_dim: .*keep one"),
        (_cfg("yarn", 2.0, truncate="false"), "'truncate' must be true or false"),
        (_cfg("yarn", 2.0, beta_fast=-4), "beta_fast=-4 must be > 0"),
        (_cfg("yarn", 2.0, original_max_position_embeddings="4k"),
         "'original_max_position_embeddings' must be a number"),
        ({"rope_type": "linear", "factor": 2.0, "max_position_embeddings": 0},
         "max_position_embeddings=0 must be the training length"),
    ],
)
def test_a_misread_field_is_a_one_line_config_error(cfg, message):
    with pytest.raises(ConfigError, match=message) as err:
        get("rope", scaling=cfg)
    assert "\n" not in str(err.value)


def test_unequal_deepseek_mscales_need_full_rotary():
    cfg = _cfg("yarn", 40.0, mscale=0.707, mscale_all_dim=1.0)
    get("rope", scaling=cfg)
    with pytest.raises(ConfigError, match="mscale=0.707 != mscale_all_dim=1 needs fraction=1.0"):
        get("rope", fraction=0.5, scaling=cfg)
    get("rope", fraction=0.5, scaling={**cfg, "mscale": 1.0})


@pytest.mark.parametrize("kind", ["dynamic", "yarn", "llama3"])
def test_max_position_embeddings_is_the_training_length_fallback(kind):
    # Hugging Face reads the model's max_position_embeddings where the block has no
    # original_max_position_embeddings (dynamic: always).
    given = {"rope_type": kind, "factor": 4.0}
    fallback = {**given, "max_position_embeddings": TRAIN}
    for length in (None, 3 * TRAIN):
        np.testing.assert_array_equal(
            np.asarray(frequencies(64, scaling=fallback, seq_len=length)),
            np.asarray(frequencies(64, scaling=_cfg(kind, 4.0), seq_len=length)),
        )
    both = {**fallback, "original_max_position_embeddings": TRAIN}
    np.testing.assert_array_equal(np.asarray(frequencies(64, scaling=both)),
                                  np.asarray(frequencies(64, scaling=fallback)))


def test_a_null_yarn_factor_is_the_length_ratio():
    # Hugging Face: factor = max_position_embeddings / original_max_position_embeddings.
    ratio = {"rope_type": "yarn", "factor": None, "max_position_embeddings": 8 * TRAIN,
             "original_max_position_embeddings": TRAIN}
    explicit = _cfg("yarn", 8.0)
    np.testing.assert_array_equal(np.asarray(frequencies(64, scaling=ratio)),
                                  np.asarray(frequencies(64, scaling=explicit)))
    assert attention_factor(ratio) == attention_factor(explicit)


def test_yarn_betas_of_zero_are_the_defaults():
    # Hugging Face writes `config.get("beta_fast") or 32`, `... or 1`.
    zero = np.asarray(frequencies(64, scaling=_cfg("yarn", 4.0, beta_fast=0, beta_slow=0)))
    default = np.asarray(frequencies(64, scaling=_cfg("yarn", 4.0, beta_fast=32, beta_slow=1)))
    np.testing.assert_array_equal(zero, default)


def test_logn_scale():
    pos = jnp.arange(2048)
    got = np.asarray(scaling.logn_scale(pos, 512))
    assert got.dtype == np.float32
    # n = position + 1, so the last trained position (511) has n = L_train and scale exactly 1.
    assert (got[:512] == 1.0).all()
    np.testing.assert_allclose(got[512:], np.log(np.arange(513, 2049)) / np.log(512), rtol=1e-6)
    with pytest.raises(ConfigError, match="training length >= 2"):
        scaling.logn_scale(pos, 1)


def test_dynamic_at_evaluation_grows_its_factor_with_the_length_once():
    """`--rope_scaling=dynamic` is NTK at factor L / L_train (Hugging Face's dynamic at its
    configured factor 1), not a factor L / L_train grown again by the length."""
    train_len, length = 128, 512
    dynamic = apply_methods(get("rope"), "dynamic", train_len, length)
    ntk = apply_methods(get("rope"), "ntk", train_len, length)
    assert dict(dynamic.scaling)["factor"] == 1.0 and dict(ntk.scaling)["factor"] == 4.0
    np.testing.assert_allclose(scaling.scaled_inv_freq(64, 10000.0, dynamic.scaling, length),
                               scaling.scaled_inv_freq(64, 10000.0, ntk.scaling), rtol=1e-6)
    explicit = apply_methods(get("rope"), "dynamic:2", train_len, length)
    assert dict(explicit.scaling)["factor"] == 2.0
