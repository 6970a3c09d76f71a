"""A mixture-of-experts MLP (model.moe_experts > 0; Mixtral, Qwen3-MoE, GPT-OSS, Llama 4):
each token goes to its top-k of E gated MLPs, their outputs weighted by the router.

    p = score(x W_r)                         W_r [D, E], float32; score: model.moe_router's,
                                             softmax over the experts or a sigmoid each
    e = top_k(p + b, k)                      the experts of the k largest scores, b: zero or
                                             model.moe_choice_bias's (DeepSeek-V3), among the
                                             model.moe_top_groups best of model.moe_groups
                                             groups (a group's score: its two best p + b)
    w = p_e / sum(p_e)                       renormalised with model.moe_norm_top_k (Mixtral's
                                             softmax over the top-k logits is the same thing),
                                             times model.moe_route_scale
    y = sum_j w_j MLP_{e_j}(x)               (model.moe_scale_input: sum_j MLP_{e_j}(w_j x),
                                             Llama 4's)
        + MLP_shared(x)                      with model.moe_shared_dim (Llama 4; times
                                             sigmoid(x w_g) with model.moe_shared_gate,
                                             Qwen2-MoE's)
    MLP_e(x) = combine(x G_e, x U_e) W_e
    G_e, U_e [D, F], W_e [F, D], F = model.moe_mlp_dim (else model.mlp_dim); combine: model.mlp's
    (swiglu: silu(g) u, geglu: gelu(g) u, swiglu_clamped: GPT-OSS's), as transformers'
    Qwen3MoeSparseMoeBlock, MixtralSparseMoeBlock, GptOssMLP and Llama4TextMoe compute; with
    model.mlp_bias the router and each expert's three projections have biases (GPT-OSS).

The T k (token, expert) pairs are sorted by expert and each expert's rows multiply its
weights in one grouped product (jax.lax.ragged_dot, MaxText's "sparse matmul"), so the work
is that of k MLPs per token, never E; a scatter-add sums each token's k outputs.

Each call sows its load-balancing loss (Switch Transformer, Fedus et al. 2022, eq. 4; the
`load_balancing_loss_func` of transformers' Mixtral and Qwen3-MoE),

    balance = E sum_e f_e P_e,   f_e = (top-k picks of e) / T,   P_e = mean_t softmax(x W_r)_e,

over the T tokens that are not padding (transformers' function with an attention mask), k at
its least (every expert picked equally, probabilities uniform; the softmax's whatever
the router's score, as transformers' function takes it), times model.moe_balance
as an nnx.Intermediate `balance` when it trains (`deterministic` false): the train step adds
their mean over the layers to the loss (`balance_loss`). Evaluation sows nothing, so a long
row's MLP may run over token blocks inside lax.map (layers.token_blocks).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
from flax import nnx

from posjax.models import initialisers
from posjax.models.layers import MLPS, MOE_ROUTERS, ModelConfig, dense


class MoEMLP(nnx.Module):
    """x: [B, L, D] -> [B, L, D] (module docstring): model.mlp's gated MLP (swiglu, geglu or
    swiglu_clamped) as E experts, and a shared one with model.moe_shared_dim."""

    reads_mode: ClassVar[bool] = True  # Block passes `deterministic` and `kept`

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        experts, width = cfg.moe_experts, cfg.moe_mlp_dim or cfg.resolved_mlp_dim
        convention = initialisers.convention(cfg.init)

        def stacked(shape, residual):  # each expert's [fan_in, fan_out] drawn as one kernel
            keys = jax.random.split(rngs.params(), experts)
            init = convention.kernel(residual, cfg.num_layers)
            return nnx.Param(jax.vmap(lambda key: init(key, shape, cfg.weight_dtype))(keys))

        self.router = dense(cfg.d_model, experts, cfg, rngs, use_bias=bool(cfg.mlp_bias))
        self.choice_bias = (nnx.Param(jnp.zeros((experts,), jnp.float32))
                            if cfg.moe_choice_bias else None)
        self.groups, self.top_groups = cfg.moe_groups, cfg.moe_top_groups
        self.route_scale = cfg.moe_route_scale
        self.gate = stacked((cfg.d_model, width), False)
        self.up = stacked((cfg.d_model, width), False)
        self.down = stacked((width, cfg.d_model), True)
        bias = lambda width: (nnx.Param(jnp.zeros((experts, width), cfg.weight_dtype))
                              if cfg.mlp_bias else None)
        self.gate_bias, self.up_bias, self.down_bias = bias(width), bias(width), bias(cfg.d_model)
        self.shared = (MLPS[cfg.mlp](dataclasses.replace(cfg, mlp_dim=cfg.moe_shared_dim),
                                     rngs=rngs) if cfg.moe_shared_dim else None)
        self.shared_gate = (dense(cfg.d_model, 1, cfg, rngs, use_bias=False)
                            if cfg.moe_shared_gate else None)
        self.top_k, self.norm_top_k = cfg.moe_top_k, cfg.moe_norm_top_k
        self.score, self.scale_input = MOE_ROUTERS[cfg.moe_router], cfg.moe_scale_input
        self.balance_weight = cfg.moe_balance
        self.combine = MLPS[cfg.mlp].combine
        self.compute_dtype = cfg.compute_dtype

    def route(self, tokens: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """tokens [T, D] -> (the router's logits float32[T, E], the top k's weights
        float32[T, k], their experts int32[T, k])."""
        logits = self.router(tokens).astype(jnp.float32)
        scores = self.score(logits)
        choice = scores if self.choice_bias is None else scores + self.choice_bias[...]
        if self.groups > 1:
            choice = _in_top_groups(choice, self.groups, self.top_groups)
        _, experts = jax.lax.top_k(choice, self.top_k)
        weights = jnp.take_along_axis(scores, experts, axis=-1)
        if self.norm_top_k:
            weights = weights / weights.sum(-1, keepdims=True)
        return logits, weights * self.route_scale, experts

    def __call__(self, x: jax.Array, *, deterministic: bool = True,
                 kept: jax.Array | None = None) -> jax.Array:
        """x [B, L, D] -> [B, L, D]; kept: bool[B, L], the tokens the balance counts (not
        padding; None: all)."""
        tokens = x.reshape(-1, x.shape[-1])
        logits, weights, experts = self.route(tokens)
        order = jnp.argsort(experts.reshape(-1), stable=True)  # pairs grouped by expert
        token = order // self.top_k
        sizes = jnp.bincount(experts.reshape(-1), length=self.gate.shape[0])
        dtype = self.compute_dtype
        row_weight = weights.reshape(-1)[order][:, None].astype(dtype)
        rows = tokens[token] * row_weight if self.scale_input else tokens[token]
        row_expert = experts.reshape(-1)[order]

        def grouped(h, kernel, bias):
            out = jax.lax.ragged_dot(h, kernel[...].astype(dtype), sizes,
                                     preferred_element_type=jnp.float32)
            return (out if bias is None else out + bias[...][row_expert]).astype(dtype)

        hidden = self.combine(grouped(rows, self.gate, self.gate_bias),
                              grouped(rows, self.up, self.up_bias))
        out = grouped(hidden, self.down, self.down_bias)
        if not self.scale_input:
            out = out * row_weight
        summed = jnp.zeros(tokens.shape, jnp.float32).at[token].add(out.astype(jnp.float32))
        if self.shared is not None:
            shared = self.shared(tokens).astype(jnp.float32)
            if self.shared_gate is not None:
                shared = shared * jax.nn.sigmoid(self.shared_gate(tokens).astype(jnp.float32))
            summed = summed + shared
        if not deterministic:
            probs = jax.nn.softmax(logits, axis=-1)
            kept = None if kept is None else kept.reshape(-1)
            self.sow(nnx.Intermediate, "balance",
                     self.balance_weight * balance(probs, experts, kept))
        return summed.astype(x.dtype).reshape(x.shape)


def _in_top_groups(choice: jax.Array, groups: int, top_groups: int) -> jax.Array:
    """choice float32[T, E] with -inf outside each token's `top_groups` best of `groups`
    equal groups of experts, a group's score the sum of its two best (DeepSeek-V3's
    noaux_tc routing, transformers' DeepseekV3TopkRouter)."""
    grouped = choice.reshape(choice.shape[0], groups, -1)
    score = jax.lax.top_k(grouped, 2)[0].sum(-1)  # [T, groups]
    kept = jnp.zeros_like(score, bool).at[
        jnp.arange(score.shape[0])[:, None], jax.lax.top_k(score, top_groups)[1]].set(True)
    return jnp.where(kept[..., None], grouped, -jnp.inf).reshape(choice.shape)


def balance(probs: jax.Array, experts: jax.Array, kept: jax.Array | None = None) -> jax.Array:
    """The load-balancing loss (module docstring) of probabilities float32[T, E] and the top-k
    experts int32[T, k] over the tokens `kept` (bool[T]; None: all): a float32 scalar, its
    gradient through the probabilities only."""
    count, top_k = probs.shape[1], experts.shape[1]
    weight = jnp.ones(probs.shape[0]) if kept is None else kept.astype(jnp.float32)
    tokens = jnp.maximum(weight.sum(), 1.0)
    picked = jnp.bincount(experts.reshape(-1), weights=jnp.repeat(weight, top_k),
                          length=count) / tokens
    return count * jnp.sum(picked * (probs * weight[:, None]).sum(0) / tokens)


def balance_loss(module: nnx.Module) -> jax.Array:
    """The mean of the weighted load-balancing losses the module's MoE layers sowed in its
    last call, taken out of it (0.0 where none did)."""
    sown = jax.tree.leaves(nnx.pop(module, nnx.Intermediate))
    return jnp.mean(jnp.stack(sown)) if sown else jnp.float32(0.0)
