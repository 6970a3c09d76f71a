"""Relative encodings (logits and content-position sites): golden values, naive references,
shift invariance, dtypes and errors."""

import functools
import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posjax import encoders
from posjax.encoders.absolute import sinusoidal
from posjax.encoders.base import Dims
from posjax.encoders.relative import alibi_slopes, deberta_log_bucket, t5_bucket
from posjax.errors import ConfigError

H, DH, D = 3, 8, 16
GOLDEN = Path(__file__).parent / "golden"
DIMS = Dims(d_model=D, num_heads=H, head_dim=DH, max_len=64)
FAST = settings(max_examples=25, deadline=None)


@functools.cache
def jit_site(enc, site):
    """enc.<site> jitted once per encoding (eager dispatch compiles every op separately);
    the bias site for the H heads of DIMS."""
    if site == "bias":
        return jax.jit(lambda params, q_pos, k_pos: enc.bias(params, q_pos, k_pos, H))
    return jax.jit(getattr(enc, site), static_argnums=(1,) if site == "init" else ())


LQ, LK = 5, 7
BIAS_NAMES = ("t5", "alibi", "kerple_log", "kerple_power")
SCORE_NAMES = ("shaw", "xl", "deberta")


@functools.cache
def build(name):
    """The encoding with default hyperparameters and perturbed parameters."""
    enc = encoders.get(name)
    params = jit_site(enc, "init")(jax.random.key(0), DIMS)
    # Large enough values everywhere that every term of the formula is exercised.
    rng = np.random.default_rng(0)
    params = jax.tree.map(
        lambda a: a + 0.3 * rng.standard_normal(a.shape, np.float32) if a.ndim else a, params
    )
    return enc, params


def qk(dtype=jnp.float32, seed=1):
    kq, kk = jax.random.split(jax.random.key(seed))
    return (
        jax.random.normal(kq, (LQ, DH)).astype(dtype),
        jax.random.normal(kk, (LK, DH)).astype(dtype),
    )


def positions(seed=2, high=40):
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.integers(0, high, LQ)), jnp.asarray(rng.integers(0, high, LK))


# --- T5 -------------------------------------------------------------------------------


def test_t5_bucket_golden_bidirectional():
    golden = {**{n: n for n in range(8)}, 8: 8, 11: 8, 12: 9, 15: 9, 16: 10, 22: 10, 23: 11}
    golden[31] = 11
    for n, bucket in golden.items():
        assert int(t5_bucket(jnp.asarray(-n))) == bucket, n  # key before query: r <= 0
        if n > 0:
            assert int(t5_bucket(jnp.asarray(n))) == 16 + bucket, n  # the other half
    r = jnp.arange(1, 300)
    assert set(np.asarray(t5_bucket(r))) <= set(range(16, 32))
    assert set(np.asarray(t5_bucket(-r))) <= set(range(0, 16))
    assert int(t5_bucket(jnp.asarray(-1000))) == 15 and int(t5_bucket(jnp.asarray(1000))) == 31


def test_t5_bucket_causal():
    future = t5_bucket(jnp.arange(0, 50), bidirectional=False)
    np.testing.assert_array_equal(np.asarray(future), 0)
    past = np.asarray(t5_bucket(-jnp.arange(0, 300), bidirectional=False))
    np.testing.assert_array_equal(past[:16], np.arange(16))
    assert (np.diff(past) >= 0).all() and past.max() == 31
    # Every bucket is used: all 32 serve the past.
    assert set(past) == set(range(32))
    # max_exact = 16: 16 + floor(log(n / 16) / log(128 / 16) * 16), capped at 31, by hand.
    for n in (16, 20, 50, 112, 113, 128, 1000):
        want = min(16 + math.floor(math.log(n / 16) / math.log(8) * 16), 31)
        assert int(t5_bucket(jnp.asarray(-n), bidirectional=False)) == want, n
    assert past[112] == 30 and past[113] == 31


def test_t5_bias_is_table_lookup():
    enc, params = build("t5")
    q_pos, k_pos = positions()
    bias = np.asarray(jit_site(enc, "bias")(params, q_pos, k_pos))
    assert bias.shape == (H, LQ, LK) and bias.dtype == np.float32
    buckets = np.asarray(t5_bucket(k_pos[None, :] - q_pos[:, None]))
    np.testing.assert_allclose(bias, np.asarray(params["table"]).T[:, buckets], rtol=1e-6)


def test_t5_scale_multiplies_the_bias_and_its_table_exactly():
    """x-transformers' T5RelativePositionBias: bias * sqrt(head_dim); the flash kernel's
    table is scaled alike."""
    enc, params = build("t5")
    scaled = encoders.get("t5", scale=math.sqrt(32))
    q_pos, k_pos = positions()
    want = math.sqrt(32) * np.asarray(enc.bias(params, q_pos, k_pos, H))
    np.testing.assert_array_equal(np.asarray(scaled.bias(params, q_pos, k_pos, H)), want)
    np.testing.assert_array_equal(np.asarray(scaled.bias_table(params, H, 140)),
                                  math.sqrt(32) * np.asarray(enc.bias_table(params, H, 140)))


def test_t5_init_std_sets_the_tables_std():
    """N(0, init_std^2) from the same key: 0.02 (posjax, default) or 1.0 (x-transformers'
    nn.Embedding)."""
    dims = Dims(d_model=D, num_heads=512, head_dim=DH)
    default = np.asarray(encoders.get("t5").init(jax.random.key(3), dims)["table"])
    unit = np.asarray(encoders.get("t5", init_std=1.0).init(jax.random.key(3), dims)["table"])
    np.testing.assert_allclose(unit * 0.02, default, rtol=1e-6)
    assert np.std(unit) == pytest.approx(1.0, rel=0.02) and abs(np.mean(unit)) < 0.02
    assert encoders.hparams("t5")["init_std"] == 0.02 and encoders.hparams("t5")["scale"] == 1.0


# --- DeBERTa --------------------------------------------------------------------------


def test_deberta_log_bucket_golden():
    bucket_size, max_position = 256, 512  # the paper's settings; mid = 128
    r = jnp.arange(-128, 129)
    np.testing.assert_array_equal(np.asarray(deberta_log_bucket(r, bucket_size, max_position)), r)
    # ceil(log(|r| / 128) / log(511 / 128) * 127) + 128, by hand.
    for magnitude, want in [(129, 129), (200, 169), (300, 207), (511, 255)]:
        assert int(deberta_log_bucket(jnp.asarray(magnitude), bucket_size, max_position)) == want
        assert int(deberta_log_bucket(jnp.asarray(-magnitude), bucket_size, max_position)) == -want
    big = np.asarray(deberta_log_bucket(jnp.arange(0, 5000), bucket_size, max_position))
    assert (np.diff(big) >= 0).all()


def test_deberta_index_is_clipped():
    enc = encoders.get("deberta", bucket_size=16, max_position=64)
    index = np.asarray(enc._index(jnp.arange(-10000, 10000)))
    assert index.min() == 0 and index.max() == 31
    assert (np.diff(index) >= 0).all()


# --- ALiBi ----------------------------------------------------------------------------


def test_alibi_slopes_golden():
    np.testing.assert_allclose(np.asarray(alibi_slopes(8)), [2.0**-k for k in range(1, 9)])
    np.testing.assert_allclose(
        np.asarray(alibi_slopes(6)), [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3]
    )
    twelve = [2.0 ** -(k + 1) for k in range(8)] + [2.0 ** -(k + 0.5) for k in range(4)]
    np.testing.assert_allclose(np.asarray(alibi_slopes(12)), twelve)
    np.testing.assert_allclose(np.asarray(alibi_slopes(1)), [2.0**-8])
    assert alibi_slopes(16).dtype == jnp.float32


def test_alibi_bias_is_minus_slope_times_distance():
    enc = encoders.get("alibi")
    params = jit_site(enc, "init")(jax.random.key(0), DIMS)
    q_pos, k_pos = positions()
    bias = np.asarray(jit_site(enc, "bias")(params, q_pos, k_pos))
    assert bias.shape == (H, LQ, LK) and bias.dtype == np.float32
    distance = np.abs(np.asarray(k_pos)[None, :] - np.asarray(q_pos)[:, None])
    np.testing.assert_allclose(bias, -np.asarray(alibi_slopes(H))[:, None, None] * distance)
    # The slopes are fixed by the head count: ALiBi has nothing to train.
    assert params == {}
    assert enc.causal_only and not encoders.get("alibi", bidirectional=True).causal_only


# --- KERPLE and FIRE ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["kerple_log", "kerple_power"])
def test_kerple_decays_at_init(name):
    enc = encoders.get(name)
    params = jit_site(enc, "init")(jax.random.key(3), DIMS)
    pos = jnp.arange(200)
    bias = np.asarray(
        jit_site(enc, "bias")(params, pos[:1], pos)
    )  # query at 0, keys at |r| = 0..199
    assert bias.shape == (H, 1, 200) and bias.dtype == np.float32
    assert np.isfinite(bias).all()
    np.testing.assert_array_equal(bias[:, 0, 0], 0.0)
    assert (np.diff(bias[:, 0], axis=-1) < 0).all()
    sym = np.asarray(jit_site(enc, "bias")(params, pos[-1:], pos))[:, 0, ::-1]
    np.testing.assert_allclose(sym, bias[:, 0], rtol=1e-6)


def test_kerple_formulas_and_finite_gradients():
    for name, kernel in [
        ("kerple_log", lambda p, a, r: -p * np.log1p(a * r)),
        ("kerple_power", lambda p, a, r: -p * r**a),
    ]:
        enc = encoders.get(name)
        params = {"p": jnp.asarray([0.5, 1.0, 2.0]), "a": jnp.asarray([0.3, 1.0, 1.5])}
        r = np.arange(0, 10, dtype=np.float64)
        got = np.asarray(jit_site(enc, "bias")(params, jnp.zeros(1, jnp.int32), jnp.arange(10)))[
            :, 0
        ]
        want = kernel(np.asarray(params["p"])[:, None], np.asarray(params["a"])[:, None], r)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        total = lambda p, e=enc: e.bias(p, jnp.arange(4), jnp.arange(4), H).sum()  # noqa: E731
        grads = jax.jit(jax.grad(total))(params)
        assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grads))
    with pytest.raises(ConfigError, match="no hyperparameter 'bidirectional'"):
        encoders.get("kerple_log", bidirectional=True)


def test_fire_shapes_and_monotone_decay_at_init():
    enc = encoders.get("fire")
    assert enc.causal_only
    params = jit_site(enc, "init")(jax.random.key(4), DIMS)
    pos = jnp.arange(100)
    bias = np.asarray(jit_site(enc, "bias")(params, pos[-1:], pos))[:, 0, ::-1]  # distance 0..99
    assert bias.shape == (H, 100) and bias.dtype == np.float32 and np.isfinite(bias).all()
    assert (np.diff(bias, axis=-1) < 0).all()
    full = np.asarray(jit_site(enc, "bias")(params, pos[:8], pos[:8]))
    assert full.shape == (H, 8, 8)
    # The future (negative distance) is clipped to distance 0.
    np.testing.assert_allclose(full[:, 0, 5], full[:, 0, 0])
    grads = jax.jit(jax.grad(lambda p: enc.bias(p, pos[:8], pos[:8], H).sum()))(params)
    assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grads))


def test_fire_normalises_by_query_position_past_threshold():
    enc, params = build("fire")
    threshold = math.exp(float(params["log_threshold"]))
    far = int(threshold) + 500
    near_row = np.asarray(jit_site(enc, "bias")(params, jnp.asarray([200]), jnp.asarray([190])))
    far_row = np.asarray(jit_site(enc, "bias")(params, jnp.asarray([far]), jnp.asarray([far - 10])))
    assert not np.allclose(near_row, far_row)


def _fire_reference(params, q_pos, k_pos, activation):
    """The FIRE of the DAPE authors' code (chuanyang-zheng/DAPE: FIRE; FIRE_DAPE's self.mlp
    with nn.LeakyReLU()) in float64 NumPy, with posjax's parameterisation (c = softplus(raw),
    L = exp(log_threshold)): x = log(|c r| + 1) / (log(|c max(i, L)| + 1) + 1e-6) for the
    distance r = i - j clipped at 0, bias = W2 act(W1 x + b1) + b2."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    c, threshold = np.log1p(np.exp(p["c"])), np.exp(p["log_threshold"])
    q, k = np.asarray(q_pos, np.float64), np.asarray(k_pos, np.float64)
    r = np.maximum(q[:, None] - k[None, :], 0.0)
    normaliser = np.log(np.abs(c * np.maximum(q, threshold)) + 1) + 1e-6
    x = np.log(np.abs(c * r) + 1) / normaliser[:, None]
    hidden = x[..., None] * p["w1"] + p["b1"]
    hidden = np.maximum(hidden, 0.0) if activation == "relu" else np.where(
        hidden > 0, hidden, 0.01 * hidden)
    return np.einsum("qkm,mh->hqk", hidden, p["w2"]) + p["b2"][:, None, None]


@pytest.mark.parametrize("activation", ["relu", "leaky_relu"])
def test_fire_activation_matches_the_authors_equation(activation):
    """relu (default): the FIRE paper and the authors' plain FIRE; leaky_relu: the DAPE
    authors' FIRE inside DAPE. They differ below the knots, by more than float32 rounding."""
    enc = encoders.get("fire", activation=activation)
    params = jit_site(enc, "init")(jax.random.key(5), DIMS)
    q_pos, k_pos = jnp.arange(90, 100), jnp.arange(0, 100, 3)
    got = np.asarray(jit_site(enc, "bias")(params, q_pos, k_pos))
    want = _fire_reference(params, q_pos, k_pos, activation)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    other = _fire_reference(params, q_pos, k_pos,
                            "relu" if activation == "leaky_relu" else "leaky_relu")
    assert np.abs(want - other).max() > 1e-3
    assert encoders.hparams("fire")["activation"] == "relu"
    with pytest.raises(ConfigError, match="unknown fire activation 'gelu'.*leaky_relu, relu"):
        encoders.get("fire", activation="gelu")


# --- TUPE -----------------------------------------------------------------------------


def test_tupe_bias_reference():
    enc, params = build("tupe")
    q_pos, k_pos = positions()
    bias = np.asarray(jit_site(enc, "bias")(params, q_pos, k_pos))
    assert bias.shape == (H, LQ, LK) and bias.dtype == np.float32
    table = np.asarray(params["table"], np.float64)

    def projected(pos, side):
        rows = table[np.asarray(pos)]
        normed = (rows - rows.mean(-1, keepdims=True)) / np.sqrt(rows.var(-1, keepdims=True)
                                                                  + 1e-5)
        normed = normed * np.asarray(params["ln_scale"]) + np.asarray(params["ln_bias"])
        out = np.einsum("ld,dhe->hle", normed, np.asarray(params[f"u_{side}"]))
        return out + np.asarray(params[f"c_{side}"])[:, None, :]

    pq, pk = projected(q_pos, "q"), projected(k_pos, "k")
    buckets = np.asarray(t5_bucket(k_pos[None, :] - q_pos[:, None]))
    want = np.einsum("hqe,hke->hqk", pq, pk) / math.sqrt(2 * DH)
    want += np.asarray(params["buckets"]).T[:, buckets]
    np.testing.assert_allclose(bias, want, rtol=1e-4, atol=1e-5)
    assert enc.logit_scale(DH) == pytest.approx(1 / math.sqrt(2 * DH))
    assert enc.max_positions(DIMS) == 64
    assert np.isnan(np.asarray(jit_site(enc, "bias")(params, jnp.asarray([64]), k_pos))).all()


def test_tupe_untied_term_starts_at_the_authors_scale():
    # TUPE's code: LayerNorm'd table rows (unit mean square), N(0, 0.02^2) projections, zero
    # biases, scale 1 / sqrt(2 Dh): each projected component has variance d 0.02^2, so the
    # term's std is d 0.02^2 sqrt(Dh) / sqrt(2 Dh) = 0.217 at d = 768 (BERT-base sizes).
    enc = encoders.get("tupe", num_buckets=32)
    dims = Dims(d_model=768, num_heads=12, head_dim=64, max_len=128)
    params = enc.init(jax.random.key(0), dims)
    params["buckets"] = jnp.zeros_like(params["buckets"])
    pos = jnp.arange(128)
    untied = np.asarray(jax.jit(lambda p: enc.bias(p, pos, pos, 12))(params))
    assert 0.19 < untied.std() < 0.245


# --- naive O(L^2 D) references for the content-position sites ----------------------------


def naive_shaw(params, q, q_pos, k_pos, probs, k=16):
    idx = np.clip(np.asarray(k_pos)[None, :] - np.asarray(q_pos)[:, None], -k, k) + k
    rel_k = np.asarray(params["rel_k"], np.float64)[idx]  # [Lq, Lk, Dh]
    rel_v = np.asarray(params["rel_v"], np.float64)[idx]
    score = np.einsum("id,ijd->ij", np.asarray(q, np.float64), rel_k) / math.sqrt(DH)
    return score, np.einsum("ij,ijd->id", probs, rel_v)


def naive_xl(params, q, k, q_pos, k_pos, head):
    dist = np.asarray(q_pos)[:, None] - np.asarray(k_pos)[None, :]  # XL's i - j
    rel = np.asarray(sinusoidal(jnp.asarray(dist), D), np.float64)  # [Lq, Lk, D]
    w_r = np.asarray(params["w_r"], np.float64)[:, head]  # [D, Dh]
    u = np.asarray(params["u"], np.float64)[head]
    v = np.asarray(params["v"], np.float64)[head]
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    pos_key = np.einsum("ijd,de->ije", rel, w_r)
    score = (k @ u)[None, :] + np.einsum("ie,ije->ij", q + v, pos_key)
    return score / math.sqrt(DH)


def naive_deberta(params, q, k, q_pos, k_pos, head, bucket_size=64, max_position=512,
                  p2c_index="paper"):
    def index(d):
        b = np.asarray(deberta_log_bucket(jnp.asarray(d), bucket_size, max_position))
        return np.clip(b + bucket_size, 0, 2 * bucket_size - 1)

    rel_emb = np.asarray(params["rel_emb"], np.float64)
    pos_query = rel_emb @ np.asarray(params["wq_r"], np.float64)[:, head]
    pos_key = rel_emb @ np.asarray(params["wk_r"], np.float64)[:, head]
    d_ij = np.asarray(q_pos)[:, None] - np.asarray(k_pos)[None, :]
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    c2p = np.einsum("id,ijd->ij", q, pos_key[index(d_ij)])
    # The paper's d(j, i) = -d(i, j); the released code and Hugging Face gather with d(i, j).
    p2c_d = -d_ij if p2c_index == "paper" else d_ij
    p2c = np.einsum("jd,ijd->ij", k, pos_query[index(p2c_d)])
    return (c2p + p2c) / math.sqrt(3 * DH)


def test_shaw_matches_naive_reference():
    enc, params = build("shaw")
    q, _ = qk()
    q_pos, k_pos = positions(high=60)  # distances beyond K = 16 exercise the clip
    probs = np.asarray(jax.nn.softmax(jax.random.normal(jax.random.key(5), (LQ, LK))))
    score = jit_site(enc, "rel_score")(params, q, None, q_pos, k_pos, jnp.asarray(0))
    value = jit_site(enc, "rel_value")(params, jnp.asarray(probs), q_pos, k_pos, jnp.asarray(0))
    want_score, want_value = naive_shaw(params, q, q_pos, k_pos, probs)
    np.testing.assert_allclose(np.asarray(score), want_score, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.asarray(value), want_value, rtol=1e-4, atol=1e-5)
    assert value.shape == (LQ, DH) and value.dtype == jnp.float32


@pytest.mark.parametrize("high", [40, 3000])
def test_xl_matches_naive_reference(high):
    enc, params = build("xl")
    q, k = qk()
    q_pos, k_pos = positions(high=high)
    for head in range(H):
        got = jit_site(enc, "rel_score")(params, q, k, q_pos, k_pos, jnp.asarray(head))
        want = naive_xl(params, q, k, q_pos, k_pos, head)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-3, atol=2e-3)


def test_deberta_matches_naive_reference():
    enc, params = build("deberta")
    q, k = qk()
    q_pos, k_pos = positions(high=2000)  # far beyond mid = 32: log buckets and clipping
    for head in range(H):
        got = jit_site(enc, "rel_score")(params, q, k, q_pos, k_pos, jnp.asarray(head))
        want = naive_deberta(params, q, k, q_pos, k_pos, head)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
    assert enc.logit_scale(DH) == pytest.approx(1 / math.sqrt(3 * DH))
    # The released code's p2c index, d(i, j): the same parameters, the mirrored rows of Qr.
    code = encoders.get("deberta", p2c_index="code")
    got = jit_site(code, "rel_score")(params, q, k, q_pos, k_pos, jnp.asarray(1))
    want = naive_deberta(params, q, k, q_pos, k_pos, 1, p2c_index="code")
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
    assert np.abs(np.asarray(got) - naive_deberta(params, q, k, q_pos, k_pos, 1)).max() > 1e-3


@pytest.mark.parametrize("name", SCORE_NAMES)
def test_rel_score_vmaps_over_a_traced_head(name):
    enc, params = build(name)
    q, k = qk()
    q_pos, k_pos = positions()
    heads = jnp.arange(H)
    stacked = jax.jit(jax.vmap(enc.rel_score, in_axes=(None, None, None, None, None, 0)))(
        params, q, k, q_pos, k_pos, heads
    )
    for head in range(H):
        one = jit_site(enc, "rel_score")(params, q, k, q_pos, k_pos, jnp.asarray(head))
        np.testing.assert_allclose(np.asarray(stacked[head]), np.asarray(one), atol=1e-5)


# --- properties shared by every relative encoding ---------------------------------------

POSITIONS = st.lists(st.integers(0, 300), min_size=LQ + LK, max_size=LQ + LK)


@FAST
@given(pos=POSITIONS, shift=st.integers(1, 5000))
def test_bias_depends_only_on_relative_position(pos, shift):
    q_pos, k_pos = jnp.asarray(pos[:LQ]), jnp.asarray(pos[LQ:])
    for name in BIAS_NAMES:
        params, bias = build(name)[1], jit_site(build(name)[0], "bias")
        base = np.asarray(bias(params, q_pos, k_pos))
        moved = np.asarray(bias(params, q_pos + shift, k_pos + shift))
        np.testing.assert_allclose(moved, base, rtol=1e-6, atol=1e-6, err_msg=name)


@FAST
@given(pos=POSITIONS, shift=st.integers(1, 5000))
def test_rel_score_depends_only_on_relative_position(pos, shift):
    q_pos, k_pos = jnp.asarray(pos[:LQ]), jnp.asarray(pos[LQ:])
    q, k = qk()
    probs = jax.nn.softmax(jax.random.normal(jax.random.key(6), (LQ, LK)))
    head = jnp.asarray(1)
    for name in SCORE_NAMES:
        enc, params = build(name)
        score = jit_site(enc, "rel_score")
        base = score(params, q, k, q_pos, k_pos, head)
        moved = score(params, q, k, q_pos + shift, k_pos + shift, head)
        np.testing.assert_allclose(np.asarray(moved), np.asarray(base), atol=1e-5, err_msg=name)
        if enc.rel_value is not None:
            value = jit_site(enc, "rel_value")
            base = value(params, probs, q_pos, k_pos, head)
            moved = value(params, probs, q_pos + shift, k_pos + shift, head)
            np.testing.assert_allclose(np.asarray(moved), np.asarray(base), atol=1e-6)


@FAST
@given(
    pos=st.lists(st.integers(0, 40), min_size=LQ + LK, max_size=LQ + LK), shift=st.integers(1, 20)
)
def test_fire_is_relative_below_its_threshold(pos, shift):
    params, bias = build("fire")[1], jit_site(build("fire")[0], "bias")
    params = {**params, "log_threshold": jnp.asarray(math.log(64.0))}  # above every position
    q_pos, k_pos = jnp.asarray(pos[:LQ]), jnp.asarray(pos[LQ:])
    base = np.asarray(bias(params, q_pos, k_pos))
    moved = np.asarray(bias(params, q_pos + shift, k_pos + shift))
    np.testing.assert_allclose(moved, base, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", SCORE_NAMES)
def test_rel_score_is_float32_with_bfloat16_inputs(name):
    enc, params = build(name)
    params = jax.tree.map(lambda a: a.astype(jnp.bfloat16), params)
    q, k = qk(jnp.bfloat16)
    q_pos, k_pos = positions()
    score = jit_site(enc, "rel_score")(params, q, k, q_pos, k_pos, jnp.asarray(0))
    assert score.dtype == jnp.float32 and score.shape == (LQ, LK)
    if enc.rel_value is not None:
        probs = jnp.full((LQ, LK), 1.0 / LK, jnp.bfloat16)
        assert (
            jit_site(enc, "rel_value")(params, probs, q_pos, k_pos, jnp.asarray(0)).dtype
            == jnp.float32
        )


@pytest.mark.parametrize("name", (*BIAS_NAMES, "tupe", "fire"))
def test_bias_is_float32_with_bfloat16_params(name):
    enc, params = build(name)
    params = jax.tree.map(lambda a: a.astype(jnp.bfloat16), params)
    q_pos, k_pos = positions()
    bias = jit_site(enc, "bias")(params, q_pos, k_pos)
    assert bias.dtype == jnp.float32 and bias.shape == (H, LQ, LK)
    assert np.isfinite(np.asarray(bias)).all()


def test_sites_are_as_documented():
    sites = {name: encoders.get(name).sites() for name in (*BIAS_NAMES, *SCORE_NAMES)}
    assert sites["shaw"] == ("rel_score", "rel_value")
    assert sites["xl"] == ("rel_score",) and sites["deberta"] == ("rel_score",)
    for name in BIAS_NAMES:
        assert sites[name] == ("bias",)
    # The enhanced mask decoder's absolute table is a model option, not a hyperparameter.
    assert "absolute_last_layers" not in encoders.hparams("deberta")


# --- errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, hparams, match",
    [
        ("t5", {"num_buckets": 31}, "even"),
        ("t5", {"num_buckets": 2}, "too small"),
        ("t5", {"max_distance": 4}, "max_distance"),
        ("tupe", {"num_buckets": 33}, "even"),
        ("shaw", {"max_relative_position": 0}, "max_relative_position"),
        ("deberta", {"bucket_size": 1}, "bucket_size"),
        ("deberta", {"max_position": 10}, "max_position"),
        ("fire", {"hidden": 0}, "hidden"),
        ("t5", {"scale": 0.0}, "scale=0.0 must be finite and non-zero"),
        ("t5", {"init_std": -1.0}, "init_std=-1.0 must be >= 0"),
    ],
)
def test_bad_hyperparameters_are_one_line_config_errors(name, hparams, match):
    with pytest.raises(ConfigError, match=match) as info:
        encoders.get(name, **hparams).init(jax.random.key(0), DIMS)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", ["t5", "tupe", "alibi", "dape"])
@pytest.mark.parametrize("value", ["no", 0, 1, "false"])
def test_a_direction_that_is_no_boolean_is_refused_not_read_by_truthiness(name, value):
    """bidirectional=no or 0 trained a causal T5 with both directions' buckets (`is not
    False`) and ALiBi one way (`not`): each is refused, in the words of the config arg."""
    with pytest.raises(ConfigError) as refused:
        encoders.get(name, bidirectional=value)
    assert str(refused.value) == (
        f"encoding {name!r} bidirectional={value!r} is not a boolean: give bidirectional=true "
        "or bidirectional=false (or leave it out, for its default)")
    for choice in (True, False, None):
        assert encoders.get(name, bidirectional=choice).bidirectional is choice
    with pytest.raises(ConfigError, match="learned_freqs='no' is not a boolean"):
        encoders.get("rope", learned_freqs="no")


def test_bad_dims_are_config_errors():
    with pytest.raises(ConfigError, match="even d_model"):
        encoders.get("xl").init(jax.random.key(0), Dims(d_model=15, num_heads=3, head_dim=5))
    with pytest.raises(ConfigError, match="head_dim"):
        encoders.get("shaw").init(jax.random.key(0), Dims(d_model=8, num_heads=1, head_dim=0))


def test_unknown_hyperparameter_suggests_the_right_one():
    with pytest.raises(ConfigError, match="did you mean 'num_buckets'"):
        encoders.get("t5", num_bucket=16)
    with pytest.raises(ConfigError, match="did you mean 'max_relative_position'"):
        encoders.get("shaw", max_relative_positions=8)
    with pytest.raises(ConfigError, match="did you mean 'alibi'"):
        encoders.get("alibj")


@pytest.mark.parametrize("name", ["kerple_log", "kerple_power"])
def test_kerple_matches_the_authors_code_and_keeps_a_gradient_below_the_clamp(name):
    """Golden values from KERPLE's released forward pass (scripts/golden_kerple.py): values
    use the clamped parameters, gradients reach parameters below the clamp (they froze when
    the clamp was applied where the values are used)."""
    golden = json.loads((GOLDEN / "kerple.json").read_text())
    case = golden[name]
    enc = encoders.get(name)
    params = {"p": jnp.asarray(case["p"], jnp.float32), "a": jnp.asarray(case["a"], jnp.float32)}
    distances = jnp.asarray(golden["distances"])
    bias = lambda p: enc.bias(p, jnp.zeros(1, jnp.int32), distances, 3)[:, 0]  # noqa: E731
    np.testing.assert_allclose(np.asarray(bias(params)), case["bias"], rtol=1e-5, atol=1e-6)
    grads = jax.grad(lambda p: bias(p).sum())(params)
    np.testing.assert_allclose(np.asarray(grads["p"]), case["grad_p"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(grads["a"]), case["grad_a"], rtol=1e-5, atol=1e-6)
    assert (np.asarray(grads["p"]) != 0).all()


def test_kerple_init_follows_the_authors_code():
    # KERPLE's code: log p ~ 2 U[0, 1), a ~ U[0, 1); power coefficient ~ U[0, 1), exponent
    # ~ 2 U[0, 1).
    dims = Dims(d_model=D, num_heads=4096, head_dim=DH)
    for name, p_max, a_max in (("kerple_log", 2.0, 1.0), ("kerple_power", 1.0, 2.0)):
        params = encoders.get(name).init(jax.random.key(0), dims)
        for key, top in (("p", p_max), ("a", a_max)):
            values = np.asarray(params[key])
            assert values.min() >= 0.0 and values.max() < top
            assert values.max() > 0.99 * top and values.mean() == pytest.approx(top / 2, rel=0.05)


@pytest.mark.parametrize("platform", ["cpu", "gpu", "tpu"])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_bias_is_the_bucket_table_read_per_pair_on_every_platform(bidirectional, platform):
    """bias[h, i, j] = table[bucket(k_j - q_i), h] (Raffel et al. 2020), with the table's
    gradient the sum of the bias gradient over each bucket's pairs, on each platform's
    construction; on GPUs and TPUs without a scatter-add (a matrix product with the one-hot
    buckets: the slow path of a GPU's atomics avoided)."""
    from posjax.encoders.relative import _t5_bias

    table = jax.random.normal(jax.random.key(0), (32, 3))
    q_pos = jnp.asarray([0, 5, 9, 200, 201, 7], jnp.int32)
    k_pos = jnp.asarray([3, 0, 300, 9, 1, 150, 2], jnp.int32)
    buckets = np.asarray(t5_bucket(k_pos[None, :] - q_pos[:, None], bidirectional))
    cotangent = jax.random.normal(jax.random.key(1), (3, 6, 7))

    def bias(table):
        return _t5_bias(table, q_pos, k_pos, bidirectional, 32, 128, platform)

    def loss(table):
        return jnp.sum(bias(table) * cotangent)

    np.testing.assert_array_equal(bias(table), np.asarray(table)[buckets].transpose(2, 0, 1))
    expected = np.zeros((32, 3))
    np.add.at(expected, buckets, np.asarray(cotangent).transpose(1, 2, 0))
    np.testing.assert_allclose(jax.grad(loss)(table), expected, rtol=1e-6, atol=1e-6)
    scatters = "scatter" in str(jax.make_jaxpr(jax.grad(loss))(table))
    assert scatters == (platform == "cpu")
