"""The pre-norm transformer block shared by every model, and the model config it reads.

    h = x + Dropout(Attention(Norm(x)))          (pre-norm: Xiong et al. 2020, "On Layer
    y = h + Dropout(MLP(Norm(h)))                 Normalization in the Transformer Architecture")

or, with `model.parallel_residual` (GPT-J, GPT-NeoX), both branches read x:
    y = x + Dropout(Attention(Norm_1(x))) + Dropout(MLP(Norm_2(x)))

and with `model.post_norm` (Gemma 2, 3) each branch's output is normed too before it joins:
    h = x + Dropout(Norm_a(Attention(Norm(x))))

Position enters only through the encoding (posjax.encoders): its attention sites (rotate, bias,
rel_score, rel_value, content_score, rotate_value, mix_logits: posjax/encoders/base.py) run
inside `posjax.attention.multi_head_attention` with this layer's own copy of the encoding's
parameters. Those parameters are stored as `nnx.Param` leaves of a plain dict (`param_tree`)
and handed to the pure site functions as arrays (`values`), so they are trained, split,
merged, jitted and checkpointed exactly like the projection weights.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import nnx

from posjax.attention import linear, multi_head_attention
from posjax.encoders import Dims, Encoding
from posjax.errors import ConfigError, did_you_mean, unknown
from posjax.models import initialisers

DTYPES: dict[str, Any] = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
# The classifier's pooled representations (ModelConfig.pooling).
POOLINGS = ("cls", "mean")
# model.dtype="auto": bfloat16 where the matrix units are built for it, float32 on CPU (where
# bfloat16 matmuls are emulated and slower).
AUTO_DTYPE = {"gpu": "bfloat16", "tpu": "bfloat16"}


def resolve_dtype(name: str, platform: str | None = None) -> str:
    """The dtype `name` means on `platform` (default: JAX's backend): "auto" is bfloat16 on
    GPU and TPU, float32 elsewhere; any other name is itself."""
    if name != "auto":
        return name
    return AUTO_DTYPE.get(platform or jax.default_backend(), "float32")


MAX_LAYERS = 1024


def config_fields(cls) -> set[str]:
    """The names of dataclass `cls`'s fields that a config sets (not those marked
    metadata={"config": False})."""
    return {f.name for f in dataclasses.fields(cls) if f.metadata.get("config", True)}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The `config.model` section, validated once (one-line ConfigError per bad value).

    head_dim None means d_model // num_heads; mlp_dim None means 4 * d_model.
    attention, dense_max_len, block_size, linear_feature: see
      posjax.attention.multi_head_attention ("auto" is dense up to dense_max_len tokens and
      chunked above, chosen from the array length under jit).
    tie_embeddings: causal LM only (the MLM head is always tied, RoFormer/BERT style).
    embed_scale: token models multiply token embeddings by sqrt(d_model), as Vaswani et al.
      do, so that they match the unit scale of added sinusoidal positions (at init std 0.02
      a byte's embedding is otherwise ~50x smaller than the sinusoid it is added to).
    output, grid_width: patch model only (see posjax.models.transformer.PatchModel).
    pooling: the classifier's pooled representation (posjax.models.transformer.Classifier):
      "cls", the first token's (BOS, BERT's [CLS]) state through BERT's tanh pooler, or
      "mean", the mean over the non-padding tokens.
    num_kv_heads: grouped-query attention (Ainslie et al. 2023): keys and values get this many
      heads, each shared by num_heads / num_kv_heads query heads; None = num_heads (multi-head).
    qkv_bias, attn_out_bias: a bias on the q, k, v projections and on the attention output
      projection (Qwen2: on q, k, v only; Llama: none; GPT-NeoX: both).
    mlp_bias: biases in the MLP; None keeps the MLP's own choice (gelu: biased, swiglu: not);
      with moe_experts, on the router and every expert (GPT-OSS).
    head_bias: a bias on the causal LM's untied output projection (Hugging Face models: none).
    norm_eps: the epsilon of every normalisation layer (Llama's rms_norm_eps, NeoX's
      layer_norm_eps).
    parallel_residual: attention and MLP both read the block's input (see module docstring).
    absolute_last_layers: k > 0 adds a learned absolute table to the input of the last k
      layers (DeBERTa's enhanced mask decoder; see posjax.models.transformer.Backbone).
    share_position_params: one copy of the encoding's attention-site parameters for all
      layers (T5's and TUPE's code compute their position term once and share it) instead
      of one per layer.
    layer_pattern: a per-layer schedule, encoding names joined by "+" and cycled over the
      layers (posjax.models.transformer.layer_encodings): "" (default) is the encoding in
      every layer; "rope+rope+rope+none" is RoPE with every 4th layer NoPE (RNoPE, Yang et
      al. 2025; where Llama 4's iRoPE puts NoPE, whose RoPE layers also take
      `attention_chunk`); "fox+rope" alternates FoX and RoPE layers. The configured
      encoding keeps its hyperparameters, another name takes its defaults; the input site
      stays the model's. A recurrent layer's token (posjax.models.recurrent: "gdn", Gated
      DeltaNet) puts that layer in place of attention, with no encoding: "gdn+gdn+gdn+none"
      is Qwen3-Next's 3:1 hybrid with NoPE softmax layers (causal models only). An entry may
      carry settings, its encoding's hyperparameters and the layer's `window`,
      `attention_chunk`, `qk_norm` and `moe_experts`, and repeat (posjax.models.pattern):
      "rope(theta=1e4,window=1024)*5+rope(theta=1e6)" is Gemma 3's schedule,
      "rope(attention_chunk=8192)*3+rope(p=0,temperature_floor=8192,qk_norm=false)" Llama
      4's.
    output_gate: a sigmoid gate on each head's attention output, computed from the layer's
      input x before the output projection (Qiu et al. 2025, "Gated Attention for Large
      Language Models", qiuzh20/gated_attention; Qwen3-Next): "none" (default),
      "elementwise" (gate [B, L, H, Dh] = sigmoid(x W_g + b_g)) or "headwise" ([B, L, H, 1]).
    sink_logit: a learned logit per head in the softmax's denominator only (GPT-OSS), init 0,
      float32[H] per layer; dense and chunked carry it (and auto, which then never picks
      fused); fused, flash_bias and linear refuse it.
    attn_softcap: c > 0 caps every attention logit, position terms included, to
      c tanh(s / c) before the softmax (Gemma 2's attn_logit_softcapping, 50); dense and
      chunked carry it (and auto, which then picks one of them); 0 (default) = none.
    final_softcap: c > 0 caps the model's output logits to c tanh(z / c) (Gemma 2's
      final_logit_softcapping, 30); 0 (default) = none.
    moe_experts: E > 0 makes every MLP a mixture of experts (posjax.models.moe: Mixtral,
      Qwen3-MoE, GPT-OSS): a router sends each token to its moe_top_k experts, each
      model.mlp's gated MLP (swiglu, geglu or swiglu_clamped) moe_mlp_dim wide (None:
      mlp_dim), their outputs weighted by the router's probabilities, renormalised over the
      top k with moe_norm_top_k; training adds moe_balance times the load-balancing loss
      (Switch Transformer's, over the tokens that are not padding) to the loss. 0 (default)
      = one MLP. A layer_pattern entry's `moe_experts=0` gives its layers one MLP, mlp_dim
      wide (Llama 4 Maverick's and DeepSeek's dense layers among the experts).
    moe_router: how the router scores the experts (MOE_ROUTERS): "softmax" over the experts
      (default; Mixtral, Qwen3-MoE) or "sigmoid" of each logit (Llama 4, DeepSeek-V3).
    moe_scale_input: each expert reads its token times the router's weight, and its output
      is not weighted again (Llama 4; the gated MLP is not linear, so this differs from
      weighting the output, the default).
    moe_shared_dim: F > 0 adds a shared expert, model.mlp's MLP F wide, that every token goes
      through beside its routed experts (Llama 4; DeepSeek's shared experts, side by side,
      are one such MLP); 0 (default) = none.
    moe_shared_gate: with moe_shared_dim, the shared expert's output times sigmoid(x w_g), a
      gate of its own per token (Qwen2-MoE's shared_expert_gate, w_g [D, 1]).
    moe_choice_bias: a bias per expert added to the router's scores for the choice alone,
      not to the weights (DeepSeek-V3's e_score_correction_bias, zero at init; no gradient
      reaches it, and DeepSeek's rule that moves it by the experts' load is not applied).
    moe_groups, moe_top_groups: the experts in moe_groups groups, each token choosing among
      the moe_top_groups groups whose two best scores sum highest (DeepSeek-V3's n_group
      and topk_group: 8 and 4); 1 and 1 (default) = every expert.
    moe_route_scale: the routed experts' weights times this (DeepSeek-V3's
      routed_scaling_factor, 2.5); 1.0 (default).
    kv_lora_rank: d_c > 0 makes every attention layer multi-head latent attention with
      decoupled RoPE (DeepSeek-V2; posjax.models.latent): keys and values from one latent of
      d_c dims per token, the rotated dims of each key (the encoding's: rope's fraction) one
      projection shared by the heads, values Dh - R wide; 0 (default) = off.
    q_lora_rank: with kv_lora_rank, queries from a latent of this many dims (DeepSeek-V2 and
      V3: 1536); 0 (default) = a full-rank query projection.
    qk_norm: RMSNorm of q and k per head over Dh with a learned scale per head dim shared by
      the heads (Qwen3, Gemma 3), after the projections and before the encoding's rotation.
    qk_norm_axes: what qk_norm normalises over: "head" (default, the above), "per_head" (each
      head's Dh with a scale per head and dim, H * Dh in all: Command R+'s q_norm and k_norm)
      or "all" (the whole projection, H * Dh values with a scale each: OLMo 2 and 3's).
    qk_norm_type: the norm qk_norm applies, one of model.norm's: "rmsnorm" (default; Qwen3,
      Gemma 3, OLMo), "layernorm_no_bias" (the mean removed too: Command R+; ViT-22B's
      QK-LayerNorm is "layernorm") or "rmsnorm_no_scale" (no learned scale: Llama 4's
      L2Norm). A layer_pattern entry's `qk_norm=` overrides qk_norm for its layers (Llama
      4 normalises its RoPE layers' q and k only).
    post_norm: a second norm (model.norm) on each sublayer's output before it joins the
      residual stream, beside the pre-norm on its input (Gemma 2 and 3's post_attention_
      and post_feedforward_layernorm).
    pre_norm: the norm on each sublayer's input (default True); False with post_norm is
      x + Norm(Attention(x)), the output norms alone (OLMo 2, EXAONE 4).
    window: W > 0 makes every attention layer a causal sliding window (each query sees its W
      latest keys, itself included; Mistral, Gemma's local layers); 0 (default) = full
      attention. A layer_pattern entry's `window=` overrides it for its layers
      (posjax.models.transformer.layer_windows); linear attention and bidirectional kinds
      refuse a window.
    attention_chunk: C > 0 gives every attention layer Llama 4's chunked attention: a query
      sees only the keys in its own chunk of C token indices, [c C, (c + 1) C) (Llama 4's
      RoPE layers, chunks of 8192; transformers' chunked_overlay; not attention="chunked",
      the blockwise kernel); 0 (default) = none. A layer_pattern entry's
      `attention_chunk=` overrides it for its layers (transformer.layer_chunks). Every kernel
      carries it, through the segment ids (posjax.attention.masks.chunk_segments).
    init: the initialisation convention of the embeddings and projections
      (posjax.models.initialisers.INITS): "posjax" (default; embeddings N(0, 0.02^2),
      lecun-normal kernels), "gpt2" or "pytorch".
    window_encoding: not a config key: an evaluation's encoding for the layers with a sliding
      window where it differs from the other layers' (`--rope_scaling=...+global_only`
      scores them with the run's own encoding, as Gemma 3's code leaves its local layers'
      RoPE unscaled); None: every layer derives from the model's encoding.
    """

    d_model: int = 256
    num_layers: int = 4
    num_heads: int = 4
    head_dim: int | None = None
    mlp: str = "gelu"
    mlp_dim: int | None = None
    norm: str = "layernorm"
    dropout: float = 0.0
    param_dtype: str = "float32"
    dtype: str = "auto"
    attention: str = "auto"
    dense_max_len: int = 1024
    block_size: int = 256
    linear_feature: str = "elu"
    tie_embeddings: bool = False
    embed_scale: bool = False
    output: str = "pooled"
    pooling: str = "cls"
    grid_width: int | None = None
    absolute_last_layers: int = 0
    share_position_params: bool = False
    layer_pattern: str = ""
    num_kv_heads: int | None = None
    qkv_bias: bool = True
    attn_out_bias: bool = True
    mlp_bias: bool | None = None
    head_bias: bool = True
    norm_eps: float = 1e-6
    parallel_residual: bool = False
    output_gate: str = "none"
    sink_logit: bool = False
    attn_softcap: float = 0.0
    final_softcap: float = 0.0
    moe_experts: int = 0
    moe_top_k: int = 2
    moe_mlp_dim: int | None = None
    moe_norm_top_k: bool = True
    moe_balance: float = 0.01
    moe_router: str = "softmax"
    moe_scale_input: bool = False
    moe_shared_dim: int = 0
    moe_shared_gate: bool = False
    moe_choice_bias: bool = False
    moe_groups: int = 1
    moe_top_groups: int = 1
    moe_route_scale: float = 1.0
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_norm: bool = False
    qk_norm_axes: str = "head"
    qk_norm_type: str = "rmsnorm"
    post_norm: bool = False
    pre_norm: bool = True
    window: int = 0
    attention_chunk: int = 0
    init: str = "posjax"
    window_encoding: Encoding | None = dataclasses.field(default=None, metadata={"config": False})

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | Any) -> ModelConfig:
        """Build from a ConfigDict or mapping; missing keys take the defaults above."""
        given = dict(cfg.to_dict() if hasattr(cfg, "to_dict") else cfg)
        fields = config_fields(cls)
        for key in given:
            if key not in fields:
                raise ConfigError(
                    f"config.model has no field {key!r}{did_you_mean(key, fields)}; "
                    f"its fields: {', '.join(sorted(fields))}"
                )
        return cls(**given)

    def __post_init__(self):
        for name in ("d_model", "num_layers", "num_heads", "block_size", "dense_max_len"):
            if getattr(self, name) < 1:
                raise ConfigError(f"model.{name}={getattr(self, name)} must be >= 1")
        if self.num_layers > MAX_LAYERS:  # building that many modules ran for minutes, mute
            raise ConfigError(
                f"model.num_layers={self.num_layers} is more than the {MAX_LAYERS} layers "
                "posjax builds (each its own module): give fewer "
                "(a layer_pattern's *N repeats an entry, and smoke makes the model as deep as "
                "its pattern)")
        for name in ("head_dim", "mlp_dim", "grid_width", "num_kv_heads"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"model.{name}={value} must be >= 1 (or None for the default)")
        if not 0 <= self.absolute_last_layers <= self.num_layers:
            raise ConfigError(
                f"model.absolute_last_layers={self.absolute_last_layers} but the model has "
                f"{self.num_layers} layers: use 0..{self.num_layers}"
            )
        if self.num_heads % self.resolved_kv_heads:
            raise ConfigError(
                f"model.num_kv_heads={self.num_kv_heads} does not divide num_heads="
                f"{self.num_heads}: each key/value head serves a whole group of query heads"
            )
        self._check_attention_reach()
        if not self.norm_eps > 0.0:
            raise ConfigError(f"model.norm_eps={self.norm_eps} must be > 0 (e.g. 1e-6)")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"model.dropout={self.dropout} must be in [0, 1)")
        if self.head_dim is None and self.d_model % self.num_heads:
            raise ConfigError(
                f"model.d_model={self.d_model} is not divisible by num_heads={self.num_heads}: "
                "set model.head_dim explicitly"
            )
        for name, registry in (
            ("pooling", POOLINGS),
            ("mlp", MLPS),
            ("norm", NORMS),
            ("dtype", (*DTYPES, "auto")),
            ("param_dtype", DTYPES),
            ("output_gate", OUTPUT_GATES),
            ("qk_norm_axes", QK_NORM_AXES),
            ("qk_norm_type", NORMS),
            ("moe_router", MOE_ROUTERS),
            ("init", initialisers.INITS),
            ("linear_feature", linear.FEATURES),
        ):
            if getattr(self, name) not in registry:
                raise unknown(f"model.{name}", getattr(self, name), registry)
        self._check_norms()
        self._check_latent()
        self._check_experts()
        if self.linear_feature != "elu" and self.attention != "linear":
            raise ConfigError(f"model.linear_feature={self.linear_feature!r} is linear "
                              f"attention's feature map, and model.attention="
                              f"{self.attention!r} is softmax's: give attention=linear too, or "
                              "drop linear_feature")

    def _check_attention_reach(self) -> None:
        """The window, chunk and logit caps below 0, refused in one line."""
        if self.window < 0:
            raise ConfigError(f"model.window={self.window} must be >= 0 (0 = full attention)")
        if self.attention_chunk < 0:
            raise ConfigError(f"model.attention_chunk={self.attention_chunk} must be >= 0 "
                              "(0 = no chunks)")
        for name in ("attn_softcap", "final_softcap"):
            if getattr(self, name) < 0:
                raise ConfigError(f"model.{name}={getattr(self, name)} must be >= 0 (c > 0 "
                                  "caps logits to c tanh(s / c); 0 = none)")

    def _check_norms(self) -> None:
        """The norm switches that contradict each other, refused."""
        if not (self.pre_norm or self.post_norm):
            raise ConfigError("model.pre_norm=false with post_norm=false normalises no "
                              "sublayer: set post_norm=true (OLMo 2's and EXAONE 4's output "
                              "norms), or keep pre_norm")
        for name, default in (("qk_norm_axes", "head"), ("qk_norm_type", "rmsnorm")):
            if getattr(self, name) != default and not self.qk_norm:
                raise ConfigError(f"model.{name}={getattr(self, name)!r} says how qk_norm "
                                  "normalises, and qk_norm is false: set qk_norm=true too, or "
                                  f"drop {name}")

    def _check_latent(self) -> None:
        """Latent attention's ranks and the options it replaces, refused in one line."""
        for name in ("kv_lora_rank", "q_lora_rank"):
            if getattr(self, name) < 0:
                raise ConfigError(f"model.{name}={getattr(self, name)} must be >= 0 (0 = off)")
        if self.kv_lora_rank == 0:
            if self.q_lora_rank:
                raise ConfigError(f"model.q_lora_rank={self.q_lora_rank} is latent attention's "
                                  "query rank: give model.kv_lora_rank too (DeepSeek-V2: 512)")
            return
        if self.resolved_kv_heads != self.num_heads:
            raise ConfigError(f"model.kv_lora_rank={self.kv_lora_rank} gives every head its own "
                              f"keys from one latent, and model.num_kv_heads="
                              f"{self.num_kv_heads} groups them: drop one")
        if self.qk_norm:
            raise ConfigError(f"model.kv_lora_rank={self.kv_lora_rank} normalises its latents, "
                              "not q and k: drop qk_norm")

    def _check_experts(self) -> None:
        """The mixture of experts' sizes and MLP, refused in one line."""
        if self.moe_experts < 0:
            raise ConfigError(f"model.moe_experts={self.moe_experts} must be >= 0 (0 = one MLP)")
        if not self.moe_experts:
            return
        if not 1 <= self.moe_top_k <= self.moe_experts:
            raise ConfigError(f"model.moe_top_k={self.moe_top_k} must be 1..moe_experts="
                              f"{self.moe_experts}: the experts each token goes to")
        if not hasattr(MLPS[self.mlp], "combine"):
            raise ConfigError(f"model.moe_experts={self.moe_experts} makes each expert a gated "
                              f"MLP, and model.mlp={self.mlp!r} is not one: use mlp=swiglu "
                              "(Mixtral, Qwen3-MoE), swiglu_clamped (GPT-OSS) or geglu")
        if self.moe_balance < 0:
            raise ConfigError(f"model.moe_balance={self.moe_balance} must be >= 0 (the "
                              "load-balancing loss's weight; 0 = none)")
        self._check_expert_groups()
        if self.moe_shared_gate and not self.moe_shared_dim:
            raise ConfigError("model.moe_shared_gate gates the shared expert, and "
                              "model.moe_shared_dim=0 makes none: give moe_shared_dim too")
        if self.moe_shared_dim < 0:
            raise ConfigError(f"model.moe_shared_dim={self.moe_shared_dim} must be >= 0 (the "
                              "shared expert's width; 0 = none)")
        if self.moe_mlp_dim is not None and self.moe_mlp_dim < 1:
            raise ConfigError(f"model.moe_mlp_dim={self.moe_mlp_dim} must be >= 1 (or None for "
                              "mlp_dim)")

    def _check_expert_groups(self) -> None:
        """DeepSeek-V3's groups of experts, refused in one line where they cannot be formed."""
        groups, top = self.moe_groups, self.moe_top_groups
        if groups < 1 or not 1 <= top <= groups or self.moe_experts % groups:
            raise ConfigError(f"model.moe_groups={groups}, moe_top_groups={top}: the "
                              f"{self.moe_experts} experts must split into moe_groups equal "
                              "groups, of which 1..moe_groups are chosen (DeepSeek-V3: 8, 4)")
        size = self.moe_experts // groups
        if groups > 1 and size < 2:
            raise ConfigError(f"model.moe_groups={groups} leaves groups of {size} expert: a "
                              "group's score sums its two best, so each needs 2 or more")
        if self.moe_top_k > top * size:
            raise ConfigError(f"model.moe_top_k={self.moe_top_k} is more than the {top * size} "
                              f"experts of moe_top_groups={top} groups of {size}")

    @property
    def resolved_head_dim(self) -> int:
        """Per-head width Dh."""
        return self.head_dim or self.d_model // self.num_heads

    @property
    def resolved_kv_heads(self) -> int:
        """Key/value heads (num_heads without grouped-query attention)."""
        return self.num_kv_heads or self.num_heads

    def dims(self, max_len: int) -> Dims:
        """The sizes an encoding is built and checked with; max_len: the longest position
        count training reads (the training length, or M for randomized positions)."""
        return Dims(self.d_model, self.num_heads, self.resolved_head_dim, max_len)

    @property
    def resolved_mlp_dim(self) -> int:
        """MLP hidden width."""
        return self.mlp_dim or 4 * self.d_model

    @property
    def compute_dtype(self):
        """Activations' dtype ("auto" resolved on this backend); angles, biases and the
        softmax stay float32 whatever it is."""
        return DTYPES[resolve_dtype(self.dtype)]

    @property
    def weight_dtype(self):
        return DTYPES[self.param_dtype]


def param_tree(params: Any) -> Any:
    """Wrap an encoding's parameter pytree (from `Encoding.init`) as nnx.Param leaves.

    Leaves keep the dtype `init` gave them (float32), whatever the model's param_dtype: they
    are small, and positions are precision-sensitive (a bfloat16 frequency or table entry is
    off by up to 2^-9 relative). Assign the result through `nnx.data(...)`, which marks the
    plain container as pytree data, so nnx.split / nnx.state / nnx.Optimizer see every leaf.
    """
    return jax.tree.map(lambda leaf: nnx.Param(jnp.asarray(leaf)), params)


def values(tree: Any) -> Any:
    """The plain-array pytree behind a `param_tree` (what encoder site functions take)."""
    return jax.tree.map(lambda v: v[...], tree, is_leaf=lambda v: isinstance(v, nnx.Variable))


def _layer_norm(dim: int, cfg: ModelConfig, rngs: nnx.Rngs, bias: bool = True,
                **axes) -> nnx.Module:
    return nnx.LayerNorm(
        dim, epsilon=cfg.norm_eps, dtype=cfg.compute_dtype, param_dtype=cfg.weight_dtype,
        use_bias=bias, rngs=rngs, **axes
    )


def _rms_norm(dim: int, cfg: ModelConfig, rngs: nnx.Rngs, **options) -> nnx.Module:
    return nnx.RMSNorm(
        dim, epsilon=cfg.norm_eps, dtype=cfg.compute_dtype, param_dtype=cfg.weight_dtype,
        rngs=rngs, **options
    )


# What model.qk_norm normalises over: each head's Dh values (one scale for every head, or
# each head its own), or the whole projection's.
QK_NORM_AXES = ("head", "per_head", "all")

# Normalisation layers by the name users pass as `model.norm` (and model.qk_norm_type); a
# layer takes nnx's reduction_axes and feature_axes too.
NORMS: dict[str, Callable[..., nnx.Module]] = {
    "layernorm": _layer_norm,
    # Cohere's: the mean removed and a scale, no bias
    "layernorm_no_bias": functools.partial(_layer_norm, bias=False),
    "rmsnorm": _rms_norm,
    # x / rms(x), no scale to learn: Llama 4's L2Norm of q and k
    "rmsnorm_no_scale": functools.partial(_rms_norm, use_scale=False),
}

# model.moe_router: the router's scores of the experts from its logits [.., E], float32.
MOE_ROUTERS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "softmax": functools.partial(jax.nn.softmax, axis=-1),
    "sigmoid": jax.nn.sigmoid,
}


def make_norm(dim: int, cfg: ModelConfig, rngs: nnx.Rngs) -> nnx.Module:
    """The configured normalisation over the last axis of width `dim`."""
    return NORMS[cfg.norm](dim, cfg, rngs)


def matrix_dot_general(lhs, rhs, dimension_numbers, precision=None,
                       preferred_element_type=None, out_sharding=None):
    """`lax.dot_general` for a projection, as one matrix product where it can be: lhs
    [*free, *K] contracted over its trailing axes with rhs [*K, *out] over its leading ones
    (nnx.LinearGeneral's product with no batch axes) is computed as [prod(free), prod(K)] @
    [prod(K), prod(out)] and reshaped back. Same values; XLA:CPU then compiles the product
    and its two gradients with far fewer copies and transposes around them than on
    [B, L, D] inputs, and the step runs faster (experiments/bench, "Projections as one
    matrix product"). Anything else goes to lax.dot_general as given."""
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    n = len(lhs_contract)
    free = lhs.shape[:lhs.ndim - n]
    if (lhs_batch or rhs_batch or out_sharding is not None or len(free) < 2
            or tuple(lhs_contract) != tuple(range(lhs.ndim - n, lhs.ndim))
            or tuple(rhs_contract) != tuple(range(n))):
        return jax.lax.dot_general(lhs, rhs, dimension_numbers, precision=precision,
                                   preferred_element_type=preferred_element_type,
                                   out_sharding=out_sharding)
    out = rhs.shape[n:]
    product = jax.lax.dot_general(
        lhs.reshape(math.prod(free), -1), rhs.reshape(math.prod(rhs.shape[:n]), -1),
        (((1,), (0,)), ((), ())), precision=precision,
        preferred_element_type=preferred_element_type)
    return product.reshape(*free, *out)


def dense(d_in, d_out, cfg: ModelConfig, rngs: nnx.Rngs, *, residual: bool = False,
          **kwargs) -> nnx.LinearGeneral:
    """A projection computing in the model's dtype with parameters in its param_dtype,
    initialised by the model.init convention; residual: it writes into the residual stream
    (attention output, MLP down), which GPT-2's convention scales down."""
    convention = initialisers.convention(cfg.init)
    fan_in = math.prod(d_in) if isinstance(d_in, tuple) else d_in
    return nnx.LinearGeneral(
        d_in, d_out, dtype=cfg.compute_dtype, param_dtype=cfg.weight_dtype, rngs=rngs,
        kernel_init=convention.kernel(residual, cfg.num_layers),
        bias_init=convention.bias(fan_in), dot_general=matrix_dot_general, **kwargs
    )


def _mlp_bias(cfg: ModelConfig, default: bool) -> bool:
    return default if cfg.mlp_bias is None else cfg.mlp_bias


@functools.partial(jax.checkpoint, static_argnums=(1,))
def gelu(x: jax.Array, approximate: bool) -> jax.Array:
    """jax.nn.gelu, kept for the backward pass by its input alone and recomputed there (less
    activation memory than autodiff's several [B, L, mlp_dim] arrays); its values and
    gradients up to float32 rounding (experiments/bench, "GELU recomputed in the backward
    pass": the main job's numbers unchanged, its step's time not separating)."""
    return jax.nn.gelu(x, approximate=approximate)


class GeluMLP(nnx.Module):
    """x: [B, L, D] -> [B, L, D]:  W2 gelu(W1 x + b1) + b2  (Vaswani et al. 2017 with GELU),
    gelu in its tanh approximation (GPT-2's "gelu_new")."""

    approximate: ClassVar[bool] = True

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        bias = _mlp_bias(cfg, True)
        self.up = dense(cfg.d_model, cfg.resolved_mlp_dim, cfg, rngs, use_bias=bias)
        self.down = dense(cfg.resolved_mlp_dim, cfg.d_model, cfg, rngs, use_bias=bias,
                          residual=True)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.down(gelu(self.up(x), self.approximate))


class ExactGeluMLP(GeluMLP):
    """GeluMLP with the exact, erf-based gelu (BERT's and GPT-NeoX's "gelu")."""

    approximate = False


@functools.partial(jax.checkpoint, static_argnums=(2,))
def gated(gate: jax.Array, up: jax.Array, activation: Callable[[jax.Array], jax.Array]
          ) -> jax.Array:
    """activation(gate) * up, both [.., mlp_dim], kept for the backward pass by its two inputs
    alone and recomputed there, as `gelu` is (autodiff would also keep the activation's
    output and its own intermediates, each [.., mlp_dim])."""
    return activation(gate) * up


class SwiGLUMLP(nnx.Module):
    """x: [B, L, D] -> [B, L, D]:  W2 (silu(W_g x) * W_u x)  (Shazeer 2020, "GLU Variants");
    `combine` joins the gate's and the up projection's outputs (MoE experts use it too)."""

    activation: ClassVar[Callable[[jax.Array], jax.Array]] = staticmethod(jax.nn.silu)

    @classmethod
    def combine(cls, gate: jax.Array, up: jax.Array) -> jax.Array:
        return gated(gate, up, cls.activation)

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        bias = _mlp_bias(cfg, False)
        self.gate = dense(cfg.d_model, cfg.resolved_mlp_dim, cfg, rngs, use_bias=bias)
        self.up = dense(cfg.d_model, cfg.resolved_mlp_dim, cfg, rngs, use_bias=bias)
        self.down = dense(cfg.resolved_mlp_dim, cfg.d_model, cfg, rngs, use_bias=bias,
                          residual=True)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.down(self.combine(self.gate(x), self.up(x)))


class GeGLUMLP(SwiGLUMLP):
    """SwiGLUMLP with gelu (tanh approximation) as the gate: Gemma's MLP (GeGLU, Shazeer 2020;
    Hugging Face's "gelu_pytorch_tanh")."""

    activation = staticmethod(functools.partial(jax.nn.gelu, approximate=True))


# GPT-OSS's gate: its sigmoid's slope and the clip of both branches (transformers' GptOss
# swiglu_alpha and swiglu_limit defaults, the released models' values).
CLAMPED_ALPHA, CLAMPED_LIMIT = 1.702, 7.0


@jax.checkpoint
def clamped_gated(gate: jax.Array, up: jax.Array) -> jax.Array:
    """GPT-OSS's (clip(up, -7, 7) + 1) * g sigmoid(1.702 g), g = min(gate, 7); kept for the
    backward pass by its inputs alone, as `gated` is."""
    gate = jnp.minimum(gate, CLAMPED_LIMIT)
    glu = gate * jax.nn.sigmoid(CLAMPED_ALPHA * gate)
    return (jnp.clip(up, -CLAMPED_LIMIT, CLAMPED_LIMIT) + 1) * glu


class ClampedSwiGLUMLP(SwiGLUMLP):
    """SwiGLUMLP with GPT-OSS's clipped gate (`clamped_gated`; transformers' GptOssExperts)."""

    @classmethod
    def combine(cls, gate: jax.Array, up: jax.Array) -> jax.Array:
        return clamped_gated(gate, up)


# Feed-forward blocks by the name users pass as `model.mlp`.
MLPS: dict[str, type[nnx.Module]] = {
    "gelu": GeluMLP,
    "gelu_exact": ExactGeluMLP,
    "swiglu": SwiGLUMLP,
    "geglu": GeGLUMLP,
    "swiglu_clamped": ClampedSwiGLUMLP,
}


# model.output_gate: the gate's width per head (None: no gate). The authors' code widens
# q_proj by these columns, so the gate's bias follows the q projection's (model.qkv_bias).
OUTPUT_GATES: dict[str, int | None] = {"none": None, "elementwise": -1, "headwise": 1}


class Attention(nnx.Module):
    """Multi-head self-attention whose positional terms come from `encoding`.

    q, k, v = x W_Q, x W_K, x W_V  ([B, L, D] -> [B, L, H, Dh]; H * Dh need not equal D),
    out = Attn(q, k, v; encoding sites, masks) W_O  -> [B, L, D].
    model.qk_norm: q, k = RMSNorm(q), RMSNorm(k) over Dh (one learned [Dh] scale each,
    shared by the heads; qk_norm_axes "per_head": a [H * Dh] scale, each head its own; "all":
    over the whole [H * Dh] projection; qk_norm_type: another of model.norm's norms) before
    the attention, so before the encoding's rotation.
    model.output_gate: Attn(...) * sigmoid(x W_g + b_g) before W_O, with W_g [D, H, Dh]
    (elementwise) or [D, H, 1] (headwise).
    model.sink_logit: `sink` float32[H] (init 0), each head's learned logit in the softmax's
    denominator (posjax.attention.multi_head_attention's `sink`).
    cfg.window, cfg.attention_chunk: this layer's sliding window and chunk (0 = none): the
    caller hands each layer its own ModelConfig with them (posjax.models.transformer's
    layer_windows and layer_chunks).
    With grouped-query attention k and v are projected to Hkv = model.num_kv_heads heads and
    query head h reads key/value head h // (H / Hkv) (Hugging Face's repeat_kv order).
    `enc_params` is the encoding's parameters as a `param_tree` (an empty dict when the
    encoding has none), created by the caller with an explicit key: this layer's own copy, or
    the copy every layer shares (`model.share_position_params`).
    `position_reach`: every position the layer is called with is below it (the model's
    Dims.max_len: randomized and PoSE positions reach past a training row), so a kernel that
    tabulates the bias per distance (flash_bias) covers them; 0: the row's token indices.
    """

    def __init__(
        self,
        cfg: ModelConfig,
        encoding: Encoding,
        enc_params: Any,
        *,
        causal: bool,
        rngs: nnx.Rngs,
        position_reach: int = 0,
    ):
        value_dim = self._projections(cfg, encoding, rngs)
        self.out = dense((cfg.num_heads, value_dim), cfg.d_model, cfg, rngs, axis=(-2, -1),
                         use_bias=cfg.attn_out_bias, residual=True)
        gate_width = OUTPUT_GATES[cfg.output_gate]
        self.gate = (None if gate_width is None else
                     dense(cfg.d_model, (cfg.num_heads, value_dim if gate_width < 0 else 1),
                           cfg, rngs, use_bias=cfg.qkv_bias))
        self.sink = (nnx.Param(jnp.zeros((cfg.num_heads,), jnp.float32)) if cfg.sink_logit
                     else None)
        self.enc_params = nnx.data(enc_params)
        self.encoding = encoding
        self.causal = causal
        self.impl = cfg.attention
        self.dense_max_len = cfg.dense_max_len
        self.block_size = cfg.block_size
        self.linear_feature = cfg.linear_feature
        self.window = cfg.window
        self.attention_chunk = cfg.attention_chunk
        self.softcap = cfg.attn_softcap
        self.position_reach = position_reach

    def _projections(self, cfg: ModelConfig, encoding: Encoding, rngs: nnx.Rngs) -> int:
        """The q, k and v projections (with qk_norm's norms) that `project` applies; returns
        the value heads' width, which the output projection reads."""
        del encoding  # every head dim is the encoding's to use
        head_dim = cfg.resolved_head_dim
        heads = (cfg.num_heads, head_dim)
        kv_heads = (cfg.resolved_kv_heads, head_dim)
        self.query = dense(cfg.d_model, heads, cfg, rngs, use_bias=cfg.qkv_bias)
        self.key = dense(cfg.d_model, kv_heads, cfg, rngs, use_bias=cfg.qkv_bias)
        self.value = dense(cfg.d_model, kv_heads, cfg, rngs, use_bias=cfg.qkv_bias)
        self.group = cfg.num_heads // cfg.resolved_kv_heads
        self.qk_norm_all = cfg.qk_norm_axes == "all"
        norm, axes = NORMS[cfg.qk_norm_type], {}
        widths = (cfg.num_heads * head_dim, cfg.resolved_kv_heads * head_dim)
        if cfg.qk_norm_axes == "per_head":  # over Dh, a scale per (head, dim)
            axes = {"feature_axes": (-2, -1)}
        elif not self.qk_norm_all:
            widths = (head_dim, head_dim)
        self.q_norm = norm(widths[0], cfg, rngs, **axes) if cfg.qk_norm else None
        self.k_norm = norm(widths[1], cfg, rngs, **axes) if cfg.qk_norm else None
        return head_dim

    def project(self, x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(q [B, L, H, Dh], k, v [B, L, Hkv, Dh]) from x [B, L, D], q and k normalised with
        model.qk_norm (what the encoding's rotation then reads)."""
        q, k, v = self.query(x), self.key(x), self.value(x)
        if self.q_norm is not None and self.qk_norm_all:
            whole = lambda norm, t: norm(t.reshape(*t.shape[:-2], -1)).reshape(t.shape)
            q, k = whole(self.q_norm, q), whole(self.k_norm, k)
        elif self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        return q, k, v

    def __call__(self, x: jax.Array, positions: jax.Array, segment_ids: jax.Array) -> jax.Array:
        """x: [B, L, D]; positions: int32[B, L] or [B, L, ndim] (or [1, L] for every row);
        segment_ids: int32[B, L] or None (whole rows): multi_head_attention's docstring."""
        q, k, v = self.project(x)
        if self.group > 1:
            k, v = jnp.repeat(k, self.group, axis=2), jnp.repeat(v, self.group, axis=2)
        out = multi_head_attention(
            q,
            k,
            v,
            encoding=self.encoding,
            params=values(self.enc_params),
            q_pos=positions,
            k_pos=positions,
            q_seg=segment_ids,
            k_seg=segment_ids,
            causal=self.causal,
            x=x,
            impl=self.impl,
            dense_max_len=self.dense_max_len,
            block_size=self.block_size,
            linear_feature=self.linear_feature,
            sink=None if self.sink is None else self.sink[...],
            window=self.window,
            attention_chunk=self.attention_chunk,
            position_reach=self.position_reach,
            softcap=self.softcap,
        )
        out = out.astype(x.dtype)
        if self.gate is not None:  # [B, L, H, Dh or 1], from the layer's input
            out = out * jax.nn.sigmoid(self.gate(x)).astype(x.dtype)
        return self.out(out)


# Tables of at most this many rows are read by a one-hot product on an accelerator
# (`TableEmbed`): a gather's gradient is a scatter-add of every token into few rows, the
# slowest pattern for a GPU's atomics (experiments/bench/nvidia-h200), where a one-hot
# product's gradient is a matrix product. Larger tables keep the gather, whose one-hot would
# be B x L x V.
ONE_HOT_MAX_ROWS = 1024
ONE_HOT_PLATFORMS = frozenset({"gpu", "tpu"})


class TableEmbed(nnx.Embed):
    """nnx.Embed (the same parameter, init and `attend`) whose lookup is a one-hot matrix
    product where that is the faster gradient: on an accelerator (ONE_HOT_PLATFORMS) for a
    table of at most ONE_HOT_MAX_ROWS rows. Same values; an id outside the table gives zeros
    there, where the gather gives its fill value."""

    def __call__(self, inputs: jax.Array, out_sharding=None) -> jax.Array:
        """inputs: int[...] -> [..., features] in `dtype`."""
        if (self.num_embeddings > ONE_HOT_MAX_ROWS or out_sharding is not None
                or jax.default_backend() not in ONE_HOT_PLATFORMS):
            return super().__call__(inputs, out_sharding=out_sharding)
        (table,) = self.promote_dtype((self.embedding[...],), dtype=self.dtype, inexact=False)
        one_hot = jax.nn.one_hot(inputs, self.num_embeddings, dtype=table.dtype)
        # HIGHEST: a float32 table is selected exactly where matmuls default to TF32.
        return jnp.einsum("...v,vd->...d", one_hot, table, precision=jax.lax.Precision.HIGHEST)


def make_dropout(cfg: ModelConfig, rngs: nnx.Rngs) -> nnx.Dropout:
    """Dropout with its own fork of the 'dropout' stream (no rng state when rate is 0)."""
    if cfg.dropout == 0.0:
        return nnx.Dropout(0.0)
    try:
        stream = rngs["dropout"]
    except KeyError:
        raise ConfigError(
            f"model.dropout={cfg.dropout} needs a 'dropout' rng stream: build the model with "
            "nnx.Rngs(params=seed, dropout=seed + 1)"
        ) from None
    return nnx.Dropout(cfg.dropout, rngs=stream)


class Block(nnx.Module):
    """One pre-norm transformer layer (see module docstring); x: [B, L, D] -> [B, L, D].

    `attn` is the token mixer: `attention` (Attention, or posjax.models.latent's
    LatentAttention) with `encoding`, or, where `recurrent` names a class
    (posjax.models.recurrent.RECURRENT_LAYERS), that recurrent layer, which takes no encoding
    (`encoding` None, `enc_params` empty) and is built as `recurrent(cfg, causal=, rngs=)`.
    position_reach: Attention's (the positions' bound). `mlp`: the feed-forward layer's class,
    built as `mlp(cfg, rngs=)` (posjax.models.moe's MoEMLP), else MLPS[model.mlp]; a class
    whose `reads_mode` is true is called with `deterministic=` and `kept=` too (bool[B, L],
    the tokens that are not padding; None for whole rows).
    """

    def __init__(
        self,
        cfg: ModelConfig,
        encoding: Encoding | None,
        enc_params: Any,
        *,
        causal: bool,
        rngs: nnx.Rngs,
        recurrent: type[nnx.Module] | None = None,
        position_reach: int = 0,
        attention: type[Attention] = Attention,
        mlp: type[nnx.Module] | None = None,
    ):
        if cfg.pre_norm:
            self.attn_norm = make_norm(cfg.d_model, cfg, rngs)
        self.attn = (attention(cfg, encoding, enc_params, causal=causal, rngs=rngs,
                               position_reach=position_reach)
                     if recurrent is None else recurrent(cfg, causal=causal, rngs=rngs))
        if cfg.pre_norm:
            self.mlp_norm = make_norm(cfg.d_model, cfg, rngs)
        self.mlp = (mlp or MLPS[cfg.mlp])(cfg, rngs=rngs)
        if cfg.post_norm:
            self.attn_post_norm = make_norm(cfg.d_model, cfg, rngs)
            self.mlp_post_norm = make_norm(cfg.d_model, cfg, rngs)
        self.dropout = make_dropout(cfg, rngs)
        self.parallel_residual = cfg.parallel_residual
        self.pre_norm, self.post_norm = cfg.pre_norm, cfg.post_norm

    def __call__(
        self,
        x: jax.Array,
        positions: jax.Array,
        segment_ids: jax.Array,
        *,
        deterministic: bool = True,
        rngs: nnx.Rngs | None = None,
    ) -> jax.Array:
        """positions: int32[B, L] or [B, L, ndim] (or [1, L] for every row); segment_ids:
        int32[B, L] (0 = padding) or None (whole rows)."""
        drop = lambda h: self.dropout(h, deterministic=deterministic, rngs=rngs)
        attended = self.attn(self.attn_norm(x) if self.pre_norm else x, positions, segment_ids)
        h = x + drop(self.attn_post_norm(attended) if self.post_norm else attended)
        mlp_input = x if self.parallel_residual else h

        mode = ({"deterministic": deterministic,
                 "kept": None if segment_ids is None else segment_ids > 0}
                if getattr(self.mlp, "reads_mode", False) else {})

        def feed_forward(h):
            out = self.mlp(self.mlp_norm(h) if self.pre_norm else h, **mode)
            return self.mlp_post_norm(out) if self.post_norm else out

        if deterministic and x.shape[1] > EVAL_MLP_BLOCK:
            return h + token_blocks(feed_forward, mlp_input, EVAL_MLP_BLOCK)
        return h + drop(feed_forward(mlp_input))


# Evaluation rows longer than this run the position-wise MLP over blocks of this many tokens
# in turn, so its [B, L, mlp_dim] hidden state is never whole: a 128k-token evaluation then
# holds O(L * d_model), not O(L * mlp_dim), beside chunked attention's O(L) (see
# experiments/bench). Training keeps one pass, whose backward stores the hidden state anyway.
EVAL_MLP_BLOCK = 8192


def token_blocks(fn: Callable[[jax.Array], jax.Array], x: jax.Array, block: int) -> jax.Array:
    """fn, a position-wise map [B, l, D] -> [B, l, D'], applied to x [B, L, D] over blocks of
    `block` tokens one after another (lax.map); the last block is zero-padded and cut."""
    batch, length = x.shape[:2]
    count = -(-length // block)
    padded = jnp.pad(x, [(0, 0), (0, count * block - length)] + [(0, 0)] * (x.ndim - 2))
    blocks = jnp.moveaxis(padded.reshape(batch, count, block, *x.shape[2:]), 1, 0)
    out = jax.lax.map(fn, blocks)  # [count, B, block, D']
    return jnp.moveaxis(out, 0, 1).reshape(batch, count * block, *out.shape[3:])[:, :length]
