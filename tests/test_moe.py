"""The mixture-of-experts MLP (model.moe_experts): against a hand-written float32 loop over
tokens (transformers' Qwen3MoeSparseMoeBlock and MixtralSparseMoeBlock compute the same; their
checkpoints' logits: the qwen3_moe and mixtral cases of tests/test_pretrained.py), its
gradients, its load-balancing loss against transformers' load_balancing_loss_func (written out
in NumPy), its refusals, and `posjax train` with configs/lm.py."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posjax import encoders, fileio
from posjax.errors import ConfigError
from posjax.launch import cli
from posjax.models import moe
from posjax.models.layers import Block, ModelConfig
from posjax.models.moe import MoEMLP, balance, balance_loss

LM = str(Path(__file__).resolve().parents[1] / "configs" / "lm.py")
D, E, F = 8, 5, 6


@pytest.fixture(autouse=True)
def highest_precision():
    with jax.default_matmul_precision("highest"):
        yield


def _layer(top_k=2, norm=True, mlp="swiglu", bias=False, **options) -> MoEMLP:
    """An MoE layer; options: more ModelConfig fields (the router, a shared expert)."""
    cfg = ModelConfig(d_model=D, num_heads=2, mlp=mlp, dtype="float32", moe_experts=E,
                      moe_top_k=top_k, moe_mlp_dim=F, moe_norm_top_k=norm, mlp_bias=bias,
                      **options)
    layer = MoEMLP(cfg, rngs=nnx.Rngs(0))
    if bias:  # drawn, so that each bias shows
        for i, name in enumerate(("gate_bias", "up_bias", "down_bias")):
            param = getattr(layer, name)
            param[...] = jax.random.normal(jax.random.key(10 + i), param.shape)
        layer.router.bias[...] = jax.random.normal(jax.random.key(13), (E,))
    return layer


def _silu(h):
    return h / (1 + np.exp(-h))


# Each MLP's join of its gate g and up projection u, in float64.
COMBINE = {
    "swiglu": lambda g, u: _silu(g) * u,
    "geglu": lambda g, u: np.asarray(jax.nn.gelu(jnp.asarray(g), approximate=True),
                                     np.float64) * u,
    # transformers' GptOssExperts._apply_gate
    "swiglu_clamped": lambda g, u: (np.clip(u, -7, 7) + 1) * np.minimum(g, 7) / (
        1 + np.exp(-1.702 * np.minimum(g, 7))),
}


# The router's scores of its logits, in float64.
SCORES = {"softmax": lambda z: np.exp(z - z.max()) / np.exp(z - z.max()).sum(),
          "sigmoid": lambda z: 1 / (1 + np.exp(-z))}


def _reference(layer: MoEMLP, x: np.ndarray, top_k: int, norm: bool, mlp: str,
               moe_router="softmax", moe_scale_input=False, moe_shared_dim=0,
               moe_shared_gate=False) -> np.ndarray:
    """Token by token: the router's scores, their top k, each chosen expert's gated MLP of
    the token (times its weight, with moe_scale_input: Llama 4's Llama4TextMoe), and the
    shared expert's (times its sigmoid gate: Qwen2MoeSparseMoeBlock's)."""
    f64 = lambda p: 0.0 if p is None else np.asarray(p[...], np.float64)
    router, router_bias = f64(layer.router.kernel), f64(layer.router.bias)
    gate, up, down = f64(layer.gate), f64(layer.up), f64(layer.down)
    gate_bias, up_bias, down_bias = (np.broadcast_to(f64(b), (E, n)) for b, n in (
        (layer.gate_bias, F), (layer.up_bias, F), (layer.down_bias, D)))
    tokens = x.reshape(-1, D).astype(np.float64)
    out = np.zeros_like(tokens)
    for t, row in enumerate(tokens):
        scores = SCORES[moe_router](row @ router + router_bias)
        chosen = np.argsort(-scores, kind="stable")[:top_k]
        weights = scores[chosen] / (scores[chosen].sum() if norm else 1.0)
        for w, e in zip(weights, chosen, strict=True):
            into = w * row if moe_scale_input else row
            hidden = COMBINE[mlp](into @ gate[e] + gate_bias[e], into @ up[e] + up_bias[e])
            out[t] += (1.0 if moe_scale_input else w) * (hidden @ down[e] + down_bias[e])
        if moe_shared_dim:
            shared = layer.shared
            opened = (1 / (1 + np.exp(-row @ f64(layer.shared_gate.kernel)))
                      if moe_shared_gate else 1.0)
            out[t] += opened * COMBINE[mlp](row @ f64(shared.gate.kernel),
                                            row @ f64(shared.up.kernel)) @ f64(shared.down.kernel)
    return out.reshape(x.shape)


@pytest.mark.parametrize("top_k,norm,mlp,bias,options", [
    (2, True, "swiglu", False, {}), (1, False, "swiglu", False, {}),
    (3, False, "geglu", False, {}), (5, True, "swiglu", False, {}),
    (2, True, "swiglu_clamped", True, {}),
    # Llama 4's: a sigmoid router's top 1 weighting the expert's input, a shared expert
    (1, False, "swiglu", False, dict(moe_router="sigmoid", moe_scale_input=True,
                                     moe_shared_dim=4)),
    (2, True, "swiglu", False, dict(moe_router="sigmoid")),
    # Qwen2-MoE's: a shared expert under a sigmoid gate of its own
    (2, False, "swiglu", False, dict(moe_shared_dim=4, moe_shared_gate=True))])
def test_each_token_is_the_weighted_sum_of_its_top_k_experts(top_k, norm, mlp, bias, options):
    layer = _layer(top_k, norm, mlp, bias, **options)
    x = np.asarray(3.0 * jax.random.normal(jax.random.key(1), (3, 7, D)))  # past the clip
    np.testing.assert_allclose(layer(jnp.asarray(x)),
                               _reference(layer, x, top_k, norm, mlp, **options),
                               rtol=1e-5, atol=1e-4)


def _every_expert(layer: MoEMLP, params, x):
    """The same layer computed densely: every expert on every token, weighted by the
    router's top-k weights scattered over all E (zero for the experts not chosen)."""
    tokens = x.reshape(-1, D)
    _, _, chosen = layer.route(tokens)  # the choice is piecewise constant: no gradient
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
    _, _, chosen = layer.route(x.reshape(-1, D))
    used = np.isin(np.arange(E), np.asarray(chosen))
    gate = np.abs(np.asarray(ours["gate"][...])).sum(axis=(1, 2))
    assert (gate[used] > 0).all() and (gate[~used] == 0).all()
    assert np.abs(np.asarray(ours["router"]["kernel"][...])).sum() > 0


def _deepseek_route(logits: np.ndarray, bias: np.ndarray, groups: int, top_groups: int,
                    top_k: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """transformers' DeepseekV3TopkRouter on router logits [T, E], in NumPy: sigmoid scores,
    the choice among the top_groups groups whose two best biased scores sum highest, the
    chosen experts' unbiased scores renormalised, times the scale; (weights, experts), each
    token's experts in ascending order."""
    scores = 1 / (1 + np.exp(-logits.astype(np.float64)))
    choice = scores + bias
    grouped = choice.reshape(len(choice), groups, -1)
    group_score = np.sort(grouped, -1)[..., -2:].sum(-1)
    kept = np.argsort(-group_score, -1, kind="stable")[:, :top_groups]
    mask = np.zeros_like(group_score, bool)
    np.put_along_axis(mask, kept, True, -1)
    choice = np.where(mask[..., None], grouped, -np.inf).reshape(choice.shape)
    experts = np.sort(np.argsort(-choice, -1, kind="stable")[:, :top_k], -1)
    weights = np.take_along_axis(scores, experts, -1)
    return weights / weights.sum(-1, keepdims=True) * scale, experts


def test_deepseeks_router_chooses_in_its_best_groups_with_its_bias_and_scales_the_weights():
    """DeepSeek-V3's routing: the choice bias moves which experts are chosen (not their
    weights), only experts of the best groups are chosen, and the weights are renormalised
    then scaled (routed_scaling_factor)."""
    cfg = ModelConfig(d_model=D, num_heads=2, mlp="swiglu", dtype="float32", moe_experts=8,
                      moe_top_k=3, moe_mlp_dim=F, moe_router="sigmoid", moe_choice_bias=True,
                      moe_groups=4, moe_top_groups=2, moe_route_scale=2.5)
    layer = MoEMLP(cfg, rngs=nnx.Rngs(0))
    layer.choice_bias[...] = 0.5 * jax.random.normal(jax.random.key(4), (8,))
    tokens = jax.random.normal(jax.random.key(5), (64, D))
    logits, weights, experts = layer.route(tokens)
    order = np.argsort(np.asarray(experts), -1)
    want_weights, want_experts = _deepseek_route(
        np.asarray(logits), np.asarray(layer.choice_bias[...]), 4, 2, 3, 2.5)
    np.testing.assert_array_equal(np.take_along_axis(np.asarray(experts), order, -1),
                                  want_experts)
    np.testing.assert_allclose(np.take_along_axis(np.asarray(weights), order, -1),
                               want_weights, rtol=1e-5)
    unbiased = _deepseek_route(np.asarray(logits), np.zeros(8), 4, 2, 3, 2.5)[1]
    assert (unbiased != want_experts).any()  # the bias changed some tokens' choice
    assert len({tuple(sorted(set(row // 2))) for row in want_experts}) > 1
    assert all(len(set(row // 2)) <= 2 for row in want_experts)  # within 2 of 4 groups


def _hugging_face_balance(probs: np.ndarray, chosen: np.ndarray, kept=None) -> float:
    """transformers' load_balancing_loss_func: the mean over the tokens its attention mask
    keeps (all, without one) of each top-k slot's one-hot pick, times their mean
    probability, summed, times E."""
    kept = np.ones(len(probs), bool) if kept is None else np.asarray(kept)
    mask = np.eye(probs.shape[1])[chosen][kept]  # [T kept, k, E]
    return float((mask.mean(0) * probs[kept].mean(0)[None]).sum() * probs.shape[1])


def test_the_balance_loss_is_switchs_and_k_when_perfectly_balanced():
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(E), size=12).astype(np.float32)
    chosen = np.argsort(-probs, axis=1)[:, :2]
    np.testing.assert_allclose(balance(jnp.asarray(probs), jnp.asarray(chosen)),
                               _hugging_face_balance(probs, chosen), rtol=1e-6)
    uniform = np.full((10, E), 1 / E, np.float32)
    every_expert_twice = np.arange(20).reshape(10, 2) % E
    np.testing.assert_allclose(balance(jnp.asarray(uniform), jnp.asarray(every_expert_twice)),
                               2.0, rtol=1e-6)


def test_each_layer_sows_its_weighted_balance_and_the_train_step_takes_it_out():
    layer = _layer(top_k=2)
    x = jax.random.normal(jax.random.key(3), (2, 4, D))
    layer(x)  # evaluating sows nothing
    assert balance_loss(layer) == 0.0
    layer(x, deterministic=False)
    logits, _, chosen = layer.route(x.reshape(-1, D))
    probs = jax.nn.softmax(logits, axis=-1)
    expected = 0.01 * _hugging_face_balance(np.asarray(probs), np.asarray(chosen))
    np.testing.assert_allclose(balance_loss(layer), expected, rtol=1e-5)
    assert balance_loss(layer) == 0.0  # taken out by the first call
    kept = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], bool)  # padding: left out, as transformers
    layer(x, deterministic=False, kept=jnp.asarray(kept))
    np.testing.assert_allclose(balance_loss(layer), 0.01 * _hugging_face_balance(
        np.asarray(probs), np.asarray(chosen), kept.reshape(-1)), rtol=1e-5)


def test_a_block_hands_its_experts_the_tokens_that_are_not_padding(monkeypatch):
    seen = []
    monkeypatch.setattr(moe, "balance", lambda probs, experts, kept: seen.append(kept) or 0.0)
    cfg = ModelConfig(d_model=D, num_heads=2, mlp="swiglu", dtype="float32", moe_experts=E,
                      moe_mlp_dim=F)
    block = Block(cfg, encoders.get("none"), {}, causal=True, rngs=nnx.Rngs(0), mlp=MoEMLP)
    segments = jnp.array([[1, 1, 2, 0], [1, 1, 0, 0]])
    block(jnp.ones((2, 4, D)), jnp.zeros((1, 4), jnp.int32), segments, deterministic=False)
    block(jnp.ones((2, 4, D)), jnp.zeros((1, 4), jnp.int32), None, deterministic=False)
    np.testing.assert_array_equal(seen[0], np.asarray(segments).reshape(-1) > 0)
    assert seen[1] is None  # whole rows: every token counts


@pytest.mark.parametrize("overrides,message", [
    (dict(moe_experts=-1), "model.moe_experts=-1 must be >= 0"),
    (dict(moe_experts=4, moe_top_k=5, mlp="swiglu"), "model.moe_top_k=5 must be 1..moe_experts=4"),
    (dict(moe_experts=4, moe_top_k=0, mlp="swiglu"), "model.moe_top_k=0 must be 1..moe_experts"),
    (dict(moe_experts=4), "model.mlp='gelu' is not one: use mlp=swiglu"),
    (dict(moe_experts=4, mlp="swiglu", moe_mlp_dim=0), "model.moe_mlp_dim=0 must be >= 1"),
    (dict(moe_experts=4, mlp="swiglu", moe_balance=-1.0), "model.moe_balance=-1.0 must be >= 0"),
    (dict(moe_experts=4, mlp="swiglu", moe_router="relu"),
     "unknown model.moe_router 'relu'"),
    (dict(moe_experts=4, mlp="swiglu", moe_shared_dim=-1), "model.moe_shared_dim=-1 must be >= 0"),
    (dict(moe_experts=6, mlp="swiglu", moe_groups=4), "the 6 experts must split into moe_groups"),
    (dict(moe_experts=4, mlp="swiglu", moe_shared_gate=True),
     "model.moe_shared_gate gates the shared expert, and model.moe_shared_dim=0 makes none"),
    (dict(moe_experts=8, mlp="swiglu", moe_groups=2, moe_top_groups=3),
     "of which 1..moe_groups are chosen"),
    (dict(moe_experts=4, mlp="swiglu", moe_groups=4), "leaves groups of 1 expert"),
    (dict(moe_experts=8, mlp="swiglu", moe_groups=4, moe_top_k=5),
     "model.moe_top_k=5 is more than the 2 experts of moe_top_groups=1 groups of 2"),
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


def test_the_train_step_adds_the_weighted_balance_which_moves_no_expert(one_sgd_step):
    """With plain SGD the balance term changes the routers' updates (and those of what feeds
    them) and no expert's, nor the final norm's: it reads the routers' probabilities only;
    the reported loss stays the cross-entropy."""
    def step(balance_weight):  # no clip: it would couple every update to the balance's
        arg = "arch=llama,moe_experts=4,size=smoke,seq_len=16,batch_size=2"
        loss, params = one_sgd_step(arg, model={"moe_balance": balance_weight},
                                    train={"grad_clip": 1e9})
        return loss, nnx.to_flat_state(params)

    loss, plain = step(0.0)
    loss_balanced, balanced = step(0.5)
    assert loss == loss_balanced
    for (path, a), (_, b) in zip(plain, balanced, strict=True):
        same = np.array_equal(a[...], b[...])
        if "router" in path:
            assert not same, path
        elif path[-1] in ("gate", "up", "down") or "final_norm" in path:
            assert same, path


def test_a_long_evaluation_runs_the_experts_over_token_blocks():
    """Rows past EVAL_MLP_BLOCK run the MLP over token blocks inside lax.map, where a module
    may not change its state: evaluation sows no balance, and the blocks give the whole."""
    from posjax.models import layers

    layer = _layer(top_k=2)
    x = jax.random.normal(jax.random.key(5), (2, 10, D))
    np.testing.assert_allclose(layers.token_blocks(layer, x, 4), layer(x), rtol=1e-6,
                               atol=1e-6)


def test_the_clamped_swiglu_mlp_alone_is_gpt_osss_gate():
    """mlp=swiglu_clamped without experts: W2 combine(W_g x, W_u x), GPT-OSS's combine."""
    from posjax.models.layers import ClampedSwiGLUMLP

    cfg = ModelConfig(d_model=D, num_heads=2, mlp="swiglu_clamped", dtype="float32",
                      mlp_dim=F)
    mlp = ClampedSwiGLUMLP(cfg, rngs=nnx.Rngs(0))
    x = np.asarray(4.0 * jax.random.normal(jax.random.key(6), (2, 3, D)), np.float64)
    f64 = lambda p: np.asarray(p.kernel[...], np.float64)
    expected = COMBINE["swiglu_clamped"](x @ f64(mlp.gate), x @ f64(mlp.up)) @ f64(mlp.down)
    np.testing.assert_allclose(mlp(jnp.asarray(x, jnp.float32)), expected, rtol=1e-5,
                               atol=1e-4)
