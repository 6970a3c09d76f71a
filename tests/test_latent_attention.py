"""Multi-head latent attention with decoupled RoPE (DeepSeek-V2, posjax.models.latent):
the layer against DeepSeek-V2's equations (sec. 2.1, eqs. 9-19) written out in float64 from
the layer's own weights, the key's rotated dims shared by the heads, scores that depend only on
n - m, the refusals, and a run through `posjax train` and `posjax extrapolate`."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from posjax import encoders, fileio
from posjax.errors import ConfigError
from posjax.launch import cli
from posjax.models.latent import LatentAttention
from posjax.models.layers import ModelConfig, param_tree

LM = str(Path(__file__).resolve().parents[1] / "configs" / "lm.py")
B, L, H, DH, D, R, THETA = 2, 9, 3, 12, 16, 4, 10000.0


@pytest.fixture(autouse=True)
def highest_precision():
    with jax.default_matmul_precision("highest"):
        yield


def _layer(name="rope", seed=0, hparams=None, **overrides) -> LatentAttention:
    cfg = ModelConfig(**dict(dict(d_model=D, num_heads=H, head_dim=DH, dtype="float32",
                                  attention="dense", kv_lora_rank=8), **overrides))
    hparams = {"fraction": R / DH} if hparams is None and name == "rope" else hparams or {}
    encoding = encoders.get(name, **hparams).for_model(True)
    params = param_tree(encoding.init(jax.random.key(seed), cfg.dims(64)))
    return LatentAttention(cfg, encoding, params, causal=True, rngs=nnx.Rngs(seed))


def _inputs(length=L):
    x = jax.random.normal(jax.random.key(1), (B, length, D))
    pos = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (B, length))
    return x, pos, jnp.ones((B, length), jnp.int32)


def _weights(module):
    kernel = np.asarray(module.kernel[...], np.float64)
    bias = np.asarray(module.bias[...], np.float64) if module.bias is not None else 0.0
    return kernel, bias


def _linear(x, module):
    kernel, bias = _weights(module)
    return np.tensordot(x, kernel, axes=1) + bias


def _rms(x, norm, eps=1e-6):
    scale = np.asarray(norm.scale[...], np.float64)
    return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps) * scale


def _rope(x, positions):
    """RoPE on the last axis of x [B, L, ..., R], interleaved pairs, theta^(-2i/R)."""
    inv_freq = THETA ** (-np.arange(0, R, 2) / R)
    angle = positions[:, :, None, None] * inv_freq  # [B, L, 1, R/2]
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * np.cos(angle) - b * np.sin(angle)
    out[..., 1::2] = b * np.cos(angle) + a * np.sin(angle)
    return out


def _deepseek_v2(layer, x, positions):
    """Eqs. 9-19 of DeepSeek-V2 (arXiv 2405.04434), causal, in float64 -> [B, L, D]."""
    x, positions = np.asarray(x, np.float64), np.asarray(positions, np.float64)
    c_kv = _rms(_linear(x, layer.kv_down), layer.kv_norm)             # eq. 9
    k_c, v = _linear(c_kv, layer.key_up), _linear(c_kv, layer.value_up)  # eqs. 10, 11
    k_r = _rope(_linear(x, layer.key_rope), positions)                 # eq. 15: [B, L, 1, R]
    c_q = x if layer.q_down is None else _rms(_linear(x, layer.q_down), layer.q_norm)
    q = _linear(c_q, layer.query)                                     # eqs. 12, 13, 14
    q = np.concatenate([_rope(q[..., :R], positions), q[..., R:]], -1)
    k = np.concatenate([np.broadcast_to(k_r, (*k_c.shape[:-1], R)), k_c], -1)  # eq. 16
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(DH)         # eq. 17
    scores = np.where(np.tril(np.ones((x.shape[1],) * 2, bool)), scores, -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = np.einsum("bhqk,bkhd->bqhd", p, v)
    kernel, bias = _weights(layer.out)                                # eq. 18
    return np.einsum("bqhd,hdm->bqm", o, kernel) + bias


@pytest.mark.parametrize("q_lora_rank", [0, 6])
def test_the_layer_computes_deepseek_v2s_equations(q_lora_rank):
    layer = _layer(q_lora_rank=q_lora_rank)
    x, pos, seg = _inputs()
    np.testing.assert_allclose(layer(x, pos, seg), _deepseek_v2(layer, x, pos),
                               rtol=1e-4, atol=1e-5)


def test_the_keys_rotated_dims_are_one_projection_shared_by_every_head():
    layer = _layer()
    assert layer.rotated == R
    assert layer.key_rope.kernel.shape == (D, 1, R)
    assert layer.key_up.kernel.shape == (8, H, DH - R)
    q, k, v = layer.project(_inputs()[0])
    assert q.shape == k.shape == (B, L, H, DH) and v.shape == (B, L, H, DH - R)
    np.testing.assert_array_equal(k[..., :R], jnp.broadcast_to(k[:, :, :1, :R], k[..., :R].shape))
    assert not np.allclose(k[:, :, 0, R:], k[:, :, 1, R:])  # the latent's key dims are per head


@settings(max_examples=10, deadline=None)
@given(shift=st.integers(0, 100_000))
def test_the_output_depends_on_positions_only_through_their_differences(shift):
    layer = _layer()
    x, pos, seg = _inputs()
    np.testing.assert_allclose(layer(x, pos + shift, seg), layer(x, pos, seg),
                               rtol=2e-4, atol=2e-5)


def test_an_encoding_without_a_rotation_takes_every_key_dim_from_the_latent():
    layer = _layer("alibi")
    assert layer.rotated == 0 and layer.key_rope is None
    q, k, v = layer.project(_inputs()[0])
    assert q.shape == k.shape == v.shape == (B, L, H, DH)


@pytest.mark.parametrize("impl", ["chunked", "fused"])
def test_every_kernel_computes_the_dense_layer_with_values_narrower_than_the_keys(impl):
    x, pos, _ = _inputs()
    seg = jnp.asarray([[1] * 5 + [2] * (L - 5)] * B)  # two packed documents a row
    dense = _layer()(x, pos, seg)
    np.testing.assert_allclose(_layer(attention=impl, block_size=4)(x, pos, seg), dense,
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("overrides,message", [
    (dict(kv_lora_rank=0, q_lora_rank=4), "give model.kv_lora_rank too"),
    (dict(num_kv_heads=1), "model.num_kv_heads=1 groups them: drop one"),
    (dict(qk_norm=True), "drop qk_norm"),
    (dict(kv_lora_rank=-1), "model.kv_lora_rank=-1 must be >= 0"),
])
def test_options_latent_attention_cannot_take_are_refused_in_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message):
        _layer(**overrides)


@pytest.mark.parametrize("name,hparams,message", [
    ("rope", {}, "rope rotates all 12 dims of each head, leaving no key dims to the latent: "
                 "give the encoding fraction < 1"),
    ("xpos", {}, "xpos rotates without one: use rope"),
])
def test_an_encoding_that_leaves_the_latent_nothing_or_hides_its_rotation_is_refused(
        name, hparams, message):
    with pytest.raises(ConfigError, match=message):
        _layer(name, hparams=hparams)


@pytest.mark.slow
def test_latent_attention_trains_and_is_scored_through_the_cli(tmp_path, data_flags):
    workdir = tmp_path / "run"
    argv = ["train", f"--config={LM}:encoding=rope,smoke,seq_len=32,batch_size=4,steps=3",
            "--config.model.kv_lora_rank=16", "--config.model.q_lora_rank=8",
            "--config.encoding.fraction=0.5", f"--workdir={workdir}", "--noprogress",
            *data_flags]
    assert cli.main(argv) == 0
    config = fileio.read_json(workdir / "config.json")
    assert (config["model"]["kv_lora_rank"], config["model"]["q_lora_rank"]) == (16, 8)
    rows = [r for r in fileio.read_jsonl(workdir / "metrics.jsonl") if "loss" in r]
    assert rows and all(np.isfinite(r["loss"]) for r in rows)
    assert cli.main(["extrapolate", f"--workdir={workdir}", "--lengths=32,64"]) == 0
    rows = fileio.read_json(workdir / "extrapolation.json")["lengths"]
    assert [row["length"] for row in rows] == [32, 64]
    assert all(np.isfinite(row["ppl"]) for row in rows)
