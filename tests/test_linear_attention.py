"""Linear attention: O(L) chunked scan == quadratic formula, RoPE relativity, segments."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax.attention import linear, multi_head_attention
from posjax.encoders.base import Encoding
from posjax.errors import ConfigError

B, L, H, D = 2, 45, 2, 8


def _rope(x, pos, theta=100.0):
    """Interleaved RoPE of x: [B, L, H, D] at pos: int[B, L]."""
    d = x.shape[-1]
    inv = theta ** (-jnp.arange(0, d, 2, dtype=jnp.float32) / d)
    ang = pos[..., None, None].astype(jnp.float32) * inv
    x0, x1 = x[..., 0::2], x[..., 1::2]
    c, s = jnp.cos(ang), jnp.sin(ang)
    return jnp.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1).reshape(x.shape)


@dataclasses.dataclass(frozen=True)
class Rope(Encoding):
    def rotate(self, params, q, k, q_pos, k_pos):
        return _rope(q, q_pos), _rope(k, k_pos)


@dataclasses.dataclass(frozen=True)
class DecayRope(Encoding):
    """xPos-like: rotate, then scale q by 0.9^(m/8) and k by 0.9^(-n/8)."""

    def rotate(self, params, q, k, q_pos, k_pos):
        sq = 0.9 ** (q_pos.astype(jnp.float32) / 8)
        sk = 0.9 ** (-k_pos.astype(jnp.float32) / 8)
        return _rope(q, q_pos) * sq[..., None, None], _rope(k, k_pos) * sk[..., None, None]


@dataclasses.dataclass(frozen=True)
class Bias(Encoding):
    def bias(self, params, q_pos, k_pos, num_heads):
        return jnp.zeros((num_heads, q_pos.shape[0], k_pos.shape[0]))


ENCODINGS = {"none": Encoding(), "rope": Rope(), "decay": DecayRope()}


def _inputs(seed=0):
    kq, kk, kv = jax.random.split(jax.random.key(seed), 3)
    return tuple(jax.random.normal(x, (B, L, H, D)) for x in (kq, kk, kv))


def _layout():
    """Example 0 packs segments of 24, 11 and 6 tokens then 4 padding; example 1 is one segment."""
    seg = np.ones((B, L), np.int32)
    pos = np.tile(np.arange(L), (B, 1))
    seg[0, 24:35], seg[0, 35:41], seg[0, 41:] = 2, 3, 0
    pos[0, 24:35], pos[0, 35:41], pos[0, 41:] = np.arange(11), np.arange(6), 0
    return jnp.asarray(pos, jnp.int32), jnp.asarray(seg, jnp.int32)


def _kw(enc, pos, seg, causal, feature):
    return dict(
        encoding=enc, params={}, q_pos=pos, k_pos=pos, q_seg=seg, k_seg=seg, causal=causal,
        feature=feature,
    )  # fmt: skip


_linear = jax.jit(
    linear.linear_attention, static_argnames=("encoding", "causal", "feature", "block_size")
)
_reference = jax.jit(linear.linear_reference, static_argnames=("encoding", "causal", "feature"))


@functools.partial(jax.jit, static_argnames=("encoding", "causal", "feature"))
def _scan_and_reference(q, k, v, **kw):
    """(chunked scan with chunks of 8, quadratic reference) in one compiled program."""
    return linear.linear_attention(q, k, v, **kw, block_size=8), linear.linear_reference(
        q, k, v, **kw
    )


@pytest.mark.parametrize("feature", ["elu", "cos"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", list(ENCODINGS))
def test_chunked_scan_matches_quadratic_form(name, causal, feature):
    q, k, v = _inputs(1)
    pos, seg = _layout()
    # Chunks of 8 over L = 45: a partial last chunk, a segment boundary on a chunk boundary
    # (24), two inside chunks (35, 41), and segments spanning several chunks.
    scan, ref = _scan_and_reference(q, k, v, **_kw(ENCODINGS[name], pos, seg, causal, feature))
    assert np.isfinite(np.asarray(ref)).all()
    np.testing.assert_array_equal(ref[seg == 0], 0.0)
    np.testing.assert_allclose(scan, ref, atol=2e-5)


def test_elu_without_rotation_is_katharopoulos_formula():
    q, k, v = (np.asarray(x[0, :, 0], np.float64) for x in _inputs(2))
    phi = lambda x: np.where(x > 0, x + 1, np.exp(x))
    want = np.stack(
        [(phi(q[i]) @ phi(k[: i + 1]).T) @ v[: i + 1] / (phi(q[i]) @ phi(k[: i + 1]).sum(0))
         for i in range(L)]
    )  # fmt: skip
    pos, seg = jnp.zeros((1, L), jnp.int32), jnp.ones((1, L), jnp.int32)
    args = [jnp.asarray(x, jnp.float32)[None, :, None] for x in (q, k, v)]
    got = _linear(*args, **_kw(Encoding(), pos, seg, True, "elu"), block_size=8)
    np.testing.assert_allclose(got[0, :, 0], want, atol=1e-5)


def test_cos_feature_is_one_plus_cosine_of_rotated_vectors():
    q, k, v = _inputs(3)
    pos, seg = _layout()
    qn, kn = (x / jnp.linalg.norm(x, axis=-1, keepdims=True) for x in (q, k))
    qr, kr = _rope(qn, pos), _rope(kn, pos)
    w = 1.0 + jnp.einsum("bihd,bjhd->bhij", qr, kr)
    ok = (seg[:, :, None] == seg[:, None, :]) & (seg[:, None, :] != 0)
    w = jnp.where(ok[:, None], w, 0.0)
    den = jnp.where(w.sum(-1) == 0, 1.0, w.sum(-1))
    want = jnp.einsum("bhij,bjhd->bihd", w / den[..., None], v)
    got = _reference(q, k, v, **_kw(Rope(), pos, seg, False, "cos"))
    np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("feature", ["elu", "cos"])
def test_rope_linear_attention_is_relative(feature):
    q, k, v = _inputs(4)
    pos = jnp.tile(jnp.arange(L, dtype=jnp.int32), (B, 1))
    seg = jnp.ones((B, L), jnp.int32)
    a = _linear(q, k, v, **_kw(Rope(), pos, seg, True, feature), block_size=16)
    b = _linear(q, k, v, **_kw(Rope(), pos + 1000, seg, True, feature), block_size=16)
    np.testing.assert_allclose(a, b, atol=5e-5)
    # Not position-free: reversing positions changes the numerator's rotations.
    c = _linear(q, k, v, **_kw(Rope(), pos[:, ::-1], seg, True, feature), block_size=16)
    assert not np.allclose(a, c, atol=1e-3)


@pytest.mark.parametrize("causal", [True, False])
def test_segments_do_not_leak(causal):
    q, k, v = _inputs(5)
    pos, seg = _layout()
    kw = _kw(Rope(), pos, seg, causal, "elu")
    out = _linear(q, k, v, **kw, block_size=16)
    outside = (seg[0] != 2)[None, :, None, None] & (jnp.arange(B) == 0)[:, None, None, None]
    q2, k2, v2 = (jnp.where(outside, n, x) for x, n in zip((q, k, v), _inputs(6), strict=True))
    out2 = _linear(q2, k2, v2, **kw, block_size=16)
    inside = np.asarray(seg[0] == 2)
    np.testing.assert_allclose(out2[0, inside], out[0, inside], atol=1e-6)


@pytest.mark.parametrize("feature", ["elu", "cos"])
def test_grads_of_scan_and_quadratic_form_agree(feature):
    q, k, v = _inputs(7)
    pos, seg = _layout()
    kw = _kw(DecayRope(), pos, seg, True, feature)
    scan = lambda q, k, v: jnp.sum(jnp.sin(linear.linear_attention(q, k, v, **kw, block_size=8)))
    quad = lambda q, k, v: jnp.sum(jnp.sin(linear.linear_reference(q, k, v, **kw)))
    gs = jax.jit(jax.grad(scan, argnums=(0, 1, 2)))(q, k, v)
    gq = jax.jit(jax.grad(quad, argnums=(0, 1, 2)))(q, k, v)
    for a, b in zip(gs, gq, strict=True):
        np.testing.assert_allclose(a, b, atol=5e-5, rtol=1e-4)


def test_multi_head_attention_linear_impl_and_errors():
    q, k, v = _inputs(8)
    pos, seg = _layout()
    common = dict(params={}, q_pos=pos, k_pos=pos, q_seg=seg, k_seg=seg, causal=True)
    out = multi_head_attention(
        q, k, v, encoding=Rope(), impl="linear", linear_feature="cos", block_size=16, **common
    )
    ref = _reference(q, k, v, **_kw(Rope(), pos, seg, True, "cos"))
    np.testing.assert_allclose(out, ref, atol=2e-5)
    with pytest.raises(ConfigError, match="linear attention never forms the score matrix"):
        multi_head_attention(q, k, v, encoding=Bias(), impl="linear", **common)
    with pytest.raises(ConfigError, match="valid: cos, elu"):
        multi_head_attention(
            q, k, v, encoding=Rope(), impl="linear", linear_feature="relu", **common
        )
    with pytest.raises(ConfigError, match="as many queries as keys"):
        multi_head_attention(
            q[:, :5], k, v, encoding=Rope(), impl="linear",
            **{**common, "q_pos": pos[:, :5], "q_seg": seg[:, :5]},
        )  # fmt: skip


REAL = [("rope", {}), ("xpos", {}), ("rope", {"logn_train_len": 16})]


@pytest.mark.parametrize("name,hp", REAL, ids=["rope", "xpos", "rope-logn"])
def test_real_rotary_encodings(name, hp):
    from posjax import encoders
    from posjax.encoders.base import Dims

    enc = encoders.get(name, **hp)
    params = enc.init(jax.random.key(0), Dims(H * D, H, D, max_len=32))
    q, k, v = _inputs(9)
    pos, seg = _layout()
    for feature in ("elu", "cos"):
        kw = dict(encoding=enc, params=params, q_pos=pos, k_pos=pos, q_seg=seg, k_seg=seg,
                  causal=True, feature=feature)  # fmt: skip
        ref = linear.linear_reference(q, k, v, **kw)
        got = linear.linear_attention(q, k, v, **kw, block_size=16)
        np.testing.assert_allclose(got, ref, atol=2e-5)
    with pytest.raises(ConfigError, match="alibi"):
        multi_head_attention(
            q, k, v, encoding=encoders.get("alibi"), params={}, q_pos=pos, k_pos=pos,
            q_seg=seg, k_seg=seg, causal=True, impl="linear",
        )  # fmt: skip


def test_an_unknown_feature_map_is_one_line_before_the_run_writes_anything(tmp_path, capsys):
    """linear_feature=bogus was refused only when the model was first traced, after
    config.json, checkpoints/ and the lock were written."""
    from pathlib import Path

    from posjax.launch import cli

    lm = Path(__file__).resolve().parents[1] / "configs" / "lm.py"
    workdir = tmp_path / "run"
    assert cli.main(["train", f"--config={lm}:smoke,attention=linear,linear_feature=bogus",
                     f"--workdir={workdir}"]) == 2
    assert capsys.readouterr().err.strip() == (
        "posjax train: error: unknown model.linear_feature 'bogus'; valid: cos, elu")
    assert not workdir.exists()
