"""The mixture-of-experts MLP (model.moe_experts): against a hand-written float32 loop over
tokens (transformers' Qwen3MoeSparseMoeBlock and MixtralSparseMoeBlock compute the same; their
checkpoints' logits: the qwen3_moe and mixtral cases of tests/test_pretrained.py), its
gradients, its refusals, and `posjax train` with configs/lm.py."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posjax import fileio
from posjax.errors import ConfigError
from posjax.launch import cli
from posjax.models.layers import ModelConfig
from posjax.models.moe import MoEMLP

LM = str(Path(__file__).resolve().parents[1] / "configs" / "lm.py")
D, E, F = 8, 5, 6


@pytest.fixture(autouse=True)
def highest_precision():
    with jax.default_matmul_precision("highest"):
        yield


def _layer(top_k=2, norm=True, mlp="swiglu") -> MoEMLP:
    cfg = ModelConfig(d_model=D, num_heads=2, mlp=mlp, dtype="float32", moe_experts=E,
                      moe_top_k=top_k, moe_mlp_dim=F, moe_norm_top_k=norm)
    return MoEMLP(cfg, rngs=nnx.Rngs(0))


def _reference(layer: MoEMLP, x: np.ndarray, top_k: int, norm: bool, act) -> np.ndarray:
    """Token by token: the router's softmax, its top k, each chosen expert's gated MLP."""
    router = np.asarray(layer.router.kernel[...], np.float64)
    gate, up, down = (np.asarray(p[...], np.float64) for p in (layer.gate, layer.up,
                                                                layer.down))
    tokens = x.reshape(-1, D).astype(np.float64)
    out = np.zeros_like(tokens)
    for t, row in enumerate(tokens):
        logits = row @ router
        probs = np.exp(logits - logits.max())
        probs /= probs.sum()
        chosen = np.argsort(-probs, kind="stable")[:top_k]
        weights = probs[chosen] / (probs[chosen].sum() if norm else 1.0)
        for w, e in zip(weights, chosen, strict=True):
            out[t] += w * ((act(row @ gate[e]) * (row @ up[e])) @ down[e])
    return out.reshape(x.shape)


@pytest.mark.parametrize("top_k,norm,mlp", [(2, True, "swiglu"), (1, False, "swiglu"),
                                            (3, False, "geglu"), (5, True, "swiglu")])
def test_each_token_is_the_weighted_sum_of_its_top_k_experts(top_k, norm, mlp):
    layer = _layer(top_k, norm, mlp)
    x = np.asarray(jax.random.normal(jax.random.key(1), (3, 7, D)))
    act = {"swiglu": lambda h: h / (1 + np.exp(-h)),
           "geglu": lambda h: np.asarray(jax.nn.gelu(jnp.asarray(h), approximate=True),
                                         np.float64)}[mlp]
    np.testing.assert_allclose(layer(jnp.asarray(x)), _reference(layer, x, top_k, norm, act),
                               rtol=1e-5, atol=1e-5)


def _every_expert(layer: MoEMLP, params, x):
    """The same layer computed densely: every expert on every token, weighted by the
    router's top-k weights scattered over all E (zero for the experts not chosen)."""
    tokens = x.reshape(-1, D)
    _, chosen = layer.route(tokens)  # the choice is piecewise constant: no gradient
    probs = jax.nn.softmax(tokens @ params["router"]["kernel"][...], axis=-1)
    picked = jnp.take_along_axis(probs, chosen, -1)
    picked = picked / picked.sum(-1, keepdims=True)
    dense = jnp.zeros((tokens.shape[0], E)).at[jnp.arange(tokens.shape[0])[:, None],
                                                chosen].set(picked)
    hidden = (jax.nn.silu(jnp.einsum("td,edf->tef", tokens, params["gate"][...]))
              * jnp.einsum("td,edf->tef", tokens, params["up"][...]))
    out = jnp.einsum("tef,efd->ted", hidden, params["down"][...])
    return jnp.einsum("te,ted->td", dense, out).reshape(x.shape)


def test_gradients_equal_every_expert_computed_densely_and_skip_unchosen_experts():
    layer = _layer(top_k=2)
    x = jax.random.normal(jax.random.key(2), (1, 3, D))  # 3 tokens: at most 6 of 5 experts
    graphdef, params = nnx.split(layer, nnx.Param)
    ours = jax.grad(lambda p: (nnx.merge(graphdef, p)(x) ** 2).sum())(params)
    dense = jax.grad(lambda p: (_every_expert(layer, p, x) ** 2).sum())(params)
    for (path, got), (_, want) in zip(nnx.to_flat_state(ours), nnx.to_flat_state(dense),
                                      strict=True):
        np.testing.assert_allclose(got[...], want[...], rtol=1e-4, atol=1e-6, err_msg=path)
    _, chosen = layer.route(x.reshape(-1, D))
    used = np.isin(np.arange(E), np.asarray(chosen))
    gate = np.abs(np.asarray(ours["gate"][...])).sum(axis=(1, 2))
    assert (gate[used] > 0).all() and (gate[~used] == 0).all()
    assert np.abs(np.asarray(ours["router"]["kernel"][...])).sum() > 0


@pytest.mark.parametrize("overrides,message", [
    (dict(moe_experts=-1), "model.moe_experts=-1 must be >= 0"),
    (dict(moe_experts=4, moe_top_k=5, mlp="swiglu"), "model.moe_top_k=5 must be 1..moe_experts=4"),
    (dict(moe_experts=4, moe_top_k=0, mlp="swiglu"), "model.moe_top_k=0 must be 1..moe_experts"),
    (dict(moe_experts=4), "model.mlp='gelu' is not one: use mlp=swiglu"),
    (dict(moe_experts=4, mlp="swiglu", mlp_bias=True), "'swiglu' with mlp_bias is not one"),
    (dict(moe_experts=4, mlp="swiglu", moe_mlp_dim=0), "model.moe_mlp_dim=0 must be >= 1"),
])
def test_bad_expert_settings_are_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message) as err:
        ModelConfig(**overrides)
    assert "\n" not in str(err.value)


def test_posjax_train_trains_a_mixture_of_experts(tmp_path):
    workdir = tmp_path / "moe"
    argv = ["train", f"--config={LM}:smoke,arch=llama,moe_experts=4,moe_top_k=2,seq_len=32,"
                     "batch_size=4,steps=3", f"--workdir={workdir}"]
    assert cli.main(argv) == 0
    rows = fileio.read_jsonl(workdir / "metrics.jsonl")
    assert rows and all(np.isfinite(r["loss"]) for r in rows if "loss" in r)
    assert fileio.read_json(workdir / "config.json")["model"]["moe_experts"] == 4
