"""Issue 52's model options around attention: the output gate (Qiu et al. 2025), a learned sink
logit per head (GPT-OSS) and QK-norm (Qwen3, Gemma 3). Each against a hand-written float32
reference, and each through `posjax train` with configs/lm.py."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posjax import encoders, fileio
from posjax.attention import auto_impl, check_compatible, multi_head_attention
from posjax.errors import ConfigError
from posjax.launch import cli
from posjax.models import build_model
from posjax.models import layers as layers_module
from posjax.models.layers import Attention, ModelConfig, param_tree

LM = str(Path(__file__).resolve().parents[1] / "configs" / "lm.py")
TINY = "smoke,seq_len=32,batch_size=4,steps=3"
B, L, H, DH, D = 2, 11, 3, 8, 16


@pytest.fixture(autouse=True)
def highest_precision():
    with jax.default_matmul_precision("highest"):
        yield


def _layer(name="none", seed=0, **overrides) -> Attention:
    cfg = ModelConfig(**dict(dict(d_model=D, num_heads=H, head_dim=DH, dtype="float32",
                                  attention="dense"), **overrides))
    encoding = encoders.get(name).for_model(True)
    params = param_tree(encoding.init(jax.random.key(seed), cfg.dims(64)))
    return Attention(cfg, encoding, params, causal=True, rngs=nnx.Rngs(seed))


def _inputs(seed=1, length=L):
    x = jax.random.normal(jax.random.key(seed), (B, length, D))
    pos = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (B, length))
    return x, pos, jnp.ones((B, length), jnp.int32)


def _proj(layer, x):
    """Hand-written q, k, v [B, L, H, Dh] from the layer's own weights."""
    def one(p):
        return jnp.einsum("bld,dhk->blhk", x, p.kernel[...]) + p.bias[...]
    return one(layer.query), one(layer.key), one(layer.value)


def _softmax_attention(q, k, v, sink=None, valid=None):
    """Causal softmax attention [B, L, H, Dv], with a sink: an extra logit column that takes
    its share of the softmax and brings no value; valid: bool[B, L] keys (padding False)."""
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    length = q.shape[1]
    ok = jnp.tril(jnp.ones((length, length), bool))[None, None]
    if valid is not None:
        ok = ok & valid[:, None, None, :] & valid[:, None, :, None]
    s = jnp.where(ok, s, -jnp.inf)
    if sink is not None:
        column = jnp.broadcast_to(sink[None, :, None, None], (*s.shape[:3], 1))
        p = jax.nn.softmax(jnp.concatenate([column, s], -1), -1)[..., 1:]
    else:
        p = jax.nn.softmax(s, -1)
    out = jnp.einsum("bhqk,bkhd->bqhd", jnp.nan_to_num(p), v)
    return out if valid is None else out * valid[:, :, None, None]


# -- the output gate ------------------------------------------------------------------------

def _gate_reference(layer, x, gated=True):
    q, k, v = _proj(layer, x)
    o = _softmax_attention(q, k, v)
    if gated:
        g = jnp.einsum("bld,dhk->blhk", x, layer.gate.kernel[...]) + layer.gate.bias[...]
        o = o * jax.nn.sigmoid(g)
    return jnp.einsum("blhk,hkd->bld", o, layer.out.kernel[...]) + layer.out.bias[...]


@pytest.mark.parametrize("form,width", [("elementwise", DH), ("headwise", 1)])
def test_output_gate_is_the_hand_written_sigmoid_gate_and_changes_the_output(form, width):
    layer = _layer(output_gate=form)
    assert layer.gate.kernel.shape == (D, H, width)
    x, pos, seg = _inputs()
    out = layer(x, pos, seg)
    np.testing.assert_allclose(out, _gate_reference(layer, x), rtol=1e-5, atol=1e-5)
    # Not the identity at init: sigmoid(x W_g + b) is about 1/2, not 1.
    assert np.abs(out - _gate_reference(layer, x, gated=False)).max() > 1e-2


@pytest.mark.parametrize("form", ["elementwise", "headwise"])
def test_output_gate_gradients_flow(form):
    layer = _layer(output_gate=form)
    x, pos, seg = _inputs()
    grads = nnx.grad(lambda m: (m(x, pos, seg) ** 2).sum())(layer)
    for leaf in (grads.gate.kernel[...], grads.gate.bias[...]):
        assert np.isfinite(leaf).all() and np.abs(leaf).max() > 0


def test_output_gate_none_adds_no_parameters_and_unknown_forms_are_refused():
    assert _layer().gate is None
    with pytest.raises(ConfigError, match="output_gate"):
        ModelConfig(output_gate="sigmoid")


# -- the sink logit -------------------------------------------------------------------------

def _qkv(seed=0, length=L):
    ks = jax.random.split(jax.random.key(seed), 3)
    return tuple(jax.random.normal(k, (B, length, H, DH)) for k in ks)


def _mha(q, k, v, sink, impl, seg=None, encoding="none", block_size=4, **options):
    length = q.shape[1]
    pos = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (B, length))
    enc = encoders.get(encoding).for_model(True)
    params = enc.init(jax.random.key(3), layers_module.Dims(D, H, DH, 64))
    return multi_head_attention(q, k, v, encoding=enc, params=params, q_pos=pos, k_pos=pos,
                                q_seg=seg, k_seg=seg, causal=True, impl=impl,
                                block_size=block_size, sink=sink, **options)


@pytest.mark.parametrize("impl", ["dense", "chunked", "auto"])
@pytest.mark.parametrize("padded", [False, True])
def test_sink_matches_a_softmax_with_an_extra_logit_values_and_gradient(impl, padded):
    q, k, v = _qkv()
    sink = jnp.array([0.5, -1.0, 2.0])
    seg = jnp.ones((B, L), jnp.int32).at[1, -3:].set(0) if padded else None
    valid = None if seg is None else seg > 0

    def ours(s):
        return _mha(q, k, v, s, impl, seg)

    def ref(s):
        return _softmax_attention(q, k, v, s, valid)

    np.testing.assert_allclose(ours(sink), ref(sink), rtol=1e-5, atol=1e-6)
    loss = lambda f: lambda s: (f(s) * v.mean()).sum() + (f(s) ** 2).sum()  # noqa: E731
    g, g_ref = jax.grad(loss(ours))(sink), jax.grad(loss(ref))(sink)
    np.testing.assert_allclose(g, g_ref, rtol=1e-5, atol=1e-6)
    assert np.abs(g).min() > 0
    # and the gradients of q, k, v agree with the reference too
    gq = jax.grad(lambda q: (_mha(q, k, v, sink, impl, seg) ** 2).sum())(q)
    gq_ref = jax.grad(lambda q: (_softmax_attention(q, k, v, sink, valid) ** 2).sum())(q)
    np.testing.assert_allclose(gq, gq_ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("impl", ["dense", "chunked"])
@pytest.mark.parametrize("very_negative", [-1e9, -jnp.inf])
def test_a_very_negative_sink_is_plain_attention(impl, very_negative):
    q, k, v = _qkv(1)
    plain = _mha(q, k, v, None, impl)
    sunk = _mha(q, k, v, jnp.full((H,), very_negative), impl)
    np.testing.assert_allclose(sunk, plain, rtol=1e-6, atol=1e-6)


def test_a_sink_takes_weight_away_from_the_keys():
    q, k, _ = _qkv(2)
    ones = jnp.ones((B, L, H, 1))  # out = the weights' sum per query
    total = _mha(q, k, ones, jnp.array([0.0, 3.0, -3.0]), "dense")[..., 0]
    assert (total < 1).all() and (total[:, :, 1] < total[:, :, 2]).all()


@pytest.mark.parametrize("impl", ["dense", "chunked"])
def test_the_cross_head_path_carries_the_sink(impl):
    q, k, v = _qkv(3)
    sink = jnp.array([0.5, -1.0, 2.0])
    out = _mha(q, k, v, sink, impl, encoding="dape")
    other = _mha(q, k, v, sink, "chunked" if impl == "dense" else "dense", encoding="dape")
    np.testing.assert_allclose(out, other, rtol=1e-5, atol=1e-6)
    plain = _mha(q, k, v, None, impl, encoding="dape")
    np.testing.assert_allclose(_mha(q, k, v, jnp.full((H,), -jnp.inf), impl, encoding="dape"),
                               plain, rtol=1e-6, atol=1e-6)
    assert np.abs(out - plain).max() > 1e-3
    g = jax.grad(lambda s: (_mha(q, k, v, s, impl, encoding="dape") ** 2).sum())(sink)
    g_other = jax.grad(lambda s: (_mha(q, k, v, s, "dense", encoding="dape") ** 2).sum())(sink)
    np.testing.assert_allclose(g, g_other, rtol=1e-5, atol=1e-6)


# The options a kernel carries or refuses by name (Kernel.carries_sink, carries_softcap):
# check_compatible's keyword, multi_head_attention's, the model field and the word its
# refusal names.
REFUSABLE = {
    "sink": (dict(sink=True), dict(sink=jnp.zeros((H,))), dict(sink_logit=True), "sink"),
    "softcap": (dict(softcap=50.0), dict(sink=None, softcap=50.0), dict(attn_softcap=50.0),
                "attn_softcap"),
}


@pytest.mark.parametrize("option", REFUSABLE)
@pytest.mark.parametrize("impl,named", [
    ("fused", "cuDNN's jax.nn.dot_product_attention"),
    ("linear", "linear attention"),
    ("flash_bias", "flash_bias"),
])
def test_kernels_without_an_option_refuse_it_by_name(option, impl, named):
    check, mha, field, word = REFUSABLE[option]
    rope = encoders.get("rope").for_model(True)
    for call in (
        lambda: check_compatible(rope, impl, True, **check),
        lambda: _mha(*_qkv(), impl=impl, encoding="rope", **mha),
        lambda: build_model(dict(d_model=D, num_layers=1, num_heads=H, head_dim=DH,
                                 attention=impl, **field), rope, kind="causal_lm",
                            vocab_size=32, num_classes=1, patch_dim=1, max_len=32,
                            rngs=nnx.Rngs(0)),
    ):
        with pytest.raises(ConfigError) as err:
            call()
        message = str(err.value)
        assert "\n" not in message and f"attention={impl!r}" in message and named in message
        assert word in message and "use attention=dense or chunked or auto" in message


def test_auto_never_picks_fused_with_a_sink():
    rope = encoders.get("rope")
    assert auto_impl(rope, 64, 1024, "gpu", jnp.bfloat16) == "fused"
    assert auto_impl(rope, 64, 1024, "gpu", jnp.bfloat16, sink=True) == "dense"
    assert auto_impl(rope, 4096, 1024, "gpu", jnp.bfloat16, sink=True) == "chunked"


def test_a_sink_needs_a_softmax_and_one_logit_per_head():
    with pytest.raises(ConfigError, match="without a softmax"):
        check_compatible(encoders.get("stickbreaking"), "dense", True, sink=True)
    with pytest.raises(ConfigError, match="one per head"):
        _mha(*_qkv(), jnp.zeros((H + 1,)), "dense")


def test_the_layer_sink_is_a_zero_parameter_per_head_that_trains():
    layer = _layer("rope", sink_logit=True)
    assert layer.sink.shape == (H,) and (layer.sink[...] == 0).all()
    x, pos, seg = _inputs()
    q, k, v = _proj(layer, x)
    layer_nosink = _layer("rope")
    assert np.abs(layer(x, pos, seg) - layer_nosink(x, pos, seg)).max() > 1e-3
    grads = nnx.grad(lambda m: (m(x, pos, seg) ** 2).sum())(layer)
    assert np.isfinite(grads.sink[...]).all() and np.abs(grads.sink[...]).min() > 0


# -- QK-norm --------------------------------------------------------------------------------

def test_qk_norm_gives_q_and_k_unit_rms_per_head_before_the_rotation(monkeypatch):
    seen = {}
    real = layers_module.multi_head_attention

    def spy(q, k, v, **kw):  # what the layer hands over: the rotation happens inside
        seen["q"], seen["k"] = q, k
        return real(q, k, v, **kw)

    monkeypatch.setattr(layers_module, "multi_head_attention", spy)
    layer = _layer("rope", qk_norm=True, num_kv_heads=1)
    assert layer.q_norm.scale.shape == (DH,) and layer.k_norm.scale.shape == (DH,)
    x, pos, seg = _inputs()
    x = 7.0 * x  # far from unit scale before the norm
    layer(x, pos, seg)
    for name in ("q", "k"):
        rms = np.sqrt(np.mean(np.square(seen[name]), axis=-1))
        np.testing.assert_allclose(rms, 1.0, rtol=1e-4)
    # ... and they are the projections, normalised (the unnormalised ones are not unit RMS)
    q, k, _ = _proj(layer, x)
    assert np.abs(np.sqrt(np.mean(np.square(q), -1)) - 1).max() > 0.5
    np.testing.assert_allclose(seen["q"], q / np.sqrt(np.mean(np.square(q), -1,
                                                              keepdims=True) + 1e-6),
                               rtol=1e-4, atol=1e-5)
    # the learned scale is per head dim, shared by the heads
    layer.q_norm.scale[...] = jnp.arange(1.0, DH + 1)
    layer(x, pos, seg)
    np.testing.assert_allclose(np.sqrt(np.mean(np.square(seen["q"] / jnp.arange(1.0, DH + 1)),
                                                -1)), 1.0, rtol=1e-4)


def test_qk_layer_norm_per_head_removes_each_heads_mean_and_scales_each_head_its_own():
    """qk_norm_axes=per_head with qk_norm_type=layernorm_no_bias (Command R+'s q_norm and
    k_norm, transformers' CohereLayerNorm over (heads, head_dim)): each head's Dh values less
    their mean, over their RMS, times that head's own scale."""
    layer = _layer("rope", qk_norm=True, qk_norm_axes="per_head",
                   qk_norm_type="layernorm_no_bias")
    assert layer.q_norm.scale.shape == (H * DH,) and layer.q_norm.bias is None
    scale = jax.random.uniform(jax.random.key(4), (H, DH), minval=0.5, maxval=2.0)
    layer.q_norm.scale[...] = scale.reshape(-1)
    x, *_ = _inputs()
    q, _, _ = _proj(layer, 7.0 * x)
    centred = q - q.mean(-1, keepdims=True)
    expected = centred / np.sqrt(np.mean(np.square(centred), -1, keepdims=True) + 1e-6) * scale
    np.testing.assert_allclose(layer.project(7.0 * x)[0], expected, rtol=1e-4, atol=1e-5)
    with pytest.raises(ConfigError, match="model.qk_norm_type='layernorm' says how qk_norm "
                       "normalises, and qk_norm is false"):
        ModelConfig(qk_norm_type="layernorm")


def test_rope_stays_relative_with_qk_norm():
    layer = _layer("rope", qk_norm=True)
    x, pos, seg = _inputs(length=16)
    out = layer(x, pos, seg)
    shifted = layer(x, pos + 37, seg)
    np.testing.assert_allclose(shifted, out, rtol=1e-4, atol=1e-5)
    # the scores q_m.k_n after the rotation depend on n - m only
    q, k, _ = layer.project(x)

    def scores(shift):
        rq, rk = layer.encoding.rotate({}, q, k, pos + shift, pos + shift)
        return np.einsum("bqhd,bkhd->bhqk", rq, rk)

    np.testing.assert_allclose(scores(13), scores(0), rtol=1e-4, atol=1e-4)


# -- end to end -----------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("flag", ["--config.model.output_gate=elementwise",
                                  "--config.model.output_gate=headwise",
                                  "--config.model.sink_logit=true",
                                  "--config.model.qk_norm=true"])
def test_each_option_trains_through_posjax_train(tmp_path, data_flags, flag):
    workdir = tmp_path / "run"
    argv = ["train", f"--config={LM}:encoding=rope,{TINY}", flag, f"--workdir={workdir}",
            "--noprogress", "--config.train.log_every_steps=1", *data_flags]
    assert cli.main(argv) == 0
    rows = fileio.read_jsonl(workdir / "metrics.jsonl")
    assert rows and all(np.isfinite(r["loss"]) for r in rows if "loss" in r)
    key, value = flag.removeprefix("--config.model.").split("=")
    saved = fileio.read_json(workdir / "config.json")["model"][key]
    assert str(saved).lower() == value


def _kernel_blocks(listing: str) -> dict[str, str]:
    """`posjax list attention`'s text by kernel: each name's line and its indented lines."""
    blocks: dict[str, str] = {}
    for line in listing.splitlines():
        if line and not line.startswith(" "):
            name = line
        blocks[name] = blocks.get(name, "") + line + "\n"
    return blocks


@pytest.mark.parametrize("line,carrier,refuser,reason", [
    ("sink logit (model.sink_logit)", "dense", "fused", "cuDNN's"),
    ("sliding window (model.window)", "chunked", "linear", "linear attention's prefix sums"),
    ("logit cap (model.attn_softcap)", "dense", "linear", "linear attention never forms"),
])
def test_list_attention_says_which_kernels_carry_each_option(line, carrier, refuser, reason):
    from posjax.launch import discover

    blocks = _kernel_blocks(discover.listing("attention"))
    assert f"{line}: yes" in blocks[carrier]
    assert f"{line}: no ({reason}" in " ".join(blocks[refuser].split())
