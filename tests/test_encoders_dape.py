"""DAPE (Zheng et al. 2024): A + B + f([A; B]) with f an MLP across the heads of each pair;
the paper's equation written out pair by pair (float64), the base bias recovered when f is
zero, chunked = dense (values and gradients), packing, FIRE's activation inside DAPE (the
authors' LeakyReLU by default, an old run's ReLU kept), and the refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posjax import encoders
from posjax.attention import check_compatible, multi_head_attention
from posjax.encoders import Dims
from posjax.errors import ConfigError

B, L, H, DH = 2, 10, 3, 8


def _qkv(length=L, seed=0):
    rng = np.random.default_rng(seed)
    return [jnp.asarray(rng.normal(size=(B, length, H, DH)), jnp.float32) for _ in range(3)]


def _encoding(name="dape", causal=True, **hp):
    return encoders.get(name, **hp).for_model(causal)


def _params(enc, seed=1):
    return enc.init(jax.random.key(seed), Dims(16, H, DH, 64))


def _attend(enc, params, q, k, v, *, impl="dense", causal=True, segments=None, block_size=256):
    pos = jnp.broadcast_to(jnp.arange(q.shape[1], dtype=jnp.int32), q.shape[:2])
    seg = jnp.ones(q.shape[:2], jnp.int32) if segments is None else segments
    return multi_head_attention(q, k, v, encoding=enc, params=params, q_pos=pos, k_pos=pos,
                                q_seg=seg, k_seg=seg, causal=causal, impl=impl,
                                block_size=block_size)


def _reference(enc, params, q, k, v, causal):
    """The paper's logits, one pair at a time: A + B + W2 leaky_relu(W1 [A; B] + b1) + b2."""
    p = {n: np.asarray(params[n], np.float64) for n in ("w1", "b1", "w2", "b2")}
    pos = jnp.arange(L)
    bias = np.asarray(enc.bias(params, pos, pos, H), np.float64)  # [H, L, L]
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    out = np.zeros_like(v)
    for b in range(B):
        a = np.einsum("qhd,khd->hqk", q[b], k[b]) / np.sqrt(DH)
        logits = np.zeros_like(a)
        for i in range(L):
            for j in range(L):
                hidden = np.concatenate([a[:, i, j], bias[:, i, j]]) @ p["w1"] + p["b1"]
                hidden = np.where(hidden > 0, hidden, 0.01 * hidden)
                logits[:, i, j] = a[:, i, j] + bias[:, i, j] + hidden @ p["w2"] + p["b2"]
        if causal:
            logits = np.where(np.tril(np.ones((L, L)))[None] > 0, logits, -np.inf)
        w = np.exp(logits - logits.max(-1, keepdims=True))
        out[b] = np.einsum("hqk,khd->qhd", w / w.sum(-1, keepdims=True), v[b])
    return out


@pytest.mark.parametrize("base, causal", [("alibi", True), ("alibi", False),
                                          ("kerple_log", True), ("fire", True)])
@pytest.mark.parametrize("impl", ["dense", "chunked"])
def test_logits_are_the_papers_a_plus_b_plus_an_mlp_across_heads(base, causal, impl):
    q, k, v = _qkv()
    enc = _encoding(base=base, causal=causal)
    params = _params(enc)
    out = _attend(enc, params, q, k, v, impl=impl, causal=causal, block_size=4)
    np.testing.assert_allclose(np.asarray(out), _reference(enc, params, q, k, v, causal),
                               rtol=1e-5, atol=1e-5)


@settings(max_examples=10, deadline=None)
@given(st.sampled_from(["alibi", "kerple_log", "kerple_power"]), st.integers(0, 1000))
def test_with_the_mlps_output_layer_at_zero_dape_is_its_base(base, seed):
    q, k, v = _qkv(seed=seed)
    enc = _encoding(base=base)
    params = _params(enc, seed)
    params = dict(params, w2=jnp.zeros_like(params["w2"]), b2=jnp.zeros_like(params["b2"]))
    alone = _encoding(base)
    np.testing.assert_allclose(np.asarray(_attend(enc, params, q, k, v)),
                               np.asarray(_attend(alone, params["base"], q, k, v)),
                               rtol=1e-5, atol=1e-6)


def test_the_correction_reads_the_content():
    """f sees A: the same positions with other queries get another correction."""
    enc = _encoding()
    params = _params(enc)
    q, k, _ = _qkv()
    pos = jnp.arange(L)
    a1, a2 = (jnp.einsum("qhd,khd->hqk", q[b], k[b]) / np.sqrt(DH) for b in (0, 1))
    bias = enc.bias(params, pos, pos, H)
    assert not np.allclose(np.asarray(enc.mix_logits(params, a1, bias)),
                           np.asarray(enc.mix_logits(params, a2, bias)), atol=1e-3)


def test_chunked_gives_dense_values_and_gradients():
    q, k, v = _qkv(length=29)
    enc = _encoding()
    params = _params(enc)

    def loss(params, q, impl):
        return jnp.sum(_attend(enc, params, q, k, v, impl=impl, block_size=8) ** 2)

    dense, chunked = (jax.value_and_grad(loss, argnums=(0, 1))(params, q, impl)
                      for impl in ("dense", "chunked"))
    for a, b in zip(jax.tree.leaves(dense), jax.tree.leaves(chunked), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)


def test_packed_segments_equal_each_sequence_alone_and_padding_gives_zero():
    q, k, v = _qkv(length=14)
    enc = _encoding()
    params = _params(enc)
    seg = jnp.asarray([[1] * 6 + [2] * 5 + [0] * 3] * B, jnp.int32)
    packed = np.asarray(_attend(enc, params, q, k, v, segments=seg, impl="chunked",
                                block_size=4))
    for start, stop in ((0, 6), (6, 11)):
        alone = _attend(enc, params, q[:, start:stop], k[:, start:stop], v[:, start:stop])
        np.testing.assert_allclose(packed[:, start:stop], np.asarray(alone), rtol=1e-5,
                                   atol=1e-6)
    np.testing.assert_array_equal(packed[:, 11:], 0.0)


@pytest.mark.parametrize("impl", ["fused", "linear"])
def test_kernels_that_cannot_mix_heads_refuse_in_one_line(impl):
    with pytest.raises(ConfigError, match="'dape'.*mix_logits.*use attention=dense or chunked"):
        check_compatible(_encoding(), impl, causal=True)


def test_bad_hyperparameters_and_a_causal_base_in_an_encoder_are_refused():
    with pytest.raises(ConfigError, match="dape base='rope'.*alibi, kerple_log"):
        encoders.get("dape", base="rope")
    with pytest.raises(ConfigError, match="width=0"):
        encoders.get("dape", width=0)
    with pytest.raises(ConfigError, match="'dape' is defined only for causal"):
        check_compatible(_encoding(base="fire", causal=False), "dense", causal=False)


def test_dape_on_fire_uses_the_authors_leaky_relu_unless_told_otherwise():
    """The DAPE authors' FIRE_DAPE puts nn.LeakyReLU() in FIRE's MLP where plain FIRE has a
    ReLU: DAPE on FIRE's B is fire(activation=leaky_relu) by default, plain fire's with
    base_activation=relu."""
    pos = jnp.arange(L)
    for chosen, activation in ((None, "leaky_relu"), ("leaky_relu", "leaky_relu"),
                               ("relu", "relu")):
        enc = _encoding(base="fire", base_activation=chosen)
        assert enc.bias_encoding.activation == activation
        params = _params(enc)
        fire = encoders.get("fire", activation=activation)
        np.testing.assert_array_equal(np.asarray(enc.bias(params, pos, pos, H)),
                                      np.asarray(fire.bias(params["base"], pos, pos, H)))
    assert encoders.hparams("dape")["base_activation"] is None
    assert encoders.hparams("fire")["activation"] == "relu"


def test_base_activation_is_refused_where_it_cannot_apply():
    with pytest.raises(ConfigError, match="base='alibi' has no activation; drop it or use "
                                          "base=fire"):
        encoders.get("dape", base="alibi", base_activation="relu")
    with pytest.raises(ConfigError, match="unknown dape base_activation.*'tanh'.*leaky_relu, "
                                          "relu"):
        encoders.get("dape", base="fire", base_activation="tanh")


def test_a_dape_on_fire_run_saved_before_base_activation_keeps_its_relu(tmp_path):
    import json
    from pathlib import Path

    from posjax.config import load_config

    old = json.loads((Path(__file__).parent / "golden" / "old_run_configs" / "rope.json")
                     .read_text())
    old["encoding"] = {"name": "dape", "base": "fire", "width": 32, "bidirectional": None}
    (tmp_path / "config.json").write_text(json.dumps(old))
    assert load_config(tmp_path).encoding.base_activation == "relu"
    old["encoding"]["base_activation"] = None  # a run saved with the key: the authors' choice
    (tmp_path / "config.json").write_text(json.dumps(old))
    assert load_config(tmp_path).encoding.base_activation is None
