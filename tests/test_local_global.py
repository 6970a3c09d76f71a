"""Local and global layers: the sliding window in every kernel that carries it (dense ==
chunked == a masked reference, fused's local_window_size, flash_bias, the cross-head path),
Llama 4's chunked attention in every kernel, the refusals, layer_pattern's per-layer settings,
and Gemma 3 / Gemma 4 / SWAN-GPT / Llama 4 models."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from posjax import encoders
from posjax.attention import check_compatible, masks, multi_head_attention
from posjax.encoders import Dims
from posjax.errors import ConfigError
from posjax.models import ModelConfig, build_model, pattern
from posjax.models.transformer import layer_chunks, layer_encodings, layer_specs, layer_windows

B, H, DH = 2, 2, 8


@pytest.fixture(autouse=True)
def highest_precision():
    with jax.default_matmul_precision("highest"):
        yield


def _qkv(lq, lk=None, seed=0):
    lk = lq if lk is None else lk
    kq, kk, kv = jax.random.split(jax.random.key(seed), 3)
    return (jax.random.normal(kq, (B, lq, H, DH)), jax.random.normal(kk, (B, lk, H, DH)),
            jax.random.normal(kv, (B, lk, H, DH)))


def _layout(length, packed):
    """(positions, segment ids) int32[B, L]: row 0 packs two documents and ends in padding
    when `packed`, row 1 is whole; None segment ids (whole rows) otherwise."""
    pos = np.tile(np.arange(length), (B, 1))
    if not packed:
        return jnp.asarray(pos, jnp.int32), None
    seg = np.ones((B, length), np.int32)
    cut = length // 2
    seg[0, cut:] = 2
    pos[0, cut:] = np.arange(length - cut)
    seg[0, -2:] = 0
    return jnp.asarray(pos, jnp.int32), jnp.asarray(seg, jnp.int32)


@functools.partial(jax.jit, static_argnames=("impl", "window", "encoding", "block_size",
                                             "chunk"))
def _attend(q, k, v, pos, seg, *, impl, window, encoding="none", block_size=4, params=None,
            chunk=0, x=None):
    """multi_head_attention, causal, the queries aligned to the last keys; x: the layer's
    input [B, L, D], for a content-dependent encoding."""
    enc = encoders.get(encoding).for_model(True)
    lq = q.shape[1]
    return multi_head_attention(
        q, k, v, encoding=enc, params={} if params is None else params, q_pos=pos[:, -lq:],
        k_pos=pos, q_seg=None if seg is None else seg[:, -lq:], k_seg=seg, causal=True,
        impl=impl, block_size=block_size, window=window, attention_chunk=chunk, x=x)


def _reference(q, k, v, seg, window, chunk=0):
    """NumPy float64 softmax attention over the keys j with q_idx - W < j <= q_idx in the
    query's segment (queries aligned to the last keys) and, with a chunk C, j // C ==
    q_idx // C (transformers' chunked_overlay); a query with no key gets 0."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    lq, lk = q.shape[1], k.shape[1]
    seg = np.ones((B, lk), int) if seg is None else np.asarray(seg)
    out = np.zeros(q.shape[:3] + (v.shape[-1],))
    for b in range(B):
        for i in range(lq):
            qi = lk - lq + i
            keys = [j for j in range(lk) if seg[b, j] and seg[b, j] == seg[b, qi]
                    and j <= qi and (not window or qi - j < window)
                    and (not chunk or j // chunk == qi // chunk)]
            if not keys:
                continue
            s = np.einsum("hd,khd->hk", q[b, i], k[b, keys]) / math.sqrt(DH)
            p = np.exp(s - s.max(-1, keepdims=True))
            out[b, i] = np.einsum("hk,khd->hd", p / p.sum(-1, keepdims=True), v[b, keys])
    return out


# -- the window in the kernels --------------------------------------------------------------

@pytest.mark.parametrize("packed", [False, True])
def test_dense_and_chunked_match_a_masked_reference(packed):
    length = 14  # blocks of 4: a partial last block
    q, k, v = _qkv(length)
    pos, seg = _layout(length, packed)
    for window in (1, 5, length + 2):
        ref = _reference(q, k, v, seg, window)
        for impl in ("dense", "chunked"):
            out = _attend(q, k, v, pos, seg, impl=impl, window=window)
            np.testing.assert_allclose(out, ref, atol=2e-6, err_msg=f"{impl}, W={window}")


@settings(max_examples=4, deadline=None)
@given(window=st.integers(1, 20), block=st.sampled_from([2, 4, 8]),
       lq=st.integers(1, 12), seed=st.integers(0, 3))
def test_chunked_equals_dense_for_any_window_block_and_query_count(window, block, lq, seed):
    """Cross-attention lengths (Lq <= Lk = 12, queries aligned to the last keys) included."""
    q, k, v = _qkv(lq, 12, seed)
    pos, seg = _layout(12, packed=seed % 2 == 1)
    dense = _attend(q, k, v, pos, seg, impl="dense", window=window)
    chunked = _attend(q, k, v, pos, seg, impl="chunked", window=window, block_size=block)
    np.testing.assert_allclose(chunked, dense, atol=2e-6)
    np.testing.assert_allclose(dense, _reference(q, k, v, seg, window), atol=2e-6)


def test_block_visible_skips_exactly_the_blocks_the_window_hides():
    """A key block is visited iff some pair in it is allowed (no over- or under-skipping)."""
    for window in (1, 2, 3, 5, 8, 13):
        for bq, bk in ((4, 4), (2, 8), (8, 2)):
            for qs in range(0, 24, bq):
                for ks in range(0, 24, bk):
                    gap = np.arange(qs, qs + bq)[:, None] - np.arange(ks, ks + bk)[None, :]
                    ok = (gap >= 0) & (gap < window)
                    seen = masks.block_visible(qs, bq, ks, causal=True, k_len=bk,
                                               window=window)
                    assert bool(seen) == bool(ok.any()), (window, bq, bk, qs, ks)


@pytest.mark.parametrize("impl", ["dense", "chunked", "fused"])
def test_keys_outside_the_window_do_not_change_a_query(impl):
    length, window = 16, 4
    q, k, v = _qkv(length)
    pos, _ = _layout(length, False)
    out = _attend(q, k, v, pos, None, impl=impl, window=window)
    # Perturb every key and value older than query i's window: query i and earlier queries
    # whose windows stay clear of the change keep their outputs exactly.
    i = 11
    far = jnp.arange(length) <= i - window
    noise = jax.random.normal(jax.random.key(9), k.shape)
    k2 = jnp.where(far[None, :, None, None], k + 3 * noise, k)
    v2 = jnp.where(far[None, :, None, None], v - 2 * noise, v)
    out2 = _attend(q, k2, v2, pos, None, impl=impl, window=window)
    np.testing.assert_array_equal(out2[:, i:], out[:, i:])
    assert np.abs(out2[:, :i] - out[:, :i]).max() > 1e-3  # the perturbation is real


@pytest.fixture
def recorder(monkeypatch):
    """jax.nn.dot_product_attention replaced by a recorder of what it is handed (then the
    XLA implementation runs with those arguments)."""
    calls: list[dict] = []
    real = jax.nn.dot_product_attention

    def record(query, key, value, bias=None, mask=None, *, implementation=None, **kw):
        calls.append(dict(kw, mask=None if mask is None else mask.shape,
                          implementation=implementation))
        return real(query, key, value, bias=bias, mask=mask, implementation="xla", **kw)

    monkeypatch.setattr(jax.nn, "dot_product_attention", record)
    jax.clear_caches()
    yield calls
    jax.clear_caches()


@pytest.mark.parametrize("packed", [False, True])
def test_fused_hands_the_library_a_left_window_of_w_minus_1(recorder, packed):
    """Square attention: local_window_size=(W - 1, 0), which keeps q - (W - 1) <= k <= q, and
    equals the dense kernel's output."""
    length, window = 12, 5
    q, k, v = _qkv(length)
    pos, seg = _layout(length, packed)
    out = _attend(q, k, v, pos, seg, impl="fused", window=window)
    (call,) = recorder
    assert call["local_window_size"] == (window - 1, 0)
    assert call["is_causal"] is False and call["implementation"] == "xla"  # float32 on CPU
    np.testing.assert_allclose(out, _attend(q, k, v, pos, seg, impl="dense", window=window),
                               atol=2e-6)


@pytest.mark.parametrize("packed", [False, True])
def test_fused_hands_the_library_the_chunks_in_its_segment_mask(recorder, packed):
    """Chunked attention reaches jax.nn.dot_product_attention (cuDNN on a GPU) as a boolean
    [B, 1, L, L] mask of the cut segment ids, whole rows too, and no window; the output is
    the masked reference's."""
    length = 12
    q, k, v = _qkv(length)
    pos, seg = _layout(length, packed)
    out = _attend(q, k, v, pos, seg, impl="fused", window=0, chunk=5)
    (call,) = recorder
    assert call["mask"] == (B, 1, length, length) and call["local_window_size"] is None
    np.testing.assert_allclose(out, _reference(q, k, v, seg, 0, 5), atol=2e-6)


def test_fused_on_a_gpu_gives_cudnn_the_window_under_its_causal_mask(recorder, monkeypatch):
    """bfloat16 on a "gpu": implementation="cudnn", is_causal and local_window_size=(W-1, 0),
    which jax turns into cuDNN's sliding_window_length = W."""
    from posjax.attention import fused

    q, k, v = (x.astype(jnp.bfloat16) for x in _qkv(8))
    out = fused.fused(q, k, v, q_seg=None, k_seg=None, causal=True, scale=DH ** -0.5,
                      platform="gpu", window=3)
    (call,) = recorder
    assert call["implementation"] == "cudnn" and call["is_causal"] is True
    assert call["local_window_size"] == (2, 0) and call["mask"] is None
    ref = _reference(q.astype(jnp.float32), k.astype(jnp.float32), v.astype(jnp.float32),
                     None, 3)
    np.testing.assert_allclose(out.astype(jnp.float32), ref, atol=3e-2)


def test_fused_folds_the_window_into_the_mask_for_cross_attention_lengths(recorder):
    """Lq != Lk: the library's window counts from token 0 of both, posjax aligns the queries
    to the last keys, so the window goes into the boolean mask instead."""
    q, k, v = _qkv(5, 12)
    pos, seg = _layout(12, True)
    out = _attend(q, k, v, pos, seg, impl="fused", window=4)
    (call,) = recorder
    assert call["local_window_size"] is None and call["mask"] is not None
    np.testing.assert_allclose(out, _reference(q, k, v, seg, 4), atol=2e-6)


def test_flash_bias_carries_the_window():
    """ALiBi's table through the Pallas kernel (interpret mode here) with a window."""
    enc = encoders.get("alibi").for_model(True)
    params = enc.init(jax.random.key(0), Dims(H * DH, H, DH, 64))
    q, k, v = _qkv(16)
    pos, seg = _layout(16, True)
    run = functools.partial(_attend, q, k, v, pos, seg, window=5, encoding="alibi",
                            params=params, block_size=8)
    np.testing.assert_allclose(run(impl="flash_bias"), run(impl="dense"), atol=2e-5)


def test_the_cross_head_path_carries_the_window():
    """DAPE (logits mixed across heads): dense == chunked under a window."""
    enc = encoders.get("dape").for_model(True)
    params = enc.init(jax.random.key(0), Dims(H * DH, H, DH, 64))
    q, k, v = _qkv(12)
    pos, seg = _layout(12, True)
    run = functools.partial(_attend, q, k, v, pos, seg, window=3, encoding="dape",
                            params=params)
    np.testing.assert_allclose(run(impl="chunked"), run(impl="dense"), atol=2e-5)


def test_gradients_agree_between_dense_and_chunked():
    q, k, v = _qkv(12)
    pos, seg = _layout(12, True)

    def loss(impl, q, k, v):
        return (_attend(q, k, v, pos, seg, impl=impl, window=4) ** 2).sum()

    dense = jax.grad(functools.partial(loss, "dense"), argnums=(0, 1, 2))(q, k, v)
    chunked = jax.grad(functools.partial(loss, "chunked"), argnums=(0, 1, 2))(q, k, v)
    for a, b in zip(dense, chunked, strict=True):
        np.testing.assert_allclose(b, a, atol=1e-5)


def test_linear_attention_and_bidirectional_models_refuse_a_window():
    rope = encoders.get("rope")
    with pytest.raises(ConfigError) as err:
        check_compatible(rope, "linear", True, window=8)
    message = str(err.value)
    assert "\n" not in message and "attention='linear'" in message
    # the window may come from a pattern entry (gdn+rope(window=8)): it named model.window=8
    assert message.startswith("a sliding window of 8 (model.window, or a layer_pattern "
                              "entry's) cannot run")
    assert "prefix sums" in message and "dense" in message
    with pytest.raises(ConfigError, match="bidirectional"):
        check_compatible(rope, "dense", False, window=8)
    check_compatible(rope, "linear", True, window=0)  # no window: linear is fine


# -- chunked attention (Llama 4) -----------------------------------------------------------

@pytest.mark.parametrize("impl", ["dense", "chunked", "fused"])
@pytest.mark.parametrize("packed", [False, True])
def test_every_kernel_keeps_a_key_only_in_its_querys_chunk(impl, packed):
    """transformers' chunked_overlay (kv_idx // C == q_idx // C) on top of the causal and
    segment masks; a chunk of 1 leaves each query itself, one longer than the row changes
    nothing."""
    length = 14
    q, k, v = _qkv(length)
    pos, seg = _layout(length, packed)
    for chunk in (1, 4, 5, length + 2):
        out = _attend(q, k, v, pos, seg, impl=impl, window=0, chunk=chunk)
        np.testing.assert_allclose(out, _reference(q, k, v, seg, 0, chunk), atol=2e-6,
                                   err_msg=f"{impl}, C={chunk}")
    whole = _attend(q, k, v, pos, seg, impl=impl, window=0)
    np.testing.assert_array_equal(
        _attend(q, k, v, pos, seg, impl=impl, window=0, chunk=length + 2), whole)


def test_block_visible_skips_exactly_the_blocks_the_chunks_hide():
    """A key block is visited iff some (query, key) pair of the blocks shares a chunk (and
    the key is not after the query, when causal)."""
    for chunk in (1, 3, 4, 5, 8, 13):
        for bq, bk in ((4, 4), (2, 8), (8, 2)):
            for causal in (True, False):
                for qs in range(0, 24, bq):
                    for ks in range(0, 24, bk):
                        qi, ki = np.arange(qs, qs + bq)[:, None], np.arange(ks, ks + bk)[None]
                        ok = (qi // chunk == ki // chunk) & ((ki <= qi) | (not causal))
                        seen = masks.block_visible(qs, bq, ks, causal=causal, k_len=bk,
                                                   chunk=chunk)
                        assert bool(seen) == bool(ok.any()), (chunk, bq, bk, causal, qs, ks)


@pytest.mark.parametrize("encoding", ["cope", "fox", "stickbreaking", "dape", "t5"])
def test_the_chunked_kernel_skipping_hidden_blocks_equals_dense(encoding):
    """Content-dependent carries (CoPE's counts, FoX's gates, stick-breaking's sums), the
    cross-head path (DAPE) and a bias: the blocks outside a query block's chunks are
    skipped, the output is dense's."""
    enc = encoders.get(encoding).for_model(True)
    params = enc.init(jax.random.key(0), Dims(H * DH, H, DH, 64))
    q, k, v = _qkv(24)
    pos, seg = _layout(24, True)
    x = jax.random.normal(jax.random.key(5), (B, 24, H * DH))
    run = functools.partial(_attend, q, k, v, pos, seg, window=0, encoding=encoding,
                            params=params, chunk=8, block_size=4, x=x)
    np.testing.assert_allclose(run(impl="chunked"), run(impl="dense"), atol=2e-5)


@settings(max_examples=20, deadline=None)
@given(lk=st.integers(1, 24), data=st.data())
def test_cut_segment_ids_allow_exactly_same_segment_and_same_chunk(lk, data):
    """For any layout of contiguous documents and trailing padding, any query count and
    chunk: the cut ids' segment mask is the ids' own AND q_idx // C == k_idx // C."""
    lq = data.draw(st.integers(1, lk))
    chunk = data.draw(st.integers(1, lk + 3))
    lengths = data.draw(st.lists(st.integers(1, lk), min_size=1, max_size=4))
    seg = np.concatenate([np.full(n, i + 1) for i, n in enumerate(lengths)])[:lk]
    seg = np.pad(seg, (0, lk - len(seg)))[None].astype(np.int32)  # the rest is padding
    q_cut, k_cut = masks.chunk_segments(jnp.asarray(seg[:, -lq:]), jnp.asarray(seg), 1, lq,
                                        lk, chunk)
    q_idx, k_idx = np.arange(lk - lq, lk), np.arange(lk)
    expected = (np.asarray(masks.segment_mask(seg[0, -lq:], seg[0]))
                & (q_idx[:, None] // chunk == k_idx[None, :] // chunk))
    np.testing.assert_array_equal(masks.segment_mask(q_cut[0], k_cut[0]), expected)
    whole_q, whole_k = masks.chunk_segments(None, None, 2, lq, lk, chunk)
    assert whole_q.shape == (2, lq) and whole_k.shape == (2, lk)
    np.testing.assert_array_equal(masks.segment_mask(whole_q[0], whole_k[0]),
                                  q_idx[:, None] // chunk == k_idx[None, :] // chunk)


def test_a_chunk_under_rope_is_attention_over_that_chunk_alone():
    """The defining property: the queries of chunk c get what attention over chunk c's
    tokens alone, at their own positions, gives them (RoPE: a query's later chunk sees none
    of the earlier ones), in linear attention too (its prefix sums restart at each chunk);
    flash_bias carries it too (ALiBi's table, interpret mode)."""
    enc = encoders.get("rope").for_model(True)
    q, k, v = _qkv(12)
    pos, _ = _layout(12, False)
    for impl in ("dense", "linear"):
        out = _attend(q, k, v, pos, None, impl=impl, window=0, encoding="rope", chunk=4)
        for c in range(3):
            part = slice(4 * c, 4 * c + 4)
            alone = multi_head_attention(
                q[:, part], k[:, part], v[:, part], encoding=enc, params={},
                q_pos=pos[:, part], k_pos=pos[:, part], q_seg=None, k_seg=None, causal=True,
                impl=impl, block_size=4)
            np.testing.assert_allclose(out[:, part], alone, atol=2e-6,
                                       err_msg=f"{impl}, chunk {c}")
    alibi = encoders.get("alibi").for_model(True)
    params = alibi.init(jax.random.key(0), Dims(H * DH, H, DH, 64))
    pos, seg = _layout(16, True)
    q, k, v = _qkv(16)
    run = functools.partial(_attend, q, k, v, pos, seg, window=0, encoding="alibi",
                            params=params, block_size=8, chunk=6)
    np.testing.assert_allclose(run(impl="flash_bias"), run(impl="dense"), atol=2e-5)


def test_llama4s_schedule_chunks_its_rope_layers_and_refuses_a_bad_chunk():
    pattern = "rope(attention_chunk=4)*3+rope(p=0,temperature_floor=8)"
    cfg = _cfg(pattern, num_layers=4)
    assert layer_chunks(cfg) == (4, 4, 4, 0) and layer_windows(cfg) == (0,) * 4
    model = _model(pattern, num_layers=4)
    assert [layer.attn.attention_chunk for layer in model.backbone.layers] == [4, 4, 4, 0]
    assert layer_chunks(_cfg("", attention_chunk=8, num_layers=2)) == (8, 8)
    assert layer_chunks(_cfg("gdn+rope(attention_chunk=4)", num_layers=2)) == (0, 4)
    with pytest.raises(ConfigError, match=r"^model.attention_chunk=-1 must be >= 0"):
        _cfg(attention_chunk=-1)
    with pytest.raises(ConfigError, match="attention_chunk must be >= 0") as err:
        layer_chunks(_cfg("rope(attention_chunk=-2)+none", num_layers=2))
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="attention_chunk") as err:
        layer_chunks(_cfg("gdn(attention_chunk=4)+none", num_layers=2))  # no attention
    assert "\n" not in str(err.value)


def test_a_tiny_llama4_schedule_trains_one_step_alike_on_dense_and_chunked():
    """Chunks of 4 in rows of 16, packed documents crossing chunk boundaries."""
    pattern = "rope(attention_chunk=4)*2+rope(p=0,temperature_floor=8)"
    tokens = jax.random.randint(jax.random.key(1), (B, 17), 0, 32)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    pos, seg = _layout(16, True)
    losses = {impl: _one_sgd_step(_model(pattern, impl=impl, block_size=4, num_layers=3),
                                  inputs, targets, pos, seg) for impl in ("dense", "chunked")}
    for got in losses.values():
        assert np.isfinite(got).all() and got[1] < got[0]
    np.testing.assert_allclose(losses["chunked"], losses["dense"], rtol=1e-5)


# -- layer_pattern's settings ---------------------------------------------------------------

GEMMA3 = "rope(theta=1e4,window=1024)*5+rope(theta=1e6)"


def _cfg(pattern="", **kw):
    return ModelConfig(**{"d_model": 16, "num_layers": 6, "num_heads": H, "head_dim": DH,
                          "mlp_dim": 32, "dtype": "float32", "layer_pattern": pattern, **kw})


def test_the_parser_reads_settings_repetition_and_the_plain_syntax():
    specs = layer_specs(_cfg(GEMMA3))
    assert [s.name for s in specs] == ["rope"] * 6
    assert specs[0].settings == (("theta", 10000.0), ("window", 1024))
    assert specs[5].settings == (("theta", 1e6),) and specs[5].text == "rope(theta=1e6)"
    assert [s.name for s in layer_specs(_cfg("rope+rope+rope+none"))] == ["rope"] * 3 + ["none"]
    assert [s.name for s in layer_specs(_cfg("gdn*3+none"))] == ["gdn"] * 3 + ["none"]
    spaced = layer_specs(_cfg(" rope( theta = 500 , layout=half ) * 2 + none "))
    assert spaced[0].settings == (("layout", "half"), ("theta", 500.0)) and len(spaced) == 3
    # a quoted text, as a config arg takes it
    assert layer_specs(_cfg("rope(layout='half')"))[0].settings == (("layout", "half"),)
    json_value = layer_specs(_cfg('rope(scaling={"rope_type": "linear", "factor": 2.0})+none'))
    assert json_value[0].get("scaling") == {"rope_type": "linear", "factor": 2.0}


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from(["rope", "none", "alibi", "rope(theta=1e4,window=8)"]),
                min_size=1, max_size=12))
def test_the_short_form_of_a_pattern_parses_back_to_its_layers(entries):
    specs = layer_specs(_cfg("+".join(entries)))
    short = pattern.written(specs)
    assert layer_specs(_cfg(short)) == specs
    assert pattern.written(layer_specs(_cfg("rope+rope+rope+none+rope"))) == "rope*3+none+rope"


@pytest.mark.parametrize("pattern,message", [
    ("rope(theta=1e4,windw=8)", "entry 'rope(theta=1e4,windw=8)': rope has no setting 'windw' "
                                "(did you mean 'window'?); its valid keys: "),
    ("none(theta=1e4)", "entry 'none(theta=1e4)': none has no setting 'theta'; its valid "
                        "keys: attention_chunk, moe_experts, qk_norm, window"),
    ("gdn(window=4)+none", "entry 'gdn(window=4)': gdn has no setting 'window'; its valid keys: "
                           "none"),
    ("rope(theta=big)", "entry 'rope(theta=big)': theta='big' is not a number"),
    ("rope(window=2.5)", "window='2.5' is not a whole number"),
    # read as a config arg reads them (one parser): a base of inf is no number to rotate by
    ("rope(theta=inf)", "entry 'rope(theta=inf)': theta='inf' is not a finite number"),
    ("rope(window=-4)", "entry 'rope(window=-4)': window must be >= 0"),
    ("rope*0+none", "entry 'rope*0': the repetition *0 must be a whole number >= 1"),
    ("rope(theta=1e4", "entry 'rope(theta=1e4' is not NAME, NAME(KEY=VALUE,...)"),
    ("rope(theta)", "entry 'rope(theta)': 'theta' is not KEY=VALUE"),
    ("ropee*2", "unknown encoding in model.layer_pattern 'ropee' (did you mean 'rope'?)"),
])
def test_parser_mistakes_are_one_line_and_name_the_entry(pattern, message):
    with pytest.raises(ConfigError) as err:
        layer_windows(_cfg(pattern))
    assert "\n" not in str(err.value) and message in str(err.value)
    # the encoding's keys plus the layer keys
    if "valid keys: " in message and "rope" in pattern:
        listed = str(err.value).split("valid keys: ")[1].split(", ")
        assert set(listed) == {*encoders.hparams("rope"), "window", "attention_chunk",
                               "qk_norm", "moe_experts"}


def test_the_configured_encoding_keeps_its_hyperparameters_under_an_entrys_settings():
    rope = encoders.get("rope", layout="half")  # a theta of its own: tests/test_what_trains
    encs = layer_encodings(_cfg(GEMMA3), rope)
    assert [e.theta for e in encs] == [1e4] * 5 + [1e6]
    assert all(e.layout == "half" for e in encs)  # kept from the configured encoding
    assert layer_encodings(_cfg("rope+none"), rope)[0] is rope  # no settings: itself
    other = layer_encodings(_cfg("alibi(bidirectional=false)+rope"), rope)[0]
    assert other.name == "alibi" and not other.bidirectional
    assert layer_windows(_cfg(GEMMA3)) == (1024,) * 5 + (0,)
    assert layer_windows(_cfg("rope(window=8)+none", window=32)) == (8, 32) * 3
    assert layer_windows(_cfg("", window=16)) == (16,) * 6
    assert layer_windows(_cfg("gdn+rope", window=16)) == (0, 16) * 3


def _model(pattern, encoding="rope", impl="dense", kind="causal_lm", **kw):
    return build_model(_cfg(pattern, attention=impl, **kw),
                       encoders.get(encoding).for_model(kind != "mlm"), kind=kind,
                       vocab_size=32, max_len=32, rngs=nnx.Rngs(0))


@pytest.mark.parametrize("name,pattern,expected", [
    ("gemma3", GEMMA3, [(1e4, 1.0, 1024)] * 5 + [(1e6, 1.0, 0)]),
    ("gemma4", "rope(theta=1e4,window=512)*5+rope(theta=1e6,p=0.25)",
     [(1e4, 1.0, 512)] * 5 + [(1e6, 0.25, 0)]),
    ("swan", "rope(window=512)*3+none", [(1e4, 1.0, 512)] * 3 + [None] + [(1e4, 1.0, 512)] * 2),
])
def test_the_built_models_layers_have_the_schedules_theta_p_and_window(name, pattern, expected):
    model = _model(pattern)
    got = []
    for layer in model.backbone.layers:
        enc = layer.attn.encoding
        got.append(None if enc.name == "none" else (enc.theta, enc.p, layer.attn.window))
        if enc.name == "none":
            assert layer.attn.window == 0  # SWAN's global NoPE layer
    assert got == expected, name


def _one_sgd_step(model, inputs, targets, pos, seg) -> np.ndarray:
    """[loss before, loss after] one SGD step (learning rate 0.5) of `model` on the batch."""
    def loss_fn(model):
        logits = model(inputs, pos, seg)
        return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()

    @nnx.jit
    def step(model, opt):
        before, grads = nnx.value_and_grad(loss_fn)(model)
        opt.update(model, grads)
        return before, loss_fn(model)

    return np.array(step(model, nnx.Optimizer(model, optax.sgd(0.5), wrt=nnx.Param)))


def test_a_tiny_gemma3_model_trains_one_step():
    """Windows shorter than the rows (2 local layers of window 4, one global) so the window
    bites; dense and chunked give the same loss and update, which lowers the loss."""
    pattern = "rope(theta=1e4,window=4)*2+rope(theta=1e6)"
    tokens = jax.random.randint(jax.random.key(1), (B, 17), 0, 32)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    pos = jnp.broadcast_to(jnp.arange(16, dtype=jnp.int32), (B, 16))
    seg = jnp.ones((B, 16), jnp.int32)
    losses = {impl: _one_sgd_step(_model(pattern, impl=impl, block_size=4, num_layers=3),
                                  inputs, targets, pos, seg) for impl in ("dense", "chunked")}
    for got in losses.values():
        assert np.isfinite(got).all() and got[1] < got[0]
    np.testing.assert_allclose(losses["chunked"], losses["dense"], rtol=1e-5)


def test_models_refuse_a_window_where_it_cannot_run():
    with pytest.raises(ConfigError, match="attention='linear'.*prefix sums"):
        _model("rope(window=4)+rope", impl="linear")
    with pytest.raises(ConfigError, match="bidirectional"):
        _model("", kind="mlm", window=4)
    with pytest.raises(ConfigError, match="model.window=-1 must be >= 0"):
        _cfg(window=-1)
    _model("rope+rope(window=0)", impl="linear")  # a zero window is full attention: fine


@pytest.mark.parametrize("arg,layers,windows,globals_", [
    ("arch=gemma3", 6, (1024,) * 5 + (0,), [(1e6, 1.0)]),
    ("arch=gemma4,window=32", 6, (32,) * 5 + (0,), [(1e6, 0.25)]),
    ("arch=swan,window=16,size=base", 4, (16,) * 3 + (0,), [None]),
    ("arch=cohere2,window=16", 4, (16,) * 3 + (0,), [None]),
])
def test_the_lm_config_presets_are_one_arg_each(arg, layers, windows, globals_):
    """configs/lm.py's arch=gemma3|gemma4|swan|cohere2: window=W scales the local layers' window and
    num_layers rounds up to the schedule's period (main's 2 and base's 4 layers)."""
    from configs.lm import get_config
    from posjax.experiment import Experiment

    experiment = Experiment.from_config(get_config(arg))
    cfg = experiment.model_config
    assert cfg.num_layers == layers and layer_windows(cfg) == windows
    encs = layer_encodings(cfg, experiment.encoding)
    assert all((e.theta, e.p) == (1e4, 1.0) for e, w in zip(encs, windows, strict=True) if w)
    assert [None if e.name == "none" else (e.theta, e.p)
            for e, w in zip(encs, windows, strict=True) if not w] == globals_
    if "gemma" in arg:
        assert (cfg.mlp, cfg.norm, cfg.qk_norm, cfg.tie_embeddings) == ("geglu", "rmsnorm",
                                                                        True, True)
    if "cohere2" in arg:
        assert (cfg.mlp, cfg.norm, cfg.parallel_residual) == ("swiglu", "layernorm_no_bias", True)
        norm = experiment.build().params["backbone"]["layers"][0]["attn_norm"]
        assert set(norm) == {"scale"}  # Cohere's LayerNorm has no bias


def test_the_llama4_preset_chunks_its_rope_layers_and_tempers_its_nope_layer():
    """configs/lm.py's arch=llama4: attention_chunk=C scales the RoPE layers' chunks, the
    fourth layer sees every key with Llama 4's query temperature (floor 8192)."""
    from configs.lm import get_config
    from posjax.experiment import Experiment

    experiment = Experiment.from_config(get_config("arch=llama4,attention_chunk=32"))
    cfg = experiment.model_config
    assert cfg.num_layers == 4 and layer_chunks(cfg) == (32, 32, 32, 0)
    assert layer_windows(cfg) == (0,) * 4 and cfg.num_kv_heads == cfg.num_heads // 2
    encs = layer_encodings(cfg, experiment.encoding)
    assert [(e.p, e.temperature_floor) for e in encs] == [(1.0, 0)] * 3 + [(0.0, 8192)]
    assert (cfg.mlp, cfg.norm) == ("swiglu", "rmsnorm")


def test_llama4s_nope_layers_with_temperature_equal_nope_until_its_floor():
    """iRoPE's NoPE layers (its chunked RoPE layers: above): 3 RoPE layers, then a NoPE layer whose
    queries Llama 4 scales by 1 + 0.1 log(floor((m + 1) / F) + 1). Below position F - 1 the
    model is RNoPE's exactly; from there on the NoPE layer's scores grow."""
    floor, length = 8, 24
    cfg = dict(d_model=32, num_layers=4, num_heads=2, head_dim=16, mlp_dim=64, dtype="float32")
    schedules = ("rope*3+none", f"rope*3+rope(p=0,temperature_floor={floor})")
    models = {p: build_model(ModelConfig(**cfg, layer_pattern=p), encoders.get("rope"),
                             kind="causal_lm", max_len=length, rngs=nnx.Rngs(0), vocab_size=50)
              for p in schedules}
    tuned = layer_encodings(ModelConfig(**cfg, layer_pattern=schedules[1]),
                            encoders.get("rope"))[3]
    assert (tuned.p, tuned.temperature_floor, tuned.temperature_scale) == (0.0, floor, 0.1)
    nnx.update(models[schedules[1]], nnx.state(models[schedules[0]], nnx.Param))  # alike
    tokens = jax.random.randint(jax.random.key(0), (2, length), 0, 50)
    positions = jnp.broadcast_to(jnp.arange(length), tokens.shape)
    rnope, irope = (np.asarray(m(tokens, positions, None)) for m in models.values())
    np.testing.assert_allclose(irope[:, :floor - 1], rnope[:, :floor - 1], rtol=1e-6, atol=1e-6)
    assert np.abs(irope[:, floor:] - rnope[:, floor:]).max() > 1e-3
