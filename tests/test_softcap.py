"""Logit soft-capping (Gemma 2): model.attn_softcap on every attention logit, position terms
included, and model.final_softcap on the output logits; each against a hand-written float32
reference (transformers' Gemma2 eager attention: s = c tanh(s / c), then the mask)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posjax import encoders
from posjax.attention import auto_impl, capped, check_compatible, multi_head_attention
from posjax.encoders.relative import alibi_slopes
from posjax.errors import ConfigError
from posjax.models import build_model
from posjax.models.layers import Dims, ModelConfig

B, L, H, DH, D = 2, 11, 3, 8, 16
CAP = 2.0  # small enough that most of these logits (std ~3) are squashed


@pytest.fixture(autouse=True)
def highest_precision():
    with jax.default_matmul_precision("highest"):
        yield


def _qkv(seed=0):
    ks = jax.random.split(jax.random.key(seed), 3)
    q, k, v = (jax.random.normal(key, (B, L, H, DH)) for key in ks)
    return 3.0 * q, k, v


def _mha(q, k, v, softcap, impl, encoding="alibi", seg=None):
    pos = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), (B, L))
    enc = encoders.get(encoding).for_model(True)
    params = enc.init(jax.random.key(3), Dims(D, H, DH, 64))
    return multi_head_attention(q, k, v, encoding=enc, params=params, q_pos=pos, k_pos=pos,
                                q_seg=seg, k_seg=seg, causal=True, impl=impl, block_size=4,
                                softcap=softcap)


def _reference(q, k, v, softcap, valid=None):
    """Causal attention with ALiBi's bias -m_h (i - j) inside the cap, then the mask."""
    slopes = alibi_slopes(H)
    i = jnp.arange(L)
    bias = -slopes[:, None, None] * (i[:, None] - i[None, :])
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(DH) + bias
    s = softcap * jnp.tanh(s / softcap) if softcap else s
    ok = jnp.tril(jnp.ones((L, L), bool))[None, None]
    if valid is not None:
        ok = ok & valid[:, None, None, :]
    p = jax.nn.softmax(jnp.where(ok, s, -jnp.inf), axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", p, v)


@pytest.mark.parametrize("impl", ["dense", "chunked"])  # auto: dense here (auto_impl tested below)
@pytest.mark.parametrize("padded", [False, True])
def test_softcap_matches_gemma2s_capped_logits_values_and_gradients(impl, padded):
    q, k, v = _qkv()
    seg = jnp.ones((B, L), jnp.int32).at[1, -3:].set(0) if padded else None
    valid = None if seg is None else seg > 0
    out = _mha(q, k, v, CAP, impl, seg=seg)
    expected = _reference(q, k, v, CAP, valid)
    if padded:  # a padding query's output is 0 in posjax, whatever the reference gives it
        out, expected = out[:, :-3], expected[:, :-3]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    assert np.abs(expected - _reference(q, k, v, 0.0, valid)[:, :expected.shape[1]]).max() > 0.05
    ours = jax.grad(lambda q: (_mha(q, k, v, CAP, impl, seg=seg)[:, :L - 3] ** 2).sum())(q)
    ref = jax.grad(lambda q: (_reference(q, k, v, CAP, valid)[:, :L - 3] ** 2).sum())(q)
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5)


def test_a_cap_far_above_every_logit_changes_nothing_and_capped_is_bounded():
    q, k, v = _qkv(1)
    np.testing.assert_allclose(_mha(q, k, v, 1e6, "dense"), _mha(q, k, v, 0.0, "dense"),
                               rtol=1e-5, atol=1e-6)
    s = jnp.linspace(-1e3, 1e3, 101)
    assert np.abs(capped(s, 30.0)).max() <= 30.0 and (capped(s, 0.0) == s).all()
    np.testing.assert_allclose(capped(jnp.array(0.01), 30.0), 0.01, rtol=1e-6)


@pytest.mark.parametrize("impl", ["dense", "chunked"])
def test_the_cross_head_path_carries_the_cap(impl):
    q, k, v = _qkv(2)
    other = "chunked" if impl == "dense" else "dense"
    out = _mha(q, k, v, CAP, impl, encoding="dape")
    np.testing.assert_allclose(out, _mha(q, k, v, CAP, other, encoding="dape"),
                               rtol=1e-5, atol=1e-6)
    assert np.abs(out - _mha(q, k, v, 0.0, impl, encoding="dape")).max() > 1e-2


def test_auto_keeps_to_dense_and_chunked_with_a_cap():
    rope, t5 = encoders.get("rope"), encoders.get("t5")
    assert auto_impl(rope, 64, 1024, "gpu", jnp.bfloat16, softcap=True) == "dense"
    assert auto_impl(rope, 4096, 1024, "gpu", jnp.bfloat16, softcap=True) == "chunked"
    assert auto_impl(t5, 4096, 1024, "gpu", jnp.bfloat16) == "flash_bias"
    assert auto_impl(t5, 4096, 1024, "gpu", jnp.bfloat16, softcap=True) == "chunked"


def test_bad_caps_are_refused_in_one_line():
    with pytest.raises(ConfigError, match="without a softmax"):
        check_compatible(encoders.get("stickbreaking"), "dense", True, softcap=50.0)
    with pytest.raises(ConfigError, match="attn_softcap=-1.0: a logit cap is c > 0"):
        check_compatible(encoders.get("rope"), "dense", True, softcap=-1.0)
    for name in ("attn_softcap", "final_softcap"):
        with pytest.raises(ConfigError, match=f"model.{name}=-2.0 must be >= 0"):
            ModelConfig(**{name: -2.0})


@pytest.mark.parametrize("kind", ["causal_lm", "classifier"])  # mlm: causal_lm's __call__
def test_final_softcap_caps_the_models_output_logits(kind):
    def logits(cap):
        model = build_model(dict(d_model=D, num_layers=1, num_heads=H, head_dim=DH,
                                 dtype="float32", attention="dense", final_softcap=cap),
                            encoders.get("rope").for_model(kind == "causal_lm"), kind=kind,
                            vocab_size=32, num_classes=3, patch_dim=1, max_len=32,
                            rngs=nnx.Rngs(0))
        tokens = jax.random.randint(jax.random.key(1), (B, L), 0, 32)
        pos = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), (B, L))
        return model(tokens, pos, None)

    plain, cap = logits(0.0), 0.5 * float(np.abs(logits(0.0)).max())
    np.testing.assert_allclose(logits(cap), cap * np.tanh(plain / cap), rtol=1e-5, atol=1e-6)
