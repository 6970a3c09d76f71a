"""Gated DeltaNet: the gated delta rule against fla's references, chunked == recurrent,
segment resets, causality, gradients; the recurrent layer in a layer_pattern hybrid."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from posjax import encoders, fileio
from posjax.attention.deltanet import (
    gated_delta_rule_chunked,
    gated_delta_rule_recurrent,
    unit_lower_inverse,
)
from posjax.errors import ConfigError
from posjax.experiment import Experiment
from posjax.launch import cli
from posjax.models import ModelConfig, build_model

GOLDEN = json.loads((Path(__file__).parent / "golden" / "gated_deltanet.json").read_text())

def _inputs(batch, length, heads, dk, dv, seed=0, dtype=jnp.float32):
    """Random q, k, v, g = log alpha <= 0 and beta in (0, 1), [B, L, H, ...]."""
    kq, kk, kv, kg, kb = jax.random.split(jax.random.key(seed), 5)
    q = jax.random.normal(kq, (batch, length, heads, dk))
    k = jax.random.normal(kk, (batch, length, heads, dk))
    v = jax.random.normal(kv, (batch, length, heads, dv))
    g = -jax.nn.softplus(jax.random.normal(kg, (batch, length, heads)))
    beta = jax.nn.sigmoid(jax.random.normal(kb, (batch, length, heads)))
    return tuple(x.astype(dtype) for x in (q, k, v)) + (g, beta)


@functools.partial(jax.jit, static_argnames="chunk")
def _both_forms(q, k, v, g, beta, seg, chunk):
    """(chunked, recurrent), q and k L2-normalised, in one compiled program."""
    kw = dict(segment_ids=seg, qk_l2norm=True)
    return (gated_delta_rule_chunked(q, k, v, g, beta, chunk, **kw),
            gated_delta_rule_recurrent(q, k, v, g, beta, **kw))


def _forms(*args, chunk=8):
    with jax.default_matmul_precision("highest"):
        return _both_forms(*args, chunk=chunk)


@pytest.mark.parametrize("case", GOLDEN["cases"], ids=lambda c: c["name"])
def test_both_forms_match_fla_naive_references(case):
    q, k, v, g, beta = (jnp.asarray(case[n], jnp.float32) for n in ("q", "k", "v", "g", "beta"))
    seg = jnp.asarray(case["segment_ids"], jnp.int32)
    chunk, rec = _forms(q, k, v, g, beta, seg, chunk=case["chunk_size"])
    np.testing.assert_allclose(rec, case["recurrent"], atol=2e-6, rtol=1e-5)
    np.testing.assert_allclose(chunk, case["chunked"], atol=2e-6, rtol=1e-5)
    assert "fla-org/flash-linear-attention" in GOLDEN["source"]


# Most tests share one shape (and so one compiled program per chunk size): L = 37 is a
# multiple of no chunk size tried but 1.
B, L, H, DK, DV = 2, 37, 2, 4, 3


def _segments(runs, length=L):
    """int32[B, L] ids from run lengths (cycled up to L): 1, 2, then a padding run 0, 4, ..."""
    ids, start, n = np.zeros(length, np.int32), 0, 0
    while start < length:
        run = runs[n % len(runs)]
        ids[start:start + run] = (n + 1) if n != 2 else 0
        start, n = start + run, n + 1
    return jnp.asarray(np.tile(ids, (B, 1)))


@settings(max_examples=10, deadline=None)
@given(st.sampled_from([1, 3, 8, 16, 64]), st.lists(st.integers(1, 40), min_size=1,
                                                     max_size=4), st.integers(0, 1000))
def test_chunked_equals_recurrent_for_any_chunk_size_and_packing(chunk, runs, seed):
    chunked, rec = _forms(*_inputs(B, L, H, DK, DV, seed), _segments(runs), chunk=chunk)
    np.testing.assert_allclose(chunked, rec, atol=1e-5)


def test_a_packed_segment_reads_only_itself_and_starts_from_zero():
    q, k, v, g, beta = _inputs(B, L, H, DK, DV, seed=3)
    seg = _segments([11, 13])  # 1 x 11, 2 x 13, padding x 11, 4 x 2
    inside = np.asarray(seg == 2)
    other = [jnp.where(inside[..., None, None] if x.ndim == 4 else inside[..., None], x, y)
             for x, y in zip((q, k, v, g, beta), _inputs(B, L, H, DK, DV, seed=4),
                             strict=True)]
    out, _ = _forms(q, k, v, g, beta, seg)
    changed, _ = _forms(*other, seg)
    np.testing.assert_allclose(out[inside], changed[inside], atol=1e-6)
    # The segment's first token sees an empty state: o = beta v (q^ . k^) / sqrt(Dk).
    unit = lambda x: x / jnp.sqrt((x * x).sum(-1, keepdims=True) + 1e-6)
    first = beta[:, 11, :, None] * v[:, 11] * (unit(q) * unit(k))[:, 11].sum(-1)[..., None]
    np.testing.assert_allclose(out[:, 11], first / 2.0, atol=1e-6)


def test_later_tokens_change_no_earlier_output():
    args, other, t = _inputs(B, L, H, DK, DV, seed=5), _inputs(B, L, H, DK, DV, seed=6), 13
    seg = _segments([L])
    after = lambda x, y: jnp.concatenate([x[:, :t + 1], y[:, t + 1:]], axis=1)
    base, _ = _forms(*args, seg)
    changed, _ = _forms(*map(after, args, other), seg)
    np.testing.assert_array_equal(base[:, :t + 1], changed[:, :t + 1])
    assert not np.allclose(base[:, t + 1:], changed[:, t + 1:])


def test_gradients_are_finite_and_agree_between_forms():
    args, seg = _inputs(1, 21, H, DK, DV, seed=7), _segments([9, 7], 21)[:1]

    def loss(form, *a):
        return jnp.sum(jnp.sin(form(*a, segment_ids=seg, qk_l2norm=True)))

    chunked = functools.partial(gated_delta_rule_chunked, chunk_size=8)
    grads = jax.jit(lambda *a: [jax.grad(functools.partial(loss, form), range(5))(*a)
                                for form in (chunked, gated_delta_rule_recurrent)])
    with jax.default_matmul_precision("highest"):
        from_chunks, from_steps = grads(*args)
    for a, b in zip(from_chunks, from_steps, strict=True):
        assert np.isfinite(np.asarray(a)).all()
        np.testing.assert_allclose(a, b, atol=5e-5, rtol=1e-4)


def test_state_is_float32_for_bfloat16_inputs():
    q, k, v, g, beta = _inputs(1, 40, 2, 8, 8, seed=8)
    low = tuple(x.astype(jnp.bfloat16) for x in (q, k, v))
    run = jax.jit(lambda *a: gated_delta_rule_chunked(*a, g, beta, 16, qk_l2norm=True))
    with jax.default_matmul_precision("highest"):
        out, ref = run(*low), run(*(x.astype(jnp.float32) for x in low))
    assert out.dtype == jnp.bfloat16 and ref.dtype == jnp.float32
    np.testing.assert_allclose(out.astype(jnp.float32), ref, atol=1e-2)


def test_bad_shapes_are_one_line():
    q, k, v, g, beta = _inputs(1, 5, 2, 4, 3)
    with pytest.raises(ConfigError, match=r"beta \(1, 5\) must be \[B, L, H\]"):
        gated_delta_rule_chunked(q, k, v, g, beta[..., 0])



@pytest.mark.parametrize("size", [1, 5, 16, 37])
def test_unit_lower_inverse_inverts_i_plus_a_strictly_lower_matrix(size):
    m = jnp.tril(jax.random.normal(jax.random.key(size), (2, 3, size, size)), -1) * 0.5
    with jax.default_matmul_precision("highest"):
        inverse = unit_lower_inverse(m)
    expected = np.linalg.inv(np.eye(size) + np.asarray(m, np.float64))
    np.testing.assert_allclose(inverse, expected, atol=1e-4, rtol=1e-4)


def test_the_chunked_form_trains_without_a_lapack_call():
    """The step's program holds no custom call: jaxlib's CPU LAPACK trsm waits on XLA's
    intra-op pool from inside it, which deadlocked the 3-seed hybrid on 2 cores."""
    seeds = [jnp.stack([x, x]) for x in _inputs(2, 40, 2, 8, 8)]  # [seed, B, L, ...]
    loss = lambda *a: gated_delta_rule_chunked(*a, 16, qk_l2norm=True).sum()
    grads = jax.jit(jax.vmap(jax.grad(loss, range(5))))
    assert "custom_call" not in grads.lower(*seeds).as_text()


# Three vmapped seeds of the gated delta rule at the models_2026 study's shape, forward and
# backward: with lax.linalg.triangular_solve this waited forever on a 2-core machine.
STUDY_SHAPE_STEPS = """
import jax
from posjax.attention.deltanet import gated_delta_rule_chunked, l2_normalize
keys = jax.random.split(jax.random.key(0), 5)
q, k, v = (jax.random.normal(key, (3, 16, 128, 4, 32)) for key in keys[:3])
g = -jax.nn.softplus(jax.random.normal(keys[3], (3, 16, 128, 4)))
beta = jax.nn.sigmoid(jax.random.normal(keys[4], (3, 16, 128, 4)))
loss = lambda q, k, *a: gated_delta_rule_chunked(l2_normalize(q), l2_normalize(k), *a).sum()
step = jax.jit(jax.vmap(jax.grad(loss, range(5))))
for _ in range(3):
    jax.block_until_ready(step(q, k, v, g, beta))
print("finished")
"""


@pytest.mark.slow
def test_vmapped_seeds_at_the_study_shape_finish():
    try:
        done = subprocess.run([sys.executable, "-c", STUDY_SHAPE_STEPS], capture_output=True,
                              text=True, timeout=300)
    except subprocess.TimeoutExpired:
        pytest.fail("3 vmapped seeds of the chunked gated delta rule hung (300 s)")
    assert done.returncode == 0 and "finished" in done.stdout, done.stderr[-2000:]


# The hybrid model.

CFG = dict(d_model=16, num_heads=2, head_dim=8, mlp_dim=32, dtype="float32")


def _hybrid(pattern="gdn+gdn+gdn+none", encoding="none", kind="causal_lm", num_layers=4):
    cfg = ModelConfig(**CFG, num_layers=num_layers, layer_pattern=pattern)
    return build_model(cfg, encoders.get(encoding), kind=kind, max_len=32, rngs=nnx.Rngs(0),
                       vocab_size=11)


def _tokens(length=20, seed=0):
    tokens = jnp.asarray(np.random.default_rng(seed).integers(0, 11, (2, length)), jnp.int32)
    return tokens, jnp.tile(jnp.arange(length, dtype=jnp.int32), (2, 1))


def test_the_pattern_places_gdn_layers_and_one_train_step_lowers_the_loss():
    model = _hybrid("gdn+rope", encoding="rope", num_layers=3)
    kinds = [type(layer.attn).__name__ for layer in model.backbone.layers]
    assert kinds == ["GatedDeltaNet", "Attention", "GatedDeltaNet"]
    assert model.backbone.layers[1].attn.encoding.name == "rope"
    model = _hybrid("gdn+rope", encoding="rope", num_layers=2)
    tokens, pos = _tokens()
    seg = jnp.ones_like(tokens)

    def loss(model):
        logits = model(tokens[:, :-1], pos[:, :-1], seg[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    @nnx.jit
    def step(model, optimizer):
        value, grads = nnx.value_and_grad(loss)(model)
        optimizer.update(model, grads)
        return value, grads

    optimizer = nnx.Optimizer(model, optax.adamw(1e-2), wrt=nnx.Param)
    before, grads = step(model, optimizer)
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(nnx.state(grads)))
    gdn = nnx.state(grads)["backbone"]["layers"][0]["attn"]
    assert float(jnp.abs(gdn["A_log"][...]).sum()) > 0  # the decay gate learns
    after, _ = step(model, optimizer)
    assert np.isfinite(before) and after < before


def test_the_hybrid_is_causal_reads_no_positions_and_its_packed_rows_do_not_leak():
    model = _hybrid("gdn+none", num_layers=2)
    tokens, pos = _tokens(24, seed=1)
    seg = jnp.ones_like(tokens)
    run = jax.jit(lambda t, p, s: model(t, p, s))
    # Two documents packed in a row; the second, alone, is the same row with the first's
    # tokens replaced and in a segment of their own.
    packed_seg = jnp.where(jnp.arange(24) < 10, 1, 2)[None].repeat(2, 0)
    packed_pos = jnp.tile(jnp.where(jnp.arange(24) < 10, 0, 10), (2, 1))
    with jax.default_matmul_precision("highest"):
        base = run(tokens, pos, seg)
        later = run(tokens.at[:, 15:].set((tokens[:, 15:] + 3) % 11), pos, seg)
        shifted = run(tokens, pos + 123, seg)
        packed = run(tokens, pos - packed_pos, packed_seg)
        other = run(tokens.at[:, :10].set(0), pos - packed_pos, packed_seg)
        # whole rows (data.packing=stream) come with no segment ids: a TypeError in jnp.pad
        whole = jax.jit(lambda t, p: model(t, p, None))(tokens, pos)
    np.testing.assert_array_equal(base[:, :15], later[:, :15])
    assert not np.allclose(base[:, 15:], later[:, 15:])
    np.testing.assert_array_equal(base, shifted)  # gdn and NoPE: positions are not read
    np.testing.assert_allclose(packed[:, 10:], other[:, 10:], atol=1e-5)
    assert not np.allclose(packed[:, 10:], base[:, 10:])
    np.testing.assert_array_equal(whole, base)


def test_the_lm_config_builds_the_hybrid_and_refuses_an_encoding_it_would_drop():
    from configs.lm import get_config

    config = get_config("encoding=none,layer_pattern=gdn+gdn+gdn+none,smoke")
    config.model.num_layers = 4
    params = Experiment.from_config(config).abstract().params
    layers = params["backbone"]["layers"]
    assert [("A_log" in layers[i]["attn"]) for i in range(4)] == [True, True, True, False]
    assert "A_log" not in layers[3]["attn"] and "query" in layers[3]["attn"]
    config = get_config("encoding=rope,layer_pattern=gdn+gdn+gdn+none,smoke")
    with pytest.raises(ConfigError, match="encoding 'rope' reaches no layer"):
        Experiment.from_config(config).abstract()


    # gdn names a layer, not an encoding: the refusal says where it goes, in words that build
    with pytest.raises(ConfigError, match=r"^encoding 'gdn' does not exist: gdn is a "
                       r"recurrent layer, .* \(layer_pattern=gdn\+rope: .*; "
                       r"encoding=none,layer_pattern=gdn\+none: of it and NoPE\)$"):
        get_config("encoding=gdn,smoke")
    for arg in ("layer_pattern=gdn+rope,smoke", "encoding=none,layer_pattern=gdn+none,smoke"):
        Experiment.from_config(get_config(arg)).abstract()


def test_the_retrieval_config_trains_the_hybrid_on_a_task():
    from configs.retrieval import get_config

    config = get_config("task=passkey,size=study,encoding=none,layer_pattern=gdn+none")
    assert config.model.layer_pattern == "gdn+none" and config.model.d_model == 64
    layers = Experiment.from_config(config).abstract().params["backbone"]["layers"]
    assert "A_log" in layers[0]["attn"] and "query" in layers[1]["attn"]
    assert get_config("task=passkey,size=study").model.layer_pattern == ""

@pytest.mark.parametrize("pattern, encoding, kind, message", [
    ("gdn+gdx", "none", "causal_lm",
     r"unknown encoding in model.layer_pattern 'gdx' \(did you mean 'gdn'\?\); valid: .*gdn"),
    ("gdn+gdn+gdn+none", "rope", "causal_lm",
     "encoding 'rope' reaches no layer of model.layer_pattern='gdn\\+gdn\\+gdn\\+none', whose "
     "entries name gdn, none \\(gdn layers take no position encoding: .*, or set encoding=none$"),
    ("gdn+none", "none", "mlm", "names 'gdn', a causal recurrent layer, but this model kind "
     "is bidirectional"),
    ("gdn+learned", "none", "causal_lm", "'learned' encodes at the input"),
])
def test_refusals_are_one_line(pattern, encoding, kind, message):
    with pytest.raises(ConfigError, match=message) as e:
        _hybrid(pattern, encoding=encoding, kind=kind)
    assert "\n" not in str(e.value)


def test_an_input_encoding_still_reaches_a_hybrid():
    model = _hybrid("gdn+none", encoding="sinusoidal")
    assert model.backbone.input_site is not None


@pytest.mark.slow
def test_a_vmapped_hybrid_is_scored_on_passkey_and_mqar(tmp_path, data_flags):
    """The study's route at smoke size: two vmapped seeds of gdn+none with passkey and mqar
    scored while training, then each task by `posjax extrapolate --eval`."""
    runs = str(tmp_path / "seed{seed}")
    assert cli.main(["train", "--config=configs/lm.py:smoke,encoding=none,layer_pattern="
                     "gdn+none,num_layers=2,seq_len=64,eval_max_factor=4,"
                     "evals=passkey@6+mqar@6", f"--workdir={runs}", "--seeds=0,1",
                     "--config.evals.passkey.trials=2", "--config.evals.mqar.trials=2",
                     "--noprogress", *data_flags]) == 0
    for seed in (0, 1):
        last = fileio.read_jsonl(tmp_path / f"seed{seed}" / "metrics.jsonl")[-1]
        assert 0 <= last["passkey/acc@256"] <= 1 and 0 <= last["mqar/acc@128"] <= 1
    for task in ("passkey", "mqar"):
        assert cli.main(["extrapolate", f"--workdir={tmp_path / 'seed0'}", f"--eval={task}",
                         "--lengths=256", "--depths=0.5", "--trials=2"]) == 0
        row = fileio.read_json(tmp_path / "seed0" / f"retrieval_{task}.json")["lengths"][0]
        assert row["length"] == 256 and row["trials"] == 2 and 0 <= row["acc"] <= 1
