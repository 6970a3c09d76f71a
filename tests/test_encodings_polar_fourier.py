"""Issue 52's encodings PoPE, RoPE++ and FoPE: goldens from the authors' (or the port's)
PyTorch code (scripts/golden_<name>.py), each one's defining property for all inputs, a tiny
model's forward and AdamW step through the dense and chunked kernels, and the refusals."""

from __future__ import annotations

import functools
import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from posjax import encoders
from posjax.attention import check_compatible, multi_head_attention
from posjax.encoders import Dims
from posjax.errors import ConfigError
from posjax.models import build_model

GOLDEN = Path(__file__).parent / "golden"
NAMES = ("pope", "rope_pp", "fope")
HIGHEST = jax.default_matmul_precision("highest")


def _golden(name: str) -> dict:
    return json.loads((GOLDEN / f"{name}.json").read_text())


def _arange(batch: int, length: int) -> jax.Array:
    return jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (batch, length))


@functools.partial(jax.jit, static_argnames=("encoding", "impl", "block_size", "causal"))
def _attend(q, k, v, encoding, params, *, impl="dense", block_size=4, causal=True,
            positions=None):
    batch, length = q.shape[:2]
    pos = _arange(batch, length) if positions is None else positions
    seg = jnp.ones((batch, length), jnp.int32)
    return multi_head_attention(q, k, v, encoding=encoding, params=params, q_pos=pos,
                                k_pos=pos, q_seg=seg, k_seg=seg, causal=causal,
                                x=jnp.zeros((batch, length, 4)), impl=impl,
                                block_size=block_size)


def _normal(seed, *shape):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape), jnp.float32)


# --- PoPE -------------------------------------------------------------------------------


@pytest.mark.parametrize("index", [0, 1])
def test_pope_matches_the_lucidrains_port(index):
    case = _golden("pope")["cases"][index]
    q, k, v = (jnp.asarray(case[n], jnp.float32) for n in ("q", "k", "v"))
    enc = encoders.get("pope", theta=case["theta"], fraction=case["fraction"])
    params = {"bias": jnp.asarray(case["bias"], jnp.float32)}
    head_dim, length = q.shape[-1], q.shape[1]
    pos = jnp.arange(length)
    with HIGHEST:
        for h in range(q.shape[2]):
            score = enc.rel_score(params, q[0, :, h], k[0, :, h], pos, pos, jnp.int32(h))
            np.testing.assert_allclose(np.asarray(score) * np.sqrt(head_dim),
                                       case["scores"][0][h], rtol=1e-5, atol=1e-5)
        for impl in ("dense", "chunked"):
            out = _attend(q, k, v, enc, params, impl=impl)
            np.testing.assert_allclose(np.asarray(out), case["out"], rtol=1e-5, atol=1e-5)


def _pope_closed_form(q, k, q_pos, k_pos, bias, theta):
    """float64 [Lq, Lk]: sum_c softplus(q_c) softplus(k_c) cos((n - m) theta_c + delta_c)
    / sqrt(Dh), the paper's score written out."""
    q, k = np.asarray(q, np.float64), np.asarray(k, np.float64)
    inv_freq = theta ** (-np.arange(q.shape[-1]) / q.shape[-1])
    rel = np.asarray(k_pos, np.float64)[None, :] - np.asarray(q_pos, np.float64)[:, None]
    phase = rel[..., None] * inv_freq + np.clip(bias, -2 * np.pi, 0.0)
    mag = np.log1p(np.exp(q))[:, None, :] * np.log1p(np.exp(k))[None, :, :]
    return (mag * np.cos(phase)).sum(-1) / np.sqrt(q.shape[-1])


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 4000))
def test_pope_score_is_the_polar_form_and_depends_on_positions_only_through_n_minus_m(
        seed, shift):
    rng = np.random.default_rng(seed)
    q, k = _normal(seed, 7, 8), _normal(seed + 1, 9, 8)
    q_pos = jnp.asarray(rng.permutation(200)[:7], jnp.int32)
    k_pos = jnp.asarray(rng.permutation(200)[:9], jnp.int32)
    bias = rng.uniform(-7.0, 1.0, size=(1, 8))
    enc = encoders.get("pope")
    params = {"bias": jnp.asarray(bias, jnp.float32)}
    with HIGHEST:
        score = np.asarray(enc.rel_score(params, q, k, q_pos, k_pos, jnp.int32(0)))
        shifted = np.asarray(enc.rel_score(params, q, k, q_pos + shift, k_pos + shift,
                                           jnp.int32(0)))
    expected = _pope_closed_form(q, k, q_pos, k_pos, bias[0], 10000.0)
    np.testing.assert_allclose(score, expected, rtol=1e-4, atol=1e-4)
    # float32 angles at positions up to ~4200: 4200 * 2^-24 rad of error per angle
    np.testing.assert_allclose(shifted, expected, rtol=1e-3, atol=2e-3)


def test_pope_magnitudes_come_from_the_content_and_phases_from_the_position():
    """A component's sign flip leaves the phase alone (softplus is its magnitude, never a
    rotation), and a zero phase bias at equal positions gives sum_c |q_c| |k_c|."""
    q, k = _normal(3, 5, 8), _normal(4, 5, 8)
    enc, pos = encoders.get("pope"), jnp.zeros(5, jnp.int32)
    params = enc.init(jax.random.key(0), Dims(16, 2, 8, 64))
    with HIGHEST:
        score = np.asarray(enc.rel_score(params, q, k, pos, pos, jnp.int32(0)))
    mag = np.asarray(jax.nn.softplus(q)) @ np.asarray(jax.nn.softplus(k)).T
    np.testing.assert_allclose(score, mag / np.sqrt(8), rtol=1e-5)


# --- RoPE++ ------------------------------------------------------------------------------


@pytest.mark.parametrize("index", [0, 1])
@pytest.mark.parametrize("impl", ["dense", "chunked"])
def test_rope_pp_matches_the_authors_attention_layer(index, impl):
    """The authors' EH (imag1) and EC (imag2) layers are posjax heads whose projections are
    tied in pairs: heads 2h (real) and 2h + 1 (imaginary) read query head h, and both read
    the key/value head repeat_kv gives them."""
    case = _golden("rope_pp")["cases"][index]
    x = np.asarray(case["x"], np.float64)
    dh = case["head_dim"]

    def heads(name, index):
        h = (x @ np.asarray(case[name]).T).reshape(*x.shape[:2], -1, dh)
        return jnp.asarray(h[:, :, index], jnp.float32)

    q = heads("q_proj", case["q_head_of"])
    k, v = (heads(n, case["kv_head_of"]) for n in ("k_proj", "v_proj"))
    enc = encoders.get("rope_pp", theta=case["theta"], layout="half")
    with HIGHEST:
        out = np.asarray(_attend(q, k, v, enc, {}, impl=impl), np.float64)
    out = out.reshape(*x.shape[:2], -1) @ np.asarray(case["o_proj"]).T
    np.testing.assert_allclose(out, case["out"], rtol=1e-4, atol=1e-5)


@functools.partial(jax.jit, static_argnums=0)
def _rotate(encoding, q, k, q_pos, k_pos):
    return encoding.rotate({}, q, k, q_pos, k_pos)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 3000), st.sampled_from(["interleaved", "half"]))
def test_rope_pp_heads_score_the_real_and_imaginary_parts_of_the_rotary_product(
        seed, shift, layout):
    """Head 0 (real): Re sum_c z_qc conj(z_kc) e^{i (m - n) t_c}; head 1 (imaginary): Im of
    the same, z the pairs as complex numbers, for any positions; a shift changes neither."""
    rng = np.random.default_rng(seed)
    q, k = _normal(seed, 1, 6, 2, 8), _normal(seed + 1, 1, 7, 2, 8)
    q_pos = jnp.asarray(rng.permutation(300)[None, :6], jnp.int32)
    k_pos = jnp.asarray(rng.permutation(300)[None, :7], jnp.int32)
    enc = encoders.get("rope_pp", layout=layout)

    def scores(q_pos, k_pos):
        with HIGHEST:
            rq, rk = _rotate(enc, q, k, q_pos, k_pos)
        return [np.asarray(rq[0, :, h], np.float64) @ np.asarray(rk[0, :, h], np.float64).T
                for h in range(2)]

    def pairs(x):  # [..., 8] -> complex [..., 4] in the layout's pairing
        x = np.asarray(x, np.float64)
        a, b = (x[..., 0::2], x[..., 1::2]) if layout == "interleaved" else (x[..., :4],
                                                                            x[..., 4:])
        return a + 1j * b

    t = 10000.0 ** (-np.arange(4) / 4)
    rel = np.asarray(q_pos[0])[:, None] - np.asarray(k_pos[0])[None, :]
    for h, part in ((0, np.real), (1, np.imag)):
        product = (pairs(q[0, :, h])[:, None, :] * np.conj(pairs(k[0, :, h]))[None, :, :]
                   * np.exp(1j * rel[..., None] * t)).sum(-1)
        np.testing.assert_allclose(scores(q_pos, k_pos)[h], part(product), rtol=1e-4,
                                   atol=1e-4)
        np.testing.assert_allclose(scores(q_pos + shift, k_pos + shift)[h], part(product),
                                   rtol=1e-3, atol=2e-3)


def test_rope_pp_real_heads_are_rope_and_every_kernel_carries_it():
    q, k, v = (_normal(s, 2, 10, 4, 8) for s in (5, 6, 7))
    enc = encoders.get("rope_pp")
    with HIGHEST:
        rq, rk = enc.rotate({}, q, k, _arange(2, 10), _arange(2, 10))
        pq, pk = encoders.get("rope").rotate({}, q, k, _arange(2, 10), _arange(2, 10))
        np.testing.assert_array_equal(np.asarray(rq[:, :, 0::2]), np.asarray(pq[:, :, 0::2]))
        np.testing.assert_array_equal(np.asarray(rk), np.asarray(pk))
        dense = np.asarray(_attend(q, k, v, enc, {}))
        for impl in ("fused", "linear", "chunked"):
            check_compatible(enc, impl, causal=True)
        np.testing.assert_allclose(np.asarray(_attend(q, k, v, enc, {}, impl="fused")), dense,
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("hparams,message", [
    (dict(fraction=0.5), "pass-through dims of partial rotary have no imaginary part"),
    (dict(rerope_window=4), "rope_pp cannot take rerope_window"),
    (dict(imag_heads="even"), "even"),
])
def test_rope_pp_refuses_what_has_no_imaginary_part(hparams, message):
    with pytest.raises(ConfigError, match=message):
        encoders.get("rope_pp", **hparams)


def test_rope_pp_with_one_head_needs_imaginary_heads_it_can_have():
    with pytest.raises(ConfigError, match="makes none of 1 heads imaginary"):
        encoders.get("rope_pp").init(jax.random.key(0), Dims(8, 1, 8, 32))
    assert encoders.get("rope_pp", imag_heads="all").init(jax.random.key(0),
                                                         Dims(8, 1, 8, 32)) == {}


# --- FoPE --------------------------------------------------------------------------------


@pytest.mark.parametrize("index", [0, 1])
def test_fope_matches_the_authors_fourier_embedding(index):
    case = _golden("fope")["cases"][index]
    q, k = (jnp.asarray(case[n], jnp.float32) for n in ("q", "k"))
    enc = encoders.get("fope", theta=case["theta"], layout="half",
                       init_gain=case["init_gain"])
    dims = Dims(q.shape[2] * case["head_dim"], q.shape[2], case["head_dim"], case["max_len"])
    params = {n: jnp.asarray(case[n], jnp.float32) for n in ("cos_coef", "sin_coef")}
    drawn = enc.init(jax.random.key(0), dims)  # the same sizes, and the strided identity
    assert {n: v.shape for n, v in drawn.items()} == {n: v.shape for n, v in params.items()}
    pos = _arange(1, q.shape[1])
    with HIGHEST:
        rq, rk = _rotate_with(enc, params, q, k, pos, pos)
    np.testing.assert_allclose(np.asarray(rq), case["q_out"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(rk), case["k_out"], rtol=1e-5, atol=1e-5)
    scores = np.einsum("bihd,bjhd->bhij", np.asarray(rq, np.float64), np.asarray(rk))
    np.testing.assert_allclose(scores, case["scores"], rtol=1e-4, atol=1e-4)


@functools.partial(jax.jit, static_argnums=0)
def _rotate_with(encoding, params, q, k, q_pos, k_pos):
    return encoding.rotate(params, q, k, q_pos, k_pos)


@pytest.mark.parametrize("max_len", [16, 64, 512, 4096])
def test_fope_keeps_exactly_the_frequencies_that_complete_a_period_in_training(max_len):
    head_dim, theta = 32, 10000.0
    enc = encoders.get("fope")
    params = enc.init(jax.random.key(0), Dims(64, 2, head_dim, max_len))
    kept = params["cos_coef"].shape[1]
    inv_freq = theta ** (-np.arange(0, head_dim, 2) / head_dim)
    assert kept == (inv_freq * max_len >= 2 * np.pi).sum() >= 1
    assert params["cos_coef"].shape[2] == min(kept, head_dim // 4)


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 3000))
def test_fope_identity_start_is_relative_and_its_clipped_pairs_ignore_position(seed, shift):
    """init_gain 0, D <= Dh/4: each kept pair turns by its own frequency, so scores depend
    only on n - m; the clipped pairs get the same position-free map at every position."""
    rng = np.random.default_rng(seed)
    enc = encoders.get("fope", init_gain=0.0)
    params = enc.init(jax.random.key(seed), Dims(32, 2, 16, 64))  # D = d = 3 of 8 pairs
    q, k = _normal(seed, 1, 6, 2, 16), _normal(seed + 1, 1, 7, 2, 16)
    q_pos = jnp.asarray(rng.permutation(300)[None, :6], jnp.int32)
    k_pos = jnp.asarray(rng.permutation(300)[None, :7], jnp.int32)

    def scores(q_pos, k_pos):
        with HIGHEST:
            rq, rk = _rotate_with(enc, params, q, k, q_pos, k_pos)
        return np.einsum("bihd,bjhd->bhij", np.asarray(rq, np.float64), np.asarray(rk)), rq

    (before, rq), (after, _) = scores(q_pos, k_pos), scores(q_pos + shift, k_pos + shift)
    np.testing.assert_allclose(after, before, rtol=1e-3, atol=2e-3)
    # pairs 3..7 (interleaved dims 6..15): (a, b) -> (a - b, b + a) wherever the query sits
    a, b = np.asarray(q[..., 6::2]), np.asarray(q[..., 7::2])
    np.testing.assert_allclose(np.asarray(rq[..., 6::2]), a - b, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(rq[..., 7::2]), b + a, rtol=1e-6, atol=1e-6)


def test_fope_coefficients_come_from_the_rng_and_train_unless_frozen():
    dims = Dims(32, 2, 16, 64)
    enc = encoders.get("fope")
    first, again = enc.init(jax.random.key(1), dims), enc.init(jax.random.key(1), dims)
    other = enc.init(jax.random.key(2), dims)
    np.testing.assert_array_equal(first["cos_coef"], again["cos_coef"])
    assert not np.allclose(first["cos_coef"], other["cos_coef"])
    q = _normal(0, 1, 5, 2, 16)

    def grads(enc):
        loss = lambda p: jnp.sum(jnp.sin(enc.rotate(p, q, q, _arange(1, 5), _arange(1, 5))[0]))
        return jax.jit(jax.grad(loss))(first)

    assert all(np.abs(g).max() > 0 for g in grads(enc).values())
    frozen = grads(encoders.get("fope", learnable=False))
    assert all(np.abs(g).max() == 0 for g in frozen.values())


@pytest.mark.parametrize("dims,message", [
    (Dims(16, 2, 8, 4), "keeps no frequency"),
    (Dims(6, 2, 3, 64), "even head_dim >= 4"),
])
def test_fope_refuses_sizes_it_cannot_carry(dims, message):
    with pytest.raises(ConfigError, match=message):
        encoders.get("fope").init(jax.random.key(0), dims)


# --- models, kernels and refusals (every encoding) ----------------------------------------

CFG = dict(d_model=32, num_layers=1, num_heads=2, head_dim=16, mlp_dim=64, dtype="float32")
V, L, B = 32, 12, 2


def _model(name, **overrides):
    return build_model(dict(CFG, **overrides), encoders.get(name).for_model(True),
                       kind="causal_lm", vocab_size=V, num_classes=1, patch_dim=1,
                       max_len=32, rngs=nnx.Rngs(0))


def _copy_task():
    tokens = jax.random.randint(jax.random.key(1), (B, L), 0, V)
    return tokens, (tokens, _arange(B, L), jnp.ones((B, L), jnp.int32))


def _forward(model):
    graphdef, state = nnx.split(model)
    with HIGHEST:
        return jax.jit(lambda s, b: nnx.merge(graphdef, s)(*b))(state, _copy_task()[1])


def _train_step(model):
    """(logits before, loss before, loss after one AdamW step) for the copy task, as the
    trainer runs it: a jitted pure function of nnx.split state."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    tokens, batch = _copy_task()
    tx = optax.adamw(1e-2)

    def loss_fn(params):
        logits = nnx.merge(graphdef, params, rest)(*batch)
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens).mean(), logits

    @jax.jit
    def step(params):
        (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, _ = tx.update(grads, tx.init(params), params)
        return logits, loss, loss_fn(optax.apply_updates(params, updates))[0]

    with HIGHEST:
        return step(params)


@pytest.mark.parametrize("name", NAMES)
def test_a_tiny_model_trains_through_chunked_and_dense_gives_its_logits(name):
    logits, before, after = _train_step(_model(name, attention="chunked", block_size=4))
    assert np.isfinite(before) and after < before
    np.testing.assert_allclose(np.asarray(_forward(_model(name))), np.asarray(logits),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", NAMES)
def test_bfloat16_activations_stay_close_to_float32(name):
    """Angles, magnitudes and series in float32 whatever q and k are: bfloat16 inputs give
    the float32 output within bfloat16's rounding of the inputs and the output."""
    q, k, v = (_normal(s, 2, 16, 2, 16) for s in (11, 12, 13))
    enc = encoders.get(name)
    params = enc.init(jax.random.key(0), Dims(32, 2, 16, 64))
    with HIGHEST:
        full = np.asarray(_attend(q, k, v, enc, params))
        low = _attend(*(x.astype(jnp.bfloat16) for x in (q, k, v)), enc, params)
    assert low.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(low, np.float32), full, rtol=0.05, atol=0.05)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_posjax_train_runs_each_with_configs_lm(tmp_path, data_flags, name):
    from posjax import fileio
    from posjax.launch import cli

    lm = Path(__file__).resolve().parents[1] / "configs" / "lm.py"
    workdir = tmp_path / "run"
    argv = ["train", f"--config={lm}:smoke,seq_len=32,batch_size=4,steps=3,encoding={name}",
            f"--workdir={workdir}", "--noprogress", "--config.train.log_every_steps=1",
            *data_flags]
    assert cli.main(argv) == 0
    rows = fileio.read_jsonl(workdir / "metrics.jsonl")
    assert rows and all(np.isfinite(r["loss"]) for r in rows if "loss" in r)


@pytest.mark.parametrize("name", NAMES)
def test_posjax_list_encodings_shows_it(name):
    from posjax.launch import cli

    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["list", "encodings"]) == 0
    assert name in out.getvalue()


@pytest.mark.parametrize("impl", ["fused", "flash_bias", "linear"])
def test_kernels_that_never_form_the_score_refuse_pope_by_name(impl):
    with pytest.raises(ConfigError, match=rf"'pope' cannot run with attention='{impl}'"):
        check_compatible(encoders.get("pope"), impl, causal=True)
    with pytest.raises(ConfigError, match="'pope'"):
        _model("pope", attention=impl)
