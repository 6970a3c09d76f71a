"""Softmax attention: masks, dense vs chunked vs fused equivalence (values and grads),
compatibility, and what `auto` picks."""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posjax import encoders
from posjax.attention import (
    auto_impl,
    check_compatible,
    fused,
    masks,
    multi_head_attention,
    softmax,
)
from posjax.encoders.base import Dims, Encoding
from posjax.errors import ConfigError

B, L, H, D = 2, 37, 2, 8


# Hand-written encodings, one per site, so the kernels are tested without the real encoders.
@dataclasses.dataclass(frozen=True)
class SlopeBias(Encoding):
    """Logits site: -slope_h |k - q| plus a learned per-head offset table on clipped r."""

    def bias(self, params, q_pos, k_pos, num_heads):
        r = k_pos[None, :] - q_pos[:, None]
        dist = -jnp.abs(r).astype(jnp.float32)
        table = params["table"][:, jnp.clip(r, -4, 4) + 4]
        return params["slope"][:, None, None] * dist[None] + table


@dataclasses.dataclass(frozen=True)
class ClippedRel(Encoding):
    """Content-position site (Shaw-like): q.R^K[clip(r)] on scores, sum_j p_ij R^V[clip(r)]."""

    def rel_score(self, params, q, k, q_pos, k_pos, head):
        r = jnp.clip(k_pos[None, :] - q_pos[:, None], -3, 3) + 3
        return (q @ params["rk"][head].T)[jnp.arange(q.shape[0])[:, None], r] / math.sqrt(8)

    def rel_value(self, params, probs, q_pos, k_pos, head):
        r = jnp.clip(k_pos[None, :] - q_pos[:, None], -3, 3) + 3
        onehot = jax.nn.one_hot(r, 7, dtype=probs.dtype)
        return jnp.einsum("ij,ijr,rd->id", probs, onehot, params["rv"][head])

    def logit_scale(self, head_dim):
        return 0.5 / math.sqrt(head_dim)


def _rope(x, pos, theta=10000.0):
    """Interleaved RoPE of x: [B, L, H, D] at pos: int[B, L]."""
    d = x.shape[-1]
    inv = theta ** (-jnp.arange(0, d, 2, dtype=jnp.float32) / d)
    ang = pos[..., None, None].astype(jnp.float32) * inv
    x0, x1 = x[..., 0::2], x[..., 1::2]
    c, s = jnp.cos(ang), jnp.sin(ang)
    return jnp.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1).reshape(x.shape)


@dataclasses.dataclass(frozen=True)
class Rope(Encoding):
    """Query/key site."""

    def rotate(self, params, q, k, q_pos, k_pos):
        return _rope(q, q_pos), _rope(k, k_pos)


@dataclasses.dataclass(frozen=True)
class WindowRope(Encoding):
    """Score-replacing site (ReRoPE-like): q^T R_{max(r, -w)} k / sqrt(d), two passes."""

    replaces_content = True

    def rel_score(self, params, q, k, q_pos, k_pos, head):
        r = k_pos[None, :] - q_pos[:, None]
        near = (
            _rope(q[None, :, None], q_pos[None])[0, :, 0]
            @ _rope(k[None, :, None], k_pos[None])[0, :, 0].T
        )
        far = _rope(q[None, :, None], jnp.full_like(q_pos, 5)[None])[0, :, 0] @ k.T
        return jnp.where(r >= -5, near, far) / math.sqrt(q.shape[-1]) * params["g"][head]


@dataclasses.dataclass(frozen=True)
class CausalOnly(Encoding):
    causal_only = True


ENCODINGS = {
    "none": (Encoding(), {}),
    "bias": (SlopeBias(), {"slope": jnp.array([0.5, 0.125]), "table": jnp.ones((H, 9)) * 0.1}),
    "rel": (ClippedRel(), {"rk": jnp.ones((H, 7, D)) * 0.2, "rv": jnp.ones((H, 7, D)) * 0.3}),
    "window": (WindowRope(), {"g": jnp.array([1.0, 0.5])}),
}


def _randomize(params, key):
    """Same structure, random values (so per-head indexing bugs show)."""
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(key, max(len(leaves), 1))
    return tree.unflatten(
        [x + 0.3 * jax.random.normal(k_, x.shape) for x, k_ in zip(leaves, keys, strict=False)]
    )


def _perturb(params, key):
    """Real parameters moved by up to 20% (keeping signs: some must stay positive), zeros
    given small noise, so per-head indexing bugs show."""
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(key, max(len(leaves), 1))
    return tree.unflatten(
        [
            x * (1 + 0.2 * jax.random.uniform(k_, x.shape, minval=-1.0))
            + jnp.where(x == 0, 0.1 * jax.random.normal(k_, x.shape), 0.0)
            for x, k_ in zip(leaves, keys, strict=False)
        ]
    )


def _inputs(seed=0, lq=L, lk=L):
    kq, kk, kv = jax.random.split(jax.random.key(seed), 3)
    q = jax.random.normal(kq, (B, lq, H, D))
    k = jax.random.normal(kk, (B, lk, H, D))
    v = jax.random.normal(kv, (B, lk, H, D))
    return q, k, v


def _layout(kind: str, n: int = L):
    """positions, segment ids [B, n]: example 0 packs three segments, example 1 is padded."""
    pos = np.tile(np.arange(n), (B, 1))
    seg = np.ones((B, n), np.int32)
    if kind in ("packed", "padded"):
        cut1, cut2 = n // 3, 2 * n // 3
        seg[0, cut1:cut2], seg[0, cut2:] = 2, 3
        pos[0, cut1:cut2] = np.arange(cut2 - cut1)
        pos[0, cut2:] = np.arange(n - cut2)
    if kind == "padded":
        seg[1, n - 9 :] = 0
        pos[1, n - 9 :] = 0
        seg[0, n - 4 :] = 0
    return jnp.asarray(pos, jnp.int32), jnp.asarray(seg, jnp.int32)


def _run(enc, params, impl, causal, q, k, v, pos, seg, block_size=8, k_pos=None, k_seg=None):
    return multi_head_attention(
        q, k, v, encoding=enc, params=params, q_pos=pos, k_pos=pos if k_pos is None else k_pos,
        q_seg=seg, k_seg=seg if k_seg is None else k_seg, causal=causal, impl=impl,
        block_size=block_size,
    )  # fmt: skip


_jit_run = jax.jit(_run, static_argnums=(0, 2, 3), static_argnames=("block_size",))


def _naive(q, k, v, pos, seg, causal, bias_fn=None):
    """Per-element numpy softmax attention, for one example and one head."""
    lq, lk = q.shape[0], k.shape[0]
    out = np.zeros_like(v[:lq], dtype=np.float64)
    for i in range(lq):
        idx = [
            j
            for j in range(lk)
            if seg[j] != 0 and seg[j] == seg[i] and (not causal or j <= i + lk - lq)
        ]
        if not idx:
            continue
        s = np.array([q[i] @ k[j] / math.sqrt(q.shape[1]) for j in idx], np.float64)
        if bias_fn is not None:
            s = s + np.array([bias_fn(pos[i], pos[j]) for j in idx])
        w = np.exp(s - s.max())
        out[i] = (w / w.sum()) @ v[idx]
    return out


@pytest.mark.parametrize("causal", [True, False])
def test_dense_matches_naive_reference(causal):
    q, k, v = _inputs(1)
    pos, seg = _layout("padded")
    enc, params = ENCODINGS["bias"]
    out = np.asarray(_jit_run(enc, params, "dense", causal, q, k, v, pos, seg))
    slope, table = np.asarray(params["slope"]), np.asarray(params["table"])
    for b in range(B):
        for h in range(H):
            fn = lambda i, j, h=h: -slope[h] * abs(j - i) + table[h, np.clip(j - i, -4, 4) + 4]
            ref = _naive(*(np.asarray(x[b, :, h]) for x in (q, k, v)), pos[b], seg[b], causal, fn)
            np.testing.assert_allclose(out[b, :, h], ref, atol=1e-5)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _dense_and_chunked(enc, causal_modes, params, q, k, v, pos, seg):
    """{causal: (dense, chunked with blocks of 8)} for each mode, in one compiled program."""
    return {
        c: tuple(_run(enc, params, impl, c, q, k, v, pos, seg) for impl in ("dense", "chunked"))
        for c in causal_modes
    }


def _assert_chunked_matches_dense(enc, params, causal_modes, seed):
    q, k, v = _inputs(seed)
    pos, seg = _layout("padded")
    for dense, chunked in _dense_and_chunked(enc, causal_modes, params, q, k, v, pos, seg).values():
        assert np.isfinite(np.asarray(chunked)).all()
        np.testing.assert_allclose(chunked, dense, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", list(ENCODINGS))
def test_chunked_matches_dense(name):
    enc, params = ENCODINGS[name]
    _assert_chunked_matches_dense(enc, _randomize(params, jax.random.key(3)), (True, False), 2)


@pytest.mark.parametrize("impl", ["dense", "chunked"])
def test_packed_segments_do_not_leak_and_padding_is_zero(impl):
    enc, params = ENCODINGS["bias"]
    q, k, v = _inputs(4)
    pos, seg = _layout("padded")
    out = _jit_run(enc, params, impl, False, q, k, v, pos, seg)
    # Change every token outside segment 2 of example 0: segment 2's outputs must not move.
    outside = (seg[0] != 2)[None, :, None, None] & (jnp.arange(B) == 0)[:, None, None, None]
    noise = _inputs(5)
    q2, k2, v2 = (jnp.where(outside, n, x) for x, n in zip((q, k, v), noise, strict=True))
    out2 = _jit_run(enc, params, impl, False, q2, k2, v2, pos, seg)
    inside = np.asarray(seg[0] == 2)
    np.testing.assert_allclose(out2[0, inside], out[0, inside], atol=1e-6)
    assert not np.allclose(out2[0, ~inside], out[0, ~inside])
    np.testing.assert_array_equal(out[seg == 0], 0.0)


def test_cross_attention_lengths_and_bf16():
    q, _, _ = _inputs(6, lq=11)
    _, k, v = _inputs(7, lk=29)
    q_pos = jnp.tile(jnp.arange(18, 29), (B, 1))
    k_pos = jnp.tile(jnp.arange(29), (B, 1))
    q_seg, k_seg = jnp.ones((B, 11), jnp.int32), jnp.ones((B, 29), jnp.int32)
    enc, params = ENCODINGS["bias"]

    @jax.jit
    def outputs(q, k, v):
        run = lambda impl, causal, *x: _run(
            enc, params, impl, causal, *x, q_pos, q_seg, k_pos=k_pos, k_seg=k_seg
        )
        half = [x.astype(jnp.bfloat16) for x in (q, k, v)]
        return (
            run("dense", True, q, k, v),
            run("chunked", True, q, k, v),
            run("dense", False, q, k, v),
            run("chunked", True, *half),
        )

    dense, chunked, full, half = outputs(q, k, v)
    np.testing.assert_allclose(chunked, dense, atol=1e-5)
    # Queries are the last 11 of 29 tokens: the last one sees every key.
    np.testing.assert_allclose(dense[:, -1], full[:, -1], atol=1e-6)
    assert not np.allclose(dense[:, 0], full[:, 0])
    assert half.dtype == jnp.bfloat16
    np.testing.assert_allclose(half.astype(jnp.float32), dense, atol=0.05)


def _assert_grads_agree(enc, params, seed, impl="chunked"):
    """jax.grad of dense and `impl` (chunked: blocks of 8; padded + packed, causal) agree."""
    q, k, v = _inputs(seed)
    pos, seg = _layout("padded")

    @jax.jit
    def grads(q, k, v, params):
        loss = lambda impl, *a: jnp.sum(jnp.sin(_run(enc, a[3], impl, True, *a[:3], pos, seg)))
        return [jax.grad(functools.partial(loss, name), argnums=(0, 1, 2, 3))(q, k, v, params)
                for name in ("dense", impl)]  # fmt: skip

    dense, chunked = grads(q, k, v, params)
    for d, c in zip(jax.tree.leaves(dense), jax.tree.leaves(chunked), strict=True):
        assert np.isfinite(np.asarray(c)).all()
        np.testing.assert_allclose(c, d, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("name", ["bias", "rel", "window"])
def test_grads_of_dense_and_chunked_agree(name):
    enc, params = ENCODINGS[name]
    _assert_grads_agree(enc, _randomize(params, jax.random.key(8)), 9)


def test_fully_masked_rows_have_zero_output_and_finite_grads():
    q, k, v = (x[0, :, 0] for x in _inputs(10))
    seg = jnp.zeros((L,), jnp.int32)
    mask = masks.make(seg, seg, jnp.arange(L), jnp.arange(L), causal=True)
    for attend in softmax.IMPLS.values():
        f = lambda q, attend=attend: attend(q, k, v, mask=mask, block_size=8)
        out, grad = jax.jit(lambda q, f=f: (f(q), jax.grad(lambda q: f(q).sum())(q)))(q)
        np.testing.assert_array_equal(out, 0.0)
        assert np.isfinite(np.asarray(grad)).all()


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=1, max_size=12),
    st.integers(0, 4),
    st.booleans(),
)
def test_allowed_matches_definition(segs, offset, causal):
    seg = np.array(segs, np.int32)
    n = len(segs)
    q_idx, k_idx = np.arange(n) + offset, np.arange(n + offset)
    k_seg = np.concatenate([np.ones(offset, np.int32), seg])
    got = np.asarray(masks.allowed(q_idx, k_idx, seg, k_seg, causal=causal))
    for i in range(n):
        for j in range(n + offset):
            want = k_seg[j] != 0 and k_seg[j] == seg[i] and (not causal or j <= i + offset)
            assert got[i, j] == want


def test_check_compatible_errors():
    bias_enc = ENCODINGS["bias"][0]
    check_compatible(bias_enc, "chunked", causal=False)
    check_compatible(bias_enc, "auto", causal=False)  # auto checks like dense
    check_compatible(Rope(), "linear", causal=True)
    with pytest.raises(ConfigError, match="linear attention never forms the score matrix"):
        check_compatible(bias_enc, "linear", causal=True)
    with pytest.raises(ConfigError, match="its rel_score site"):
        check_compatible(WindowRope(), "linear", causal=True)
    with pytest.raises(ConfigError, match="only for causal"):
        check_compatible(CausalOnly(), "dense", causal=False)
    with pytest.raises(ConfigError, match="only for causal"):
        check_compatible(CausalOnly(), "auto", causal=False)
    check_compatible(bias_enc, "fused", causal=True)
    check_compatible(Rope(), "fused", causal=False)
    with pytest.raises(ConfigError, match=r"its rel_score/rel_value site\): jax.nn.dot_product"):
        check_compatible(ENCODINGS["rel"][0], "fused", causal=True)
    with pytest.raises(ConfigError, match="use attention=dense or chunked or auto for"):
        check_compatible(WindowRope(), "fused", causal=True)
    with pytest.raises(ConfigError, match="did you mean 'flash_bias'.*valid: auto, chunked, "
                       "dense, flash_bias, fused, linear"):
        check_compatible(Encoding(), "flash", causal=True)


# The real registry: every encoding that reaches softmax attention through a site.
REAL = [
    ("t5", {}),
    ("alibi", {}),
    ("kerple_log", {}),
    ("fire", {}),
    ("tupe", {}),
    ("shaw", {}),
    ("xl", {}),
    ("deberta", {}),
    ("rope", {}),
    ("xpos", {}),
    ("rope", {"rerope_window": 6}),
    ("rope", {"logn_train_len": 16}),
]


@pytest.mark.parametrize("name,hp", REAL, ids=["-".join([n, *h]) for n, h in REAL])
def test_real_encodings_chunked_matches_dense(name, hp):
    enc = encoders.get(name, **hp)
    params = enc.init(jax.random.key(0), Dims(H * D, H, D, max_len=32))
    params = _perturb(params, jax.random.key(1))
    # Bidirectional masking is covered above; here only where the encoding itself differs.
    modes = (True, False) if name in ("t5", "deberta") else (True,)
    _assert_chunked_matches_dense(enc, params, modes, 11)


@pytest.mark.parametrize("name,hp", [("xl", {}), ("tupe", {}), ("rope", {"rerope_window": 6})],
                         ids=["xl", "tupe", "rerope"])
def test_prepared_sites_give_the_dense_gradients_in_blocks(name, hp):
    """Sites prepared once for the sequence (rel_prepare, bias_prepare) are sliced into the
    chunked kernel's blocks: the gradients of q, k, v and the parameters match dense."""
    from posjax import encoders

    enc = encoders.get(name, **hp).for_model(True)
    assert enc.rel_prepare is not None or enc.bias_prepare is not None
    params = enc.init(jax.random.key(0), Dims(H * D, H, D, max_len=64))
    _assert_grads_agree(enc, _perturb(params, jax.random.key(1)), 12)


def test_two_dimensional_positions_reach_the_sites():
    """Patch models pass positions [B, N, 2]; the chunked kernel blocks them like 1-D ones."""
    from posjax import encoders

    enc = encoders.get("rope2d")
    params = enc.init(jax.random.key(0), Dims(H * D, H, D))
    grid = jnp.stack(jnp.meshgrid(jnp.arange(5), jnp.arange(7), indexing="ij"), -1)
    pos = jnp.tile(grid.reshape(1, 35, 2), (B, 1, 1)).astype(jnp.int32)
    q, k, v = _inputs(13, lq=35, lk=35)
    seg = jnp.ones((B, 35), jnp.int32)
    dense, chunked = _dense_and_chunked(enc, (False,), params, q, k, v, pos, seg)[False]
    np.testing.assert_allclose(chunked, dense, atol=1e-5)


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _impls(impls, enc, causal, params, q, k, v, q_pos, k_pos, q_seg, k_seg):
    """{impl: output} for each of `impls`; "auto" with dense_max_len=8, blocks of 8."""

    def run(impl):
        return multi_head_attention(
            q, k, v, encoding=enc, params=params, q_pos=q_pos, k_pos=k_pos, q_seg=q_seg,
            k_seg=k_seg, causal=causal, impl=impl, block_size=8, dense_max_len=8,
        )  # fmt: skip

    return {impl: run(impl) for impl in impls}


FUSED = [("rope", {}), ("alibi", {}), ("fire", {}), ("tupe", {})]


@pytest.mark.parametrize("name,hp", FUSED, ids=[n for n, _ in FUSED])
def test_fused_matches_dense(name, hp):
    """jax.nn.dot_product_attention with the encoding's rotation and materialised bias gives
    dense attention's output to 1e-5 in float32: packed and padded rows, self- and
    cross-attention lengths (queries aligned to the last keys), causal and (where the
    encoding allows it) bidirectional."""
    from posjax import encoders

    enc = encoders.get(name, **hp)
    params = _perturb(enc.init(jax.random.key(0), Dims(H * D, H, D, max_len=64)), jax.random.key(1))
    # (causal, Lq, Lk): self-attention both ways, cross-attention lengths causally.
    for causal, lq, lk in ((True, L, L), (False, L, L), (True, 11, 29)):
        if enc.for_model(False).causal_only and not causal:
            continue
        q, k, v = _inputs(5, lq, lk)
        k_pos, k_seg = _layout("padded", lk)
        outs = _impls(("dense", "fused"), enc.for_model(causal), causal, params, q, k, v,
                      k_pos[:, -lq:], k_pos, k_seg[:, -lq:], k_seg)
        np.testing.assert_allclose(outs["fused"], outs["dense"], atol=1e-5, rtol=1e-5)
        padding = np.asarray(k_seg[:, -lq:]) == 0
        np.testing.assert_array_equal(np.asarray(outs["fused"])[padding], 0.0)


def test_fused_grads_match_dense():
    from posjax import encoders

    enc = encoders.get("kerple_log").for_model(True)
    params = _perturb(enc.init(jax.random.key(0), Dims(H * D, H, D)), jax.random.key(2))
    _assert_grads_agree(enc, params, 6, impl="fused")


def test_fused_picks_cudnn_only_for_half_precision_on_gpu():
    assert fused.implementation(jnp.bfloat16, "gpu") == "cudnn"
    assert fused.implementation(jnp.float16, "gpu") == "cudnn"
    assert fused.implementation(jnp.float32, "gpu") == "xla"
    assert fused.implementation(jnp.bfloat16, "cpu") == "xla"
    assert fused.implementation(jnp.bfloat16, "tpu") == "xla"


def test_auto_picks_by_encoding_length_platform_and_dtype():
    from posjax import encoders

    rope, t5, xl = (encoders.get(n) for n in ("rope", "t5", "xl"))
    bf16, f32 = jnp.bfloat16, jnp.float32
    assert auto_impl(rope, 1 << 17, 1024, "gpu", bf16) == "fused"  # cuDNN flash: O(L) memory
    assert auto_impl(t5, 1024, 1024, "gpu", bf16) == "fused"
    assert auto_impl(t5, 1025, 1024, "gpu", bf16) == "flash_bias"  # the bias would be [L, L]
    assert auto_impl(xl, 1024, 1024, "gpu", bf16) == "dense"  # a content-position site
    assert auto_impl(rope, 1024, 1024, "gpu", f32) == "dense"  # cuDNN takes half precision
    for platform in ("cpu", "tpu"):
        assert auto_impl(rope, 1024, 1024, platform, bf16) == "dense"
        assert auto_impl(rope, 1025, 1024, platform, bf16) == "chunked"


@pytest.mark.parametrize("name", ["t5", "rope"])
def test_auto_is_dense_up_to_the_threshold_and_chunked_above(name):
    """On a CPU or TPU. On a GPU a tabulated bias (T5) takes flash_bias above the threshold
    (auto_impl), and auto's output must equal that kernel's."""
    from posjax import encoders

    enc = encoders.get(name).for_model(True)
    params = _perturb(enc.init(jax.random.key(0), Dims(H * D, H, D, max_len=64)), jax.random.key(1))
    # (Lq, Lk): the threshold itself, then max(Lq, Lk) above it for self- and cross-attention.
    for (lq, lk), same_as in (((8, 8), "dense"), ((24, 24), "chunked"), ((8, 24), "chunked")):
        q, k, v = _inputs(5, lq, lk)
        if jax.default_backend() == "gpu":
            same_as = auto_impl(enc, max(lq, lk), 8, "gpu", q.dtype)
        k_pos, k_seg = _layout("packed", lk)
        impls = tuple(dict.fromkeys(("auto", "dense", "chunked", same_as)))
        outs = _impls(impls, enc, True, params, q, k, v, k_pos[:, -lq:], k_pos,
                      k_seg[:, -lq:], k_seg)
        np.testing.assert_array_equal(outs["auto"], outs[same_as])
        # The kernels round differently here, so the exact match says which one auto ran.
        assert lq == lk == 8 or not np.array_equal(outs["dense"], outs["chunked"])


WHOLE_ROWS = [("rope", {}), ("t5", {}), ("alibi", {}), ("fire", {}),
              ("shaw", {}), ("fox", {})]


@pytest.mark.parametrize("name,hp", WHOLE_ROWS, ids=[n for n, _ in WHOLE_ROWS])
def test_whole_rows_match_explicit_single_segments(name, hp):
    """Segment ids None (whole rows at shared positions: no mask, the position terms built
    once for the batch) give what all-ones segment ids give, in every kernel that carries the
    encoding, values and gradients."""
    from posjax import attention, encoders

    enc = encoders.get(name, **hp).for_model(True)
    params = _perturb(enc.init(jax.random.key(0), Dims(H * D, H, D, max_len=64)),
                      jax.random.key(1))
    q, k, v = _inputs(7)
    x = jax.random.normal(jax.random.key(8), (B, L, H * D))
    pos = jnp.tile(jnp.arange(L, dtype=jnp.int32), (B, 1))
    ones = jnp.ones((B, L), jnp.int32)
    impls = [i for i in ("dense", "chunked", "fused", "linear")
             if attention.IMPLS[i].carries(enc)]

    @jax.jit
    def grads(q, k, v, params):
        def loss(impl, seg, q, k, v, params):
            out = multi_head_attention(q, k, v, encoding=enc, params=params, q_pos=pos,
                                       k_pos=pos, q_seg=seg, k_seg=seg, causal=True, x=x,
                                       impl=impl, block_size=8)
            return jnp.sum(jnp.sin(out))
        return {(impl, seg is None): jax.value_and_grad(
            functools.partial(loss, impl, seg), argnums=(0, 1, 2, 3))(q, k, v, params)
            for impl in impls for seg in (None, ones)}

    with jax.default_matmul_precision("highest"):
        result = grads(q, k, v, params)
    for impl in impls:
        whole, explicit = result[impl, True], result[impl, False]
        for w, e in zip(jax.tree.leaves(whole), jax.tree.leaves(explicit), strict=True):
            np.testing.assert_allclose(w, e, atol=1e-5, rtol=1e-5, err_msg=impl)


DISTANCE_ONLY = ["none", "alibi", "t5", "kerple_log", "kerple_power"]


@pytest.mark.parametrize("name", DISTANCE_ONLY)
def test_one_row_of_positions_serves_gapless_segments(name):
    """An encoding that reads only k_pos - q_pos (`distance_only`), handed one row of
    positions 0..L-1 for the batch, gives what each row's own restarting positions give on
    packed and padded segments, in every kernel that takes one row, values and gradients."""
    from posjax import encoders

    enc = encoders.get(name).for_model(True)
    assert enc.distance_only
    params = _perturb(enc.init(jax.random.key(0), Dims(H * D, H, D, max_len=64)),
                      jax.random.key(1))
    q, k, v = _inputs(9)
    pos, seg = _layout("padded")
    row = jnp.arange(L, dtype=jnp.int32)[None]

    @jax.jit
    def grads(q, k, v, params):
        def loss(impl, p, q, k, v, params):
            out = multi_head_attention(q, k, v, encoding=enc, params=params, q_pos=p, k_pos=p,
                                       q_seg=seg, k_seg=seg, causal=True, impl=impl,
                                       block_size=8)
            return jnp.sum(jnp.sin(out))
        return {(impl, p.shape[0]): jax.value_and_grad(
            functools.partial(loss, impl, p), argnums=(0, 1, 2, 3))(q, k, v, params)
            for impl in ("dense", "chunked", "fused") for p in (pos, row)}

    with jax.default_matmul_precision("highest"):
        result = grads(q, k, v, params)
    for impl in ("dense", "chunked", "fused"):
        for a, b in zip(jax.tree.leaves(result[impl, 1]), jax.tree.leaves(result[impl, B]),
                        strict=True):
            np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5, err_msg=impl)


@pytest.mark.parametrize("name,impl", [("rope", "dense"), ("fire", "fused"), ("shaw", "chunked"),
                                       ("none", "linear"), ("dape", "dense")])
def test_one_row_of_positions_is_every_rows_elsewhere(name, impl):
    """Where an encoding reads more than the gap, or a kernel cannot take one row, the row is
    repeated for every example: the same output as passing it B times."""
    from posjax import attention, encoders

    enc = encoders.get(name).for_model(True)
    assert attention.IMPLS[impl].carries(enc)
    params = _perturb(enc.init(jax.random.key(0), Dims(H * D, H, D, max_len=64)),
                      jax.random.key(1))
    q, k, v = _inputs(10)
    _, seg = _layout("packed")
    row = jnp.arange(L, dtype=jnp.int32)[None]
    with jax.default_matmul_precision("highest"):
        one = _jit_run(enc, params, impl, True, q, k, v, row, seg)
        every = _jit_run(enc, params, impl, True, q, k, v, jnp.tile(row, (B, 1)), seg)
    np.testing.assert_allclose(one, every, atol=1e-6, rtol=1e-6)


def _qkv_of(lq=6, lk=6, heads=(2, 2, 2), dims=(8, 8), dtype=jnp.float32):
    rng = np.random.default_rng(0)
    shapes = ((1, lq, heads[0], dims[0]), (1, lk, heads[1], dims[1]), (1, lk, heads[2], 8))
    return [jnp.asarray(rng.standard_normal(s), jnp.float32).astype(dtype) for s in shapes]


@pytest.mark.parametrize("change, message", [
    (dict(dtype=jnp.int32), "q, k and v must be floating point; got int32, int32, int32"),
    (dict(heads=(2, 1, 1)), "q has 2 heads, k 1 and v 1: for grouped-query attention repeat"),
    (dict(dims=(8, 4)), "q's head_dim 8 differs from k's 4"),
    (dict(lq=0, lk=0), "an empty sequence (q 0 tokens, k 0)"),
    (dict(q_pos=jnp.arange(7)[None]), "q_pos has shape (1, 7) for 6 tokens"),
    (dict(q_seg=jnp.ones((1, 5), jnp.int32)), "q_seg has shape (1, 5): segment ids are"),
    (dict(window=-3), "window=-3: a sliding window is W > 0 keys, or 0 for none"),
    (dict(impl="chunked", block_size=0), "block_size=0: the chunked and flash kernels'"),
    (dict(rank3=True), "q, k and v are [B, L, H, Dh]; got shapes (6, 2, 8)"),
])
def test_inputs_that_break_the_docstring_are_one_line_naming_the_argument(change, message):
    """Each was a vmap or broadcast error deep inside JAX, a ZeroDivisionError, all-zero
    output (a negative window) or an integer result truncated from the softmax's."""
    change = dict(change)
    q, k, v = _qkv_of(**{key: change.pop(key) for key in ("lq", "lk", "heads", "dims", "dtype")
                         if key in change})
    if change.pop("rank3", False):
        q, k, v = q[0], k[0], v[0]
    kwargs = dict(encoding=encoders.get("alibi"), params={}, q_pos=jnp.arange(q.shape[-3])[None],
                  k_pos=jnp.arange(k.shape[-3])[None], q_seg=None, k_seg=None, causal=True)
    kwargs.update(change)
    with pytest.raises(ValueError) as raised:
        multi_head_attention(q, k, v, **kwargs)
    assert str(raised.value).startswith("multi_head_attention: ")
    assert message in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize("impl", ["dense", "chunked", "fused", "flash_bias"])
def test_causal_queries_before_the_first_key_get_zero_in_every_kernel(impl):
    """Lq > Lk with the queries aligned to the last keys: the first Lq - Lk queries see no
    key. Chunked gave NaN for a query block that saw no key block, fused the mean of v."""
    q, k, v = _qkv_of(lq=12, lk=5)
    kwargs = dict(encoding=encoders.get("alibi"), params={}, q_pos=jnp.arange(12)[None],
                  k_pos=jnp.arange(5)[None] + 7, q_seg=None, k_seg=None, causal=True,
                  block_size=4)
    with jax.default_matmul_precision("highest"):
        out = multi_head_attention(q, k, v, impl=impl, **kwargs)
        dense = multi_head_attention(q, k, v, impl="dense", **kwargs)
        grads = jax.grad(lambda q: multi_head_attention(q, k, v, impl=impl, **kwargs).sum())(q)
    np.testing.assert_array_equal(np.asarray(out[0, :7]), 0.0)
    np.testing.assert_allclose(np.asarray(out), np.asarray(dense), rtol=1e-5, atol=1e-6)
    assert np.isfinite(np.asarray(grads)).all()
