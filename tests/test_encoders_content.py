"""Content-dependent positions (FoX, CoPE, PaTH), p-RoPE and per-layer schedules: each one's
defining property, golden values, chunked = dense, packing, and the paths that refuse it."""

import dataclasses
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from posjax import encoders
from posjax.attention import check_compatible, multi_head_attention
from posjax.encoders import Dims
from posjax.encoders.content import PathTransform
from posjax.errors import ConfigError
from posjax.models.layers import ModelConfig
from posjax.models.transformer import build_model, layer_encodings

GOLDEN = json.loads((Path(__file__).parent / "golden" / "content.json").read_text())


def _inputs(batch, length, heads, head_dim, d_model, seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = (jnp.asarray(rng.normal(size=(batch, length, heads, head_dim)), jnp.float32)
               for _ in range(3))
    x = jnp.asarray(rng.normal(size=(batch, length, d_model)), jnp.float32)
    return q, k, v, x


@dataclasses.dataclass(frozen=True)
class GivenReflections(PathTransform):
    """PaTH with w and beta given as its parameters (to compare with references that take
    them as inputs)."""

    def householders(self, params, x, segment_ids):
        return params["w"], params["beta"]


def _attend(name, params, q, k, v, x, *, impl="dense", segments=None, block_size=256):
    batch, length = q.shape[:2]
    pos = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32), (batch, length))
    seg = jnp.ones((batch, length), jnp.int32) if segments is None else segments
    encoding = GivenReflections() if name == "given_path" else encoders.get(name)
    return multi_head_attention(q, k, v, encoding=encoding, params=params,
                                q_pos=pos, k_pos=pos, q_seg=seg, k_seg=seg, causal=True, x=x,
                                impl=impl, block_size=block_size)


def _cope_params(head_dim, npos, seed=1):
    table = np.random.default_rng(seed).normal(size=(head_dim, npos))
    return {"table": jnp.asarray(table, jnp.float32)}


def _init(name, d_model, heads, head_dim=8):
    return encoders.get(name).init(jax.random.key(3), Dims(d_model, heads, head_dim, 64))


def _params(name, d_model, heads, head_dim=8):
    return _cope_params(head_dim, 300) if name == "cope" else _init(name, d_model, heads,
                                                                     head_dim)


def test_fox_attention_is_softmax_times_the_explicit_product_of_forget_gates():
    batch, length, heads, head_dim, d_model = 1, 12, 2, 8, 16
    q, k, v, x = _inputs(batch, length, heads, head_dim, d_model)
    params = _init("fox", d_model, heads)
    out = np.asarray(_attend("fox", params, q, k, v, x))
    w, b = (np.asarray(params[n], np.float64) for n in ("gate_weight", "gate_bias"))
    forget = 1 / (1 + np.exp(-(np.asarray(x[0], np.float64) @ w + b)))  # [L, H]
    for h in range(heads):
        qh, kh, vh = (np.asarray(a[0, :, h], np.float64) for a in (q, k, v))
        for i in range(length):
            gates = np.array([np.prod(forget[j + 1:i + 1, h]) for j in range(i + 1)])
            weights = np.exp(qh[i] @ kh[:i + 1].T / np.sqrt(head_dim)) * gates
            expected = weights @ vh[:i + 1] / weights.sum()
            np.testing.assert_allclose(out[0, i, h], expected, rtol=1e-5, atol=1e-6)


def test_cope_with_every_gate_open_counts_plain_relative_positions():
    length = 9
    ok = np.tril(np.ones((length, length), bool))
    position, carry = encoders.get("cope").positions(
        jnp.full((length, length), 50.0), jnp.asarray(ok), jnp.zeros(length), npos_max=100)
    i, j = np.indices((length, length))
    np.testing.assert_allclose(np.where(ok, position, 0), np.where(ok, i - j + 1, 0))
    np.testing.assert_allclose(carry, np.arange(1, length + 1))


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 12), st.integers(0, 10_000))
def test_cope_positions_never_decrease_with_distance(length, seed):
    logits = np.random.default_rng(seed).normal(scale=4.0, size=(length, length))
    ok = np.tril(np.ones((length, length), bool))
    position, _ = encoders.get("cope").positions(jnp.asarray(logits, jnp.float32),
                                                 jnp.asarray(ok), jnp.zeros(length), 1000)
    position = np.asarray(position)
    for i in range(length):
        # p_ij for j = i, i-1, ..., 0 (growing distance) never goes down.
        assert np.all(np.diff(position[i, :i + 1][::-1]) >= -1e-6)


def _recurrent_path(q, k, v, w, beta):
    """PaTH as it decodes (fla's PaTHAttention with a cache): each new token t first
    reflects every cached key by H_t = I - beta_t w_t w_t^T, then appends its own key."""
    q, k, v, w, beta = (np.asarray(a, np.float64) for a in (q, k, v, w, beta))
    batch, length, heads, head_dim = q.shape
    out = np.zeros_like(v)
    for b in range(batch):
        for h in range(heads):
            cache = np.zeros((0, head_dim))
            for t in range(length):
                w_t = w[b, t, h]
                cache = cache - beta[b, t, h] * (cache @ w_t)[:, None] * w_t[None]
                cache = np.vstack([cache, k[b, t, h]])
                scores = cache @ q[b, t, h] / np.sqrt(head_dim)
                weights = np.exp(scores - scores.max())
                out[b, t, h] = weights @ v[b, :t + 1, h] / weights.sum()
    return out


@pytest.mark.parametrize("impl", ["dense", "chunked"])
def test_path_in_parallel_equals_its_recurrent_form(impl):
    d_model, heads = 16, 2
    q, k, v, x = _inputs(2, 37, heads, 8, d_model, seed=5)
    encoding, params = encoders.get("path"), _init("path", d_model, heads)
    w, beta = encoding.householders(params, x, jnp.ones(x.shape[:2], jnp.int32))
    out = _attend("path", params, q, k, v, x, impl=impl, block_size=8)
    np.testing.assert_allclose(out, _recurrent_path(q, k, v, w, beta), rtol=1e-4, atol=1e-5)


def test_path_with_beta_zero_is_nope():
    q, k, v, x = _inputs(1, 20, 2, 8, 16, seed=6)
    w = jnp.asarray(np.random.default_rng(7).normal(size=q.shape), jnp.float32)
    given = {"w": w / jnp.linalg.norm(w, axis=-1, keepdims=True),
             "beta": jnp.zeros(q.shape[:3], jnp.float32)}
    np.testing.assert_allclose(_attend("given_path", given, q, k, v, x),
                               _attend("none", {}, q, k, v, x), rtol=1e-5, atol=1e-6)


def test_goldens_from_the_authors_code_and_the_papers_equation():
    for name, encoding in (("fox", "fox"), ("cope", "cope"), ("path", "given_path")):
        case = GOLDEN[name]
        q, k, v, x = (jnp.asarray(case[n], jnp.float32) for n in ("q", "k", "v", "x"))
        params = {n: jnp.asarray(case["params"][n], jnp.float32) for n in case["params"]}
        for impl in ("dense", "chunked"):
            out = _attend(encoding, params, q, k, v, x, impl=impl, block_size=4)
            np.testing.assert_allclose(out, np.asarray(case["out"]), rtol=1e-5, atol=1e-5,
                                       err_msg=f"{name} {impl}: {case['source']}")


@pytest.mark.parametrize("name", ["fox", "cope", "path"])
def test_chunked_equals_dense_at_4096_tokens(name):
    batch, length, heads, head_dim, d_model = 1, 4096, 1, 8, 8
    q, k, v, x = _inputs(batch, length, heads, head_dim, d_model, seed=2)
    params = _params(name, d_model, heads)
    dense = _attend(name, params, q, k, v, x)
    chunked = _attend(name, params, q, k, v, x, impl="chunked", block_size=512)
    # CoPE's positions are float32 sums of up to 4096 gates, added in another order by the
    # blocks (|p| ~ 2e3 carries ~2e-4 rounding), hence its looser absolute tolerance.
    np.testing.assert_allclose(chunked, dense, rtol=1e-4, atol=1e-4 if name == "cope" else 2e-5)


@pytest.mark.parametrize("name", ["fox", "cope", "path"])
def test_packed_segments_equal_each_sequence_alone(name):
    heads, head_dim, d_model, first = 2, 8, 16, 7
    q, k, v, x = _inputs(1, 16, heads, head_dim, d_model, seed=4)
    params = _params(name, d_model, heads)
    segments = jnp.asarray([[1] * first + [2] * (16 - first)], jnp.int32)
    packed = _attend(name, params, q, k, v, x, impl="chunked", segments=segments, block_size=4)
    second = _attend(name, params, *(a[:, first:] for a in (q, k, v, x)))
    # The content sites read no positions, so the second sequence's shift does not matter;
    # PaTH's short convolution of w must not reach back into the first sequence.
    np.testing.assert_allclose(packed[:, first:], second, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["fox", "cope", "path"])
@pytest.mark.parametrize("impl", ["fused", "linear"])
def test_kernels_that_cannot_carry_the_content_site_refuse_in_one_line(name, impl):
    with pytest.raises(ConfigError, match=f"'{name}' cannot run with attention='{impl}'") as e:
        check_compatible(encoders.get(name), impl, causal=True)
    # FoX's forget gates are row and column terms, which flash_bias also carries
    fit = "dense or chunked or flash_bias or auto" if name == "fox" else "dense or chunked or auto"
    assert "\n" not in str(e.value) and f"use attention={fit} for '{name}'" in str(e.value)


@pytest.mark.parametrize("name", ["fox", "cope", "path"])
def test_content_encodings_are_causal_only(name):
    with pytest.raises(ConfigError, match="only for causal attention"):
        check_compatible(encoders.get(name), "dense", causal=False)


@pytest.mark.parametrize("learned_freqs", [False, True])
def test_p_rope_keeps_the_highest_frequencies_and_zeroes_the_rest(learned_freqs):
    """With learned frequencies p was ignored (every pair turned, p=0 was not NoPE) unless a
    scaling map was set too."""
    dims = Dims(16, 1, 16, 64)
    full = encoders.get("rope")
    p_rope = encoders.get("rope", p=0.5, learned_freqs=learned_freqs)
    plain, kept = (np.asarray(e._inv_freq(e.init(None, dims), 16, None)) for e in (full, p_rope))
    np.testing.assert_array_equal(kept[:4], plain[:4])
    np.testing.assert_array_equal(kept[4:], 0.0)
    with pytest.raises(ConfigError, match=r"rope p=1.5 must be in \[0, 1\]"):
        encoders.get("rope", p=1.5)


def test_p_rope_counts_its_turning_pairs_as_gemma_does():
    """int(p * head_dim // 2) pairs, as Gemma's code and transformers' "proportional" rope:
    round() kept 6 of 22 pairs at p=0.25, head_dim 44, where they keep 5."""
    for head_dim, turning in ((44, 5), (76, 9), (256, 32), (32, 4)):
        encoding = encoders.get("rope", p=0.25)
        inv_freq = np.asarray(encoding._inv_freq({}, head_dim, None))
        assert np.count_nonzero(inv_freq) == turning, head_dim


def _scores(encoding, q, k, positions):
    qr, kr = encoding.rotate({}, q, k, positions, positions)
    return jnp.einsum("bqhd,bkhd->bqk", qr, kr)


def test_p_rope_zero_is_nope_and_scores_stay_relative():
    q, k, _, _ = _inputs(1, 6, 1, 8, 8)
    positions = jnp.arange(6)[None]
    nope = jnp.einsum("bqhd,bkhd->bqk", q, k)
    np.testing.assert_allclose(_scores(encoders.get("rope", p=0.0), q, k, positions), nope,
                               rtol=1e-6)
    learned = encoders.get("rope", p=0.0, learned_freqs=True)
    qr, kr = learned.rotate(learned.init(None, Dims(8, 1, 8, 64)), q, k, positions, positions)
    np.testing.assert_allclose(jnp.einsum("bqhd,bkhd->bqk", qr, kr), nope, rtol=1e-6)
    p_rope = encoders.get("rope", p=0.5)
    np.testing.assert_allclose(_scores(p_rope, q, k, positions + 37),
                               _scores(p_rope, q, k, positions), rtol=1e-4, atol=1e-5)


def _model(pattern, encoding="rope"):
    cfg = ModelConfig(d_model=16, num_layers=4, num_heads=2, head_dim=8, mlp_dim=32,
                      layer_pattern=pattern, dtype="float32")
    return build_model(cfg, encoders.get(encoding), kind="causal_lm", max_len=32,
                       rngs=nnx.Rngs(0), vocab_size=11)


def test_a_layer_pattern_makes_every_nth_layer_nope_and_it_ignores_positions():
    model = _model("fox+fox+fox+none", encoding="fox")
    kinds = [layer.attn.encoding.name for layer in model.backbone.layers]
    assert kinds == ["fox", "fox", "fox", "none"]
    assert nnx.state(model.backbone.layers[3].attn.enc_params) == nnx.State({})
    nope = model.backbone.layers[3].attn
    x = jnp.asarray(np.random.default_rng(0).normal(size=(1, 10, 16)), jnp.float32)
    seg = jnp.ones((1, 10), jnp.int32)
    at = lambda offset: nope(x, jnp.arange(10)[None] + offset, seg)
    np.testing.assert_array_equal(at(0), at(123))


def test_a_layer_pattern_mixes_encodings_and_keeps_the_configured_hyperparameters():
    cfg = ModelConfig(d_model=16, num_layers=3, num_heads=2, head_dim=8, mlp_dim=32,
                      layer_pattern="fox+rope")
    rope = encoders.get("rope", theta=500.0)
    assert layer_encodings(cfg, rope) == (encoders.get("fox"), rope, encoders.get("fox"))


@pytest.mark.parametrize("pattern, message", [
    ("rope+xpoz", r"unknown encoding in model.layer_pattern 'xpoz' \(did you mean 'xpos'\?\)"),
    ("rope+learned", "'learned' encodes at the input, which belongs to the model"),
])
def test_a_bad_layer_pattern_is_one_line(pattern, message):
    with pytest.raises(ConfigError, match=message) as e:
        _model(pattern)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("name", ["fox", "cope", "path"])
def test_chunked_gives_the_dense_gradients(name):
    heads, d_model = 2, 16
    q, k, v, x = _inputs(1, 40, heads, 8, d_model, seed=8)
    params = _params(name, d_model, heads)

    def loss(impl):
        return jax.grad(lambda p, q, k, x: jnp.sum(jnp.sin(
            _attend(name, p, q, k, v, x, impl=impl, block_size=8))), argnums=(0, 1, 2, 3))

    dense, chunked = loss("dense")(params, q, k, x), loss("chunked")(params, q, k, x)
    for a, b in zip(jax.tree.leaves(dense), jax.tree.leaves(chunked), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)


def test_a_negative_cope_table_size_is_one_line():
    """npos_max=-1 ended in a broadcast_in_dim TypeError traceback when the model was built."""
    with pytest.raises(ConfigError, match=r"^cope npos_max=-1 is the position table's size: "
                       r"give one >= 1 \(0: the training length \+ 1\)$"):
        encoders.get("cope", npos_max=-1)
