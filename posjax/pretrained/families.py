"""The Hugging Face model families posjax loads, by config.json's `model_type`.

Each family says how its config.json becomes posjax's ModelConfig and rope encoding, and how
its tensors become posjax's parameters (`Family`), and in a line what it builds (`about`:
`posjax list pretrained` prints them). The same blocks serve models trained from scratch
(configs/lm.py arch=llama | qwen2 | qwen3 | smollm3 | gemma3 | cohere2 | gpt_neox; phi3:
arch=llama with rope fraction=F, glm4 that with post_norm; exaone4 and olmo2, olmo3:
arch=llama with qk_norm, qk_norm_axes, post_norm, pre_norm=false and a layer_pattern).

Every config key that changes the computation is read or refused in one line: `checked`
lists each family's accepted values (hidden_act), `windows` each layer's sliding window,
`rotary` whether it rotates and `ropes` its RoPE's own settings (Gemma 3's local base): the
model's model.window, or a layer_pattern where layers differ (`layer_fields`).
Weights are mapped as `{posjax parameter path: array}`; a tensor the mapping does not read, or
a parameter it cannot fill, is a ConfigError (`posjax.pretrained.loader`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable, Collection, Mapping
from typing import Any

import numpy as np

from posjax.encoders import scaling
from posjax.errors import ConfigError
from posjax.registry import Registry

ParamPath = tuple[str | int, ...]
# posjax parameters by path, as a family maps a checkpoint
Params = dict[ParamPath, np.ndarray]
Tensors = Mapping[str, np.ndarray]
_ORIGINAL, _MAX = "original_max_position_embeddings", "max_position_embeddings"
# Frequency maps whose training length Hugging Face fills from max_position_embeddings
# (PreTrainedConfig.standardize_rope_params).
_TRAIN_LENGTH_MAPS = ("llama3", "yarn", "longrope")


def need(config: Mapping[str, Any], key: str, default: int | None = None) -> int:
    """config[key] (or `default` where it is absent), a size: a one-line ConfigError naming
    the key where it is missing or no positive whole number (a damaged config.json)."""
    value = config.get(key)
    if value is None:
        if default is not None:
            return default
        raise ConfigError(f"config.json has no {key!r}, which posjax needs to build the model")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"config.json's {key}={value!r} is not a positive whole number: the "
                          "snapshot's config.json is damaged, or of another kind of model")
    return value


# A rotation of part of each head, at the top level of config.json (a family that names its
# own key passes it to `rope_block`).
_PARTIAL = "partial_rotary_factor"


def rope_block(config: Mapping[str, Any], theta_key: str, fraction_key: str | None,
               theta_default: float, fraction_default: float = 1.0,
               deepseek_yarn: bool = False) -> dict[str, Any]:
    """posjax rope hyperparameters (theta, fraction, scaling) from either config layout:
    transformers < 5 (`rope_theta` or GPT-NeoX's `rotary_emb_base`, `rotary_pct`, a
    `rope_scaling` block) or 5 (one `rope_parameters` block holding them all). The block's
    training length follows Hugging Face: llama3, yarn and longrope read
    original_max_position_embeddings (the config's own top-level value first, else the
    block's, else max_position_embeddings), yarn and longrope with no factor take it as
    max_position_embeddings over that; dynamic reads max_position_embeddings only; yarn's
    mscale pair is read as Hugging Face's rotary module reads it (`scaling.hugging_face_yarn`),
    or kept with `deepseek_yarn` for posjax to apply whole (DeepSeek's attention adds the rest
    of it: `scaling._yarn_attention`). A family without `fraction_key` rotates whole heads
    and refuses a partial rotary factor."""
    block = dict(config.get("rope_scaling") or config.get("rope_parameters") or {})
    theta = block.pop("rope_theta", None) or config.get(theta_key) or theta_default
    fraction = block.pop(_PARTIAL, None)
    if not fraction_key:
        where, given = ("rope block's ", fraction) if fraction is not None else (
            "", config.get(_PARTIAL))
        if given not in (None, 1.0):
            raise ConfigError(
                f"config.json's {where}{_PARTIAL}={given}: posjax's "
                f"{config.get('model_type')} model rotates the whole head and does not read "
                "it, so it refuses the snapshot rather than guess which part rotates")
        fraction = 1.0
    elif fraction is None:
        fraction = config.get(fraction_key, fraction_default)
    kind = block.get("rope_type", block.get("type", "default"))
    if kind in _TRAIN_LENGTH_MAPS:
        if config.get(_ORIGINAL) is not None:
            block[_ORIGINAL] = config[_ORIGINAL]
        block.setdefault(_ORIGINAL, need(config, _MAX))
    if kind in ("yarn", "longrope") and block.get("factor") is None:
        block[_MAX] = need(config, _MAX)
    if kind == "dynamic":
        block.pop(_ORIGINAL, None)
        block[_MAX] = need(config, _MAX)
    block = block if deepseek_yarn else scaling.hugging_face_yarn(block)
    scaled = set(block) - {"rope_type", "type"}
    return dict(theta=float(theta), fraction=float(fraction), scaling=block if scaled else None)


def _heads(weight: np.ndarray, heads: int) -> np.ndarray:
    """A torch Linear weight [heads * Dh, D] as posjax's q/k/v kernel [D, heads, Dh]."""
    return weight.T.reshape(weight.shape[1], heads, -1)


def _head_bias(bias: np.ndarray, heads: int) -> np.ndarray:
    return bias.reshape(heads, -1)


def _out(weight: np.ndarray, heads: int) -> np.ndarray:
    """A torch Linear weight [D, heads * Dh] as posjax's output kernel [heads, Dh, D]."""
    return weight.T.reshape(heads, -1, weight.shape[0])


def _linear(tensors: Tensors, name: str, path: ParamPath, bias: bool) -> Params:
    """A torch Linear `name` [out, in] (+ bias) as posjax's kernel [in, out] (+ bias)."""
    params = {(*path, "kernel"): tensors[f"{name}.weight"].T}
    if bias:
        params[(*path, "bias")] = tensors[f"{name}.bias"]
    return params


def _norm(tensors: Tensors, name: str, path: ParamPath, bias: bool) -> Params:
    params = {(*path, "scale"): tensors[f"{name}.weight"]}
    if bias:
        params[(*path, "bias")] = tensors[f"{name}.bias"]
    return params


def _embedding_and_head(tensors: Tensors, cfg, embed: str, head: str) -> Params:
    params = {("embed", "embedding"): tensors[embed]}
    if not cfg.tie_embeddings:
        params[("head", "kernel")] = tensors[head].T
    return params


# --- llama, mistral, qwen2 -------------------------------------------------------------------


def _llama_model(config: Mapping[str, Any],
                 biases: tuple[bool, bool, bool] | None = None) -> dict[str, Any]:
    """ModelConfig fields of a Llama-style config. biases: (q/k/v, output, MLP) of a family
    whose modeling code fixes them (Mistral, Qwen2: transformers reads neither attention_bias
    nor mlp_bias there); None: Llama's attention_bias (q/k/v and output) and mlp_bias."""
    heads, width = need(config, "num_attention_heads"), need(config, "hidden_size")
    attention_bias = bool(config.get("attention_bias", False))
    qkv_bias, out_bias, mlp_bias = biases or (
        attention_bias, attention_bias, bool(config.get("mlp_bias", False)))
    return dict(
        d_model=width,
        num_layers=need(config, "num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=need(config, "num_key_value_heads", heads),
        head_dim=need(config, "head_dim", width // heads),
        mlp="swiglu",
        mlp_dim=need(config, "intermediate_size"),
        mlp_bias=mlp_bias,
        norm="rmsnorm",
        norm_eps=float(config.get("rms_norm_eps", 1e-6)),
        qkv_bias=qkv_bias,
        attn_out_bias=out_bias,
        head_bias=False,
        tie_embeddings=bool(config.get("tie_word_embeddings", False)),
    )


def _pre_norms(tensors: Tensors, hf: str, path: ParamPath) -> Params:
    """A Llama-style layer's two RMSNorm scales, before attention and before the MLP."""
    return {**_norm(tensors, f"{hf}.input_layernorm", (*path, "attn_norm"), False),
            **_norm(tensors, f"{hf}.post_attention_layernorm", (*path, "mlp_norm"), False)}


def _llama_layer(tensors: Tensors, cfg, i: int) -> Params:
    return {**_pre_norms(tensors, f"model.layers.{i}", ("backbone", "layers", i)),
            **_llama_projections(tensors, cfg, i)}


def _llama_projections(tensors: Tensors, cfg, i: int) -> Params:
    """A Llama-style layer's attention projections and MLP."""
    hf, path = f"model.layers.{i}", ("backbone", "layers", i)
    return {**_llama_attention(tensors, cfg, i),
            **_gated_mlp(tensors, f"{hf}.mlp", (*path, "mlp"), bool(cfg.mlp_bias))}


def _gated_mlp(tensors: Tensors, hf: str, path: ParamPath, bias: bool = False) -> Params:
    """A gated MLP's gate_proj, up_proj and down_proj under `hf` as posjax's at `path`."""
    params = {}
    for proj, name in (("gate_proj", "gate"), ("up_proj", "up"), ("down_proj", "down")):
        params.update(_linear(tensors, f"{hf}.{proj}", (*path, name), bias))
    return params


def _llama_attention(tensors: Tensors, cfg, i: int) -> Params:
    """A Llama-style layer's q, k, v and output projections."""
    hf, path = f"model.layers.{i}", ("backbone", "layers", i)
    attn, params = (*path, "attn"), {}
    for proj, name, heads in (("q_proj", "query", cfg.num_heads),
                              ("k_proj", "key", cfg.resolved_kv_heads),
                              ("v_proj", "value", cfg.resolved_kv_heads)):
        params[(*attn, name, "kernel")] = _heads(tensors[f"{hf}.self_attn.{proj}.weight"], heads)
        if cfg.qkv_bias:
            params[(*attn, name, "bias")] = _head_bias(tensors[f"{hf}.self_attn.{proj}.bias"],
                                                       heads)
    params[(*attn, "out", "kernel")] = _out(tensors[f"{hf}.self_attn.o_proj.weight"],
                                            cfg.num_heads)
    if cfg.attn_out_bias:
        params[(*attn, "out", "bias")] = tensors[f"{hf}.self_attn.o_proj.bias"]
    return params


def _llama_weights(tensors: Tensors, cfg, config: Mapping[str, Any],
                   layer: Callable = _llama_layer) -> Params:
    """A Llama-style checkpoint: its embedding (and output layer), final norm and each
    layer's tensors as `layer` maps them (config.json, `config`, sets nothing here)."""
    del config
    params = _embedding_and_head(tensors, cfg, "model.embed_tokens.weight", "lm_head.weight")
    params.update(_norm(tensors, "model.norm", ("backbone", "final_norm"), False))
    for i in range(cfg.num_layers):
        params.update(layer(tensors, cfg, i))
    return params


def _llama_rope(config: Mapping[str, Any]) -> dict[str, Any]:
    return rope_block(config, "rope_theta", None, 10000.0)


# transformers' SmolLM3Config default: a NoPE layer every this many layers.
SMOLLM3_NOPE_INTERVAL = 4
# transformers' Qwen3Config default head width, where config.json names none (Qwen3's own:
# 128 at every size, not hidden_size / heads).
QWEN3_HEAD_DIM = 128


def _qwen3_model(config: Mapping[str, Any]) -> dict[str, Any]:
    """Llama's fields with Qwen3's: attention_bias on q, k, v and the output, none on the
    MLP (transformers' Qwen3 reads no mlp_bias), q and k normalised per head, head_dim."""
    bias = bool(config.get("attention_bias", False))
    return dict(_llama_model(config, (bias, bias, False)), qk_norm=True,
                head_dim=need(config, "head_dim", QWEN3_HEAD_DIM))


def _qk_norms(tensors: Tensors, i: int) -> Params:
    """Layer i's q_norm and k_norm scales [head_dim] (Qwen3's)."""
    params = {}
    for name in ("q_norm", "k_norm"):
        params.update(_norm(tensors, f"model.layers.{i}.self_attn.{name}",
                            ("backbone", "layers", i, "attn", name), False))
    return params


def _qwen3_layer(tensors: Tensors, cfg, i: int) -> Params:
    """Llama's layer and its q_norm and k_norm scales [head_dim]."""
    return {**_llama_layer(tensors, cfg, i), **_qk_norms(tensors, i)}


# transformers' MistralConfig and Qwen2Config defaults: the window where config.json names
# none (null is no window), and Qwen2's first sliding layer where any slide.
HF_SLIDING_WINDOW = 4096
QWEN2_MAX_WINDOW_LAYERS = 28


def _every_layer_windows(config: Mapping[str, Any],
                         absent: int | None = HF_SLIDING_WINDOW) -> tuple[int, ...]:
    """config.json's sliding_window on every layer (null: full attention; absent: `absent`,
    transformers' default: Mistral's HF_SLIDING_WINDOW, Phi-3's none)."""
    return ((config.get("sliding_window", absent) or 0,)
            * need(config, "num_hidden_layers"))


def _qwen2_windows(config: Mapping[str, Any],
                   sliding: Callable[[int, int], bool] = lambda i, first: i >= first
                   ) -> tuple[int, ...]:
    """sliding_window where use_sliding_window is true, on the layers layer_types names
    sliding_attention (default: layer i where `sliding(i, max_window_layers)`, those from
    max_window_layers on, as transformers' Qwen2)."""
    layers = need(config, "num_hidden_layers")
    window = (config.get("sliding_window", HF_SLIDING_WINDOW)
              if config.get("use_sliding_window") else None)
    if not window:
        return (0,) * layers
    first = config.get("max_window_layers", QWEN2_MAX_WINDOW_LAYERS)
    types = config.get("layer_types") or [
        "sliding_attention" if sliding(i, first) else "full_attention" for i in range(layers)]
    return tuple(window if kind == "sliding_attention" else 0 for kind in types)


def layer_fields(windows: tuple[int, ...], rotary: tuple[bool, ...] = (),
                 ropes: tuple[str, ...] = (), settings: tuple[str, ...] = ()
                 ) -> dict[str, Any]:
    """ModelConfig fields of each layer's sliding window (0: full attention; (): none),
    whether it rotates (() : every layer does), its RoPE's own settings ("" or () : the loaded
    encoding's; a NoPE layer's make it the RoPE entry that stands for it: Llama 4's p=0,
    which rotates nothing, with its query temperature) and its other settings as a
    layer_pattern entry writes them ("attention_chunk=8192,moe_experts=0"; "" or (): none):
    model.window where the layers agree, all rotate and none has settings, else a
    layer_pattern of RoPE entries (the loaded encoding under its own name) and NoPE ones,
    one per run of equal layers of the shortest period the layers repeat, e.g.
    rope*14+rope(window=4096)*14, rope*3+none or
    rope(theta=10000.0,scaling=None,window=512)*5+rope."""
    count = max(map(len, (windows, rotary, ropes, settings)))
    windows = windows or (0,) * count
    rotary = rotary or (True,) * count
    ropes = ropes or ("",) * count
    settings = settings or ("",) * count
    layers = tuple(zip(windows, rotary, ropes, settings, strict=True))
    if len(set(layers)) <= 1 and all(rotary) and not any(ropes) and not any(settings):
        return {"window": windows[0]} if windows else {}

    def entry(window: int, rotates: bool, rope: str, own: str) -> str:
        given = [rope] * bool(rope) + [f"window={window}"] * bool(window) + [own] * bool(own)
        return ("rope" if rotates or rope else "none") + (f"({','.join(given)})" if given else "")

    period = next(p for p in range(1, len(layers) + 1)  # the pattern cycles over the layers
                  if len(layers) % p == 0 and layers == layers[:p] * (len(layers) // p))
    runs = [(entry(*layer), len(list(run)))
            for layer, run in itertools.groupby(layers[:period])]
    return {"layer_pattern": "+".join(f"{text}*{n}" if n > 1 else text for text, n in runs)}


def _smollm3_rotary(config: Mapping[str, Any]) -> tuple[bool, ...]:
    """Whether each layer rotates: no_rope_layers (1: RoPE, 0: NoPE; a longer list's first
    num_hidden_layers), else every no_rope_layer_interval-th layer (default 4) is NoPE, as
    transformers' SmolLM3Config."""
    layers = need(config, "num_hidden_layers")
    given = config.get("no_rope_layers")
    if given is None:
        interval = need(config, "no_rope_layer_interval", SMOLLM3_NOPE_INTERVAL)
        return tuple((i + 1) % interval != 0 for i in range(layers))
    if not isinstance(given, list) or len(given) < layers or not set(given) <= {0, 1}:
        raise ConfigError(f"config.json's no_rope_layers={given!r} is not a list of 0 and 1 "
                          f"for each of its {layers} layers: the snapshot's config.json is "
                          "damaged")
    return tuple(bool(x) for x in given[:layers])


def _smollm3_windows(config: Mapping[str, Any]) -> tuple[int, ...]:
    """sliding_window where use_sliding_window is true, on the layers layer_types names
    sliding_attention (default: the NoPE layers), as transformers' SmolLM3."""
    layers, window = need(config, "num_hidden_layers"), config.get("sliding_window")
    if not (config.get("use_sliding_window") and window):
        return (0,) * layers
    types = config.get("layer_types") or [
        "full_attention" if rotates else "sliding_attention" for rotates in
        _smollm3_rotary(config)]
    return tuple(window if kind == "sliding_attention" else 0 for kind in types)


# --- phi3 ------------------------------------------------------------------------------------


def _phi3_layer(tensors: Tensors, cfg, i: int) -> Params:
    """A Phi-3 layer: qkv_proj's rows are q, k, v one after another; gate_up_proj's are the
    gate, then up (Phi3MLP's chunk)."""
    hf, path = f"model.layers.{i}", ("backbone", "layers", i)
    attn, dh = (*path, "attn"), cfg.resolved_head_dim
    params = _pre_norms(tensors, hf, path)
    heads = {"query": cfg.num_heads, "key": cfg.resolved_kv_heads,
             "value": cfg.resolved_kv_heads}
    rows = np.split(tensors[f"{hf}.self_attn.qkv_proj.weight"],
                    np.cumsum([n * dh for n in heads.values()])[:-1])
    for (name, count), weight in zip(heads.items(), rows, strict=True):
        params[(*attn, name, "kernel")] = _heads(weight, count)
    params[(*attn, "out", "kernel")] = _out(tensors[f"{hf}.self_attn.o_proj.weight"],
                                            cfg.num_heads)
    params.update(_fused_mlp(tensors, hf, path))
    return params


def _fused_mlp(tensors: Tensors, hf: str, path: ParamPath) -> Params:
    """A SwiGLU whose gate_up_proj rows are the gate, then up (Phi-3's and GLM-4's chunk),
    and its down_proj; no biases."""
    gate, up = np.split(tensors[f"{hf}.mlp.gate_up_proj.weight"], 2)
    return {(*path, "mlp", "gate", "kernel"): gate.T, (*path, "mlp", "up", "kernel"): up.T,
            **_linear(tensors, f"{hf}.mlp.down_proj", (*path, "mlp", "down"), False)}


def _phi3_rope(config: Mapping[str, Any]) -> dict[str, Any]:
    return rope_block(config, "rope_theta", _PARTIAL, 10000.0)


# --- gemma2, gemma3_text ---------------------------------------------------------------------

# transformers' Gemma2Config defaults where config.json names none (the 2B's sizes); its
# layer types alternate, a sliding layer first (a full one every GEMMA2_PATTERN-th).
GEMMA2_DEFAULTS = dict(
    vocab_size=256_000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
    num_attention_heads=8, num_key_value_heads=4, head_dim=256,
    hidden_activation="gelu_pytorch_tanh", max_position_embeddings=8192, rms_norm_eps=1e-6,
    pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True,
    attention_bias=False, query_pre_attn_scalar=256, sliding_window=4096,
    final_logit_softcapping=30.0, attn_logit_softcapping=50.0)
GEMMA2_PATTERN = 2


def _softcap(config: Mapping[str, Any], key: str) -> float:
    """config.json's cap `key` as posjax's (None: no cap, 0)."""
    cap = config.get(key)
    if cap is None:
        return 0.0
    if isinstance(cap, bool) or not isinstance(cap, int | float) or not cap > 0:
        raise ConfigError(f"config.json's {key}={cap!r} is not a positive number (or null "
                          "for none): the snapshot's config.json is damaged")
    return float(cap)


def _gemma2_model(config: Mapping[str, Any]) -> dict[str, Any]:
    """Llama's fields with Gemma's: GeGLU, a norm after each sublayer too, embeddings times
    sqrt(hidden_size), tied output, attention_bias on q, k, v and the output (none on the
    MLP); logits capped in attention (attn_logit_softcapping) and at the output
    (final_logit_softcapping), where config.json sets them (Gemma 2: 50 and 30)."""
    bias = bool(config.get("attention_bias"))
    return dict(_llama_model(config, (bias, bias, False)), mlp="geglu", post_norm=True,
                embed_scale=True, attn_softcap=_softcap(config, "attn_logit_softcapping"),
                final_softcap=_softcap(config, "final_logit_softcapping"))


# transformers' Gemma3TextConfig defaults for the keys config.json leaves out (the 4B-27B
# snapshots' text_config names only a few), then its kwargs' defaults: a full-attention layer
# every this many layers (sliding_window_pattern), the global and the local rotary bases.
GEMMA3_TEXT_DEFAULTS = dict(
    vocab_size=262_208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
    num_attention_heads=8, num_key_value_heads=4, head_dim=256,
    hidden_activation="gelu_pytorch_tanh", max_position_embeddings=131_072, rms_norm_eps=1e-6,
    pad_token_id=0, eos_token_id=1, bos_token_id=2, tie_word_embeddings=True,
    attention_bias=False, query_pre_attn_scalar=256, sliding_window=4096)
GEMMA3_PATTERN = 6
GEMMA3_THETA, GEMMA3_LOCAL_THETA = 1_000_000.0, 10_000.0
_LAYER_TYPES = ("full_attention", "sliding_attention")


def _gemma3_model(config: Mapping[str, Any]) -> dict[str, Any]:
    """Gemma 2's fields (`_gemma2_model`) with q and k normalised per head (its attention cap
    refused: transformers' Gemma 3 attention does not apply one)."""
    return dict(_gemma2_model(config), qk_norm=True)


@dataclasses.dataclass(frozen=True)
class TypedRopes:
    """RoPE by layer type (Gemma 3, OLMo 3): the full-attention layers take rope_theta and the
    model's scaling block, the sliding ones a plain base of their own, unscaled.

    local_key: the top-level key of the sliding layers' base in transformers < 5's layout
    (Gemma 3's rope_local_base_freq; OLMo 3's rope_theta, the full layers' own);
    local_default, theta_default: the bases where config.json names none; every: a full layer
    every this many layers where config.json names no layer_types."""

    local_key: str
    local_default: float
    theta_default: float
    every: int

    def blocks(self, config: Mapping[str, Any]) -> tuple[dict, dict]:
        """(full, sliding) rope blocks: transformers 5's rope_parameters by layer type, else
        the top-level rope_theta and rope_scaling, and the local base."""
        nested = config.get("rope_parameters") or {}
        if set(nested) & set(_LAYER_TYPES):
            return (dict(nested.get("full_attention") or {}),
                    dict(nested.get("sliding_attention") or {}))
        local = config.get(self.local_key) or self.local_default
        return dict(config.get("rope_scaling") or nested), {"rope_theta": local}

    def rope(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The full layers' rope, the model's encoding (its scaling the model's only one); the
        sliding layers' where no layer is full."""
        full, local = self.blocks(config)
        if "full_attention" not in _layer_types(config, self.every):
            return dict(rope_block({"rope_parameters": local}, "rope_theta", None,
                                   self.local_default), scaling=None)
        view = {k: v for k, v in config.items() if k not in ("rope_scaling", "rope_parameters")}
        return rope_block(dict(view, rope_parameters=full), "rope_theta", None,
                          self.theta_default)

    def local(self, config: Mapping[str, Any]) -> str:
        """The sliding layers' rope settings over the model's encoding: their own base,
        unscaled; a sliding block of another type is refused."""
        _, local = self.blocks(config)
        kind = local.get("rope_type", local.get("type", "default"))
        if kind != "default" or set(local) - {"rope_type", "type", "rope_theta"}:
            raise ConfigError(f"config.json's sliding_attention rope block {local!r}: posjax's "
                              f"{config.get('model_type')} model rotates its sliding layers by "
                              "a plain base only (rope_type default), as its checkpoints do")
        return f"theta={float(local.get('rope_theta') or self.local_default)!r},scaling=None"

    def ropes(self, config: Mapping[str, Any]) -> tuple[str, ...]:
        """The sliding layers' settings beside full ones (none where every layer slides: the
        model's encoding is then theirs)."""
        local, types = self.local(config), _layer_types(config, self.every)
        if "full_attention" not in types:
            return ()
        return tuple(local if kind == "sliding_attention" else "" for kind in types)


GEMMA3_ROPES = TypedRopes("rope_local_base_freq", GEMMA3_LOCAL_THETA, GEMMA3_THETA,
                          GEMMA3_PATTERN)


def _layer_types(config: Mapping[str, Any], every: int) -> list[str]:
    """Each layer's type: layer_types, else a full_attention layer every
    sliding_window_pattern-th (default `every`: Gemma3TextConfig's GEMMA3_PATTERN,
    Cohere2Config's COHERE2_PATTERN), as transformers' configs."""
    every, layers = (need(config, "sliding_window_pattern", every),
                     need(config, "num_hidden_layers"))
    types = config.get("layer_types") or [
        "full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers or not set(types) <= set(_LAYER_TYPES):
        raise ConfigError(f"config.json's layer_types={types!r} is not one of "
                          f"{' or '.join(_LAYER_TYPES)} for each of its {layers} layers: the "
                          "snapshot's config.json is damaged")
    return types


def _typed_windows(config: Mapping[str, Any], every: int) -> tuple[int, ...]:
    """sliding_window on the sliding_attention layers (`_layer_types`), 0 on the others."""
    window = config.get("sliding_window") or 0
    return tuple(window if kind == "sliding_attention" else 0
                 for kind in _layer_types(config, every))


def _gemma_norm(tensors: Tensors, name: str, path: ParamPath, times: float = 1.0) -> Params:
    """A Gemma RMSNorm, whose weight w scales by 1 + w (Gemma3RMSNorm), as posjax's scale
    (times `times`)."""
    return {(*path, "scale"): (1.0 + tensors[f"{name}.weight"].astype(np.float32)) * times}


def _gemma_layer(tensors: Tensors, cfg, i: int) -> Params:
    """Llama's projections and MLP, with Gemma's four norms: before and after each sublayer."""
    hf, path = f"model.layers.{i}", ("backbone", "layers", i)
    params = _llama_layer(tensors, cfg, i)
    for name, ours in (("input_layernorm", "attn_norm"),
                       ("post_attention_layernorm", "attn_post_norm"),
                       ("pre_feedforward_layernorm", "mlp_norm"),
                       ("post_feedforward_layernorm", "mlp_post_norm")):
        params.update(_gemma_norm(tensors, f"{hf}.{name}", (*path, ours)))
    return params


def _gemma3_layer(tensors: Tensors, cfg, i: int, query_scale: float) -> Params:
    """Gemma's layer with q_norm and k_norm; q_norm's scale carries `query_scale`
    (`_gemma_weights`)."""
    hf, path = f"model.layers.{i}", ("backbone", "layers", i, "attn")
    params = _gemma_layer(tensors, cfg, i)
    params.update(_gemma_norm(tensors, f"{hf}.self_attn.q_norm", (*path, "q_norm"),
                              query_scale))
    params.update(_gemma_norm(tensors, f"{hf}.self_attn.k_norm", (*path, "k_norm")))
    return params


def _gemma2_layer(tensors: Tensors, cfg, i: int, query_scale: float) -> Params:
    """Gemma's layer, whose q projection carries `query_scale` (`_gemma_weights`)."""
    params = _gemma_layer(tensors, cfg, i)
    query = ("backbone", "layers", i, "attn", "query")
    for leaf in ("kernel", "bias"):
        if (*query, leaf) in params:
            params[(*query, leaf)] = params[(*query, leaf)].astype(np.float32) * query_scale
    return params


def _gemma_weights(tensors: Tensors, cfg, config: Mapping[str, Any], layer: Callable) -> Params:
    """A Gemma checkpoint with each layer's tensors as `layer` maps them, given the factor
    sqrt(head_dim / query_pre_attn_scalar) on q: Gemma scales scores by
    query_pre_attn_scalar^-1/2, posjax by head_dim^-1/2."""
    scalar = config.get("query_pre_attn_scalar")
    if isinstance(scalar, bool) or not isinstance(scalar, int | float) or not scalar > 0:
        raise ConfigError(f"config.json's query_pre_attn_scalar={scalar!r} is not a positive "
                          "number: the snapshot's config.json is damaged")
    layer = functools.partial(layer, query_scale=float(np.sqrt(cfg.resolved_head_dim / scalar)))
    params = _llama_weights(tensors, cfg, config, layer)
    params.update(_gemma_norm(tensors, "model.norm", ("backbone", "final_norm")))
    return params


# --- gpt_neox --------------------------------------------------------------------------------

# Hugging Face activation names -> posjax's MLPs: "gelu" is exact (erf); the others are the
# tanh approximation.
NEOX_MLPS = {"gelu": "gelu_exact", "gelu_new": "gelu", "gelu_fast": "gelu",
             "gelu_pytorch_tanh": "gelu"}


def _neox_model(config: Mapping[str, Any]) -> dict[str, Any]:
    heads, width = need(config, "num_attention_heads"), need(config, "hidden_size")
    bias = bool(config.get("attention_bias", True))
    return dict(
        d_model=width,
        num_layers=need(config, "num_hidden_layers"),
        num_heads=heads,
        head_dim=width // heads,
        mlp=NEOX_MLPS[config.get("hidden_act", "gelu")],
        mlp_dim=need(config, "intermediate_size"),
        norm="layernorm",
        norm_eps=float(config.get("layer_norm_eps", 1e-5)),
        qkv_bias=bias,
        attn_out_bias=bias,
        head_bias=False,
        parallel_residual=bool(config.get("use_parallel_residual", True)),
        tie_embeddings=bool(config.get("tie_word_embeddings", False)),
    )


def _neox_layer(tensors: Tensors, cfg, i: int) -> Params:
    hf, path = f"gpt_neox.layers.{i}", ("backbone", "layers", i)
    attn, heads = (*path, "attn"), cfg.num_heads
    params = {**_norm(tensors, f"{hf}.input_layernorm", (*path, "attn_norm"), True),
              **_norm(tensors, f"{hf}.post_attention_layernorm", (*path, "mlp_norm"), True)}
    # The fused projection's rows are [head, (q | k | v), Dh] (GPTNeoXAttention's view).
    fused = tensors[f"{hf}.attention.query_key_value.weight"]
    fused = fused.reshape(heads, 3, -1, fused.shape[-1])
    for j, name in enumerate(("query", "key", "value")):
        params[(*attn, name, "kernel")] = fused[:, j].transpose(2, 0, 1)
        if cfg.qkv_bias:
            bias = tensors[f"{hf}.attention.query_key_value.bias"].reshape(heads, 3, -1)
            params[(*attn, name, "bias")] = bias[:, j]
    params[(*attn, "out", "kernel")] = _out(tensors[f"{hf}.attention.dense.weight"], heads)
    if cfg.attn_out_bias:
        params[(*attn, "out", "bias")] = tensors[f"{hf}.attention.dense.bias"]
    params.update(_linear(tensors, f"{hf}.mlp.dense_h_to_4h", (*path, "mlp", "up"), True))
    params.update(_linear(tensors, f"{hf}.mlp.dense_4h_to_h", (*path, "mlp", "down"), True))
    return params


def _neox_weights(tensors: Tensors, cfg, config: Mapping[str, Any]) -> Params:
    del config  # every tensor's meaning is in cfg
    params = _embedding_and_head(tensors, cfg, "gpt_neox.embed_in.weight", "embed_out.weight")
    params.update(_norm(tensors, "gpt_neox.final_layer_norm", ("backbone", "final_norm"), True))
    for i in range(cfg.num_layers):
        params.update(_neox_layer(tensors, cfg, i))
    return params


# transformers' GPTNeoXConfig default share of each head that rotates.
NEOX_ROTARY_PCT = 0.25


def _neox_rope(config: Mapping[str, Any]) -> dict[str, Any]:
    return rope_block(config, "rotary_emb_base", "rotary_pct", 10000.0, NEOX_ROTARY_PCT)


# --- cohere, cohere2 --------------------------------------------------------------------------

# transformers' CohereConfig and Cohere2Config defaults: the logits' factor, and Cohere2's
# full-attention layer every this many layers where config.json names no layer_types.
COHERE_LOGIT_SCALE = 0.0625
COHERE2_PATTERN = 4


def _cohere_model(config: Mapping[str, Any]) -> dict[str, Any]:
    """Llama's fields with Cohere's: one LayerNorm without bias feeding attention and the MLP
    in parallel, attention_bias on q, k, v and the output, none on the MLP, tied output; with
    use_qk_norm (Command R+) q and k LayerNorm'd without bias per head, each head its own
    scale."""
    bias = bool(config.get("attention_bias", False))
    qk_norm = (dict(qk_norm=True, qk_norm_axes="per_head", qk_norm_type="layernorm_no_bias")
               if config.get("use_qk_norm") else {})
    return dict(_llama_model(config, (bias, bias, False)), norm="layernorm_no_bias",
                norm_eps=float(config.get("layer_norm_eps") or 1e-5), parallel_residual=True,
                tie_embeddings=bool(config.get("tie_word_embeddings", True)), **qk_norm)


def _cohere2_model(config: Mapping[str, Any]) -> dict[str, Any]:
    """Cohere's fields; every head hidden_size / heads wide (Cohere2Config sets head_dim so,
    whatever config.json says)."""
    return dict(_cohere_model(config),
                head_dim=need(config, "hidden_size") // need(config, "num_attention_heads"))


def _pairs_as_halves(kernel: np.ndarray, rotated: int | None = None) -> np.ndarray:
    """q or k [..., Dh] whose first `rotated` dims (default all) turn in interleaved pairs
    (2i, 2i + 1), as Cohere's and GLM-4's, with those moved to (i, i + rotated/2), the pairs
    posjax's RoPE turns: q.k is unchanged when both move alike, and each pair still turns at
    frequency i (their rotary modules' repeat_interleave)."""
    dh = kernel.shape[-1]
    rotated = rotated or dh
    order = [np.arange(0, rotated, 2), np.arange(1, rotated, 2), np.arange(rotated, dh)]
    return kernel[..., np.concatenate(order)]


def _interleaved_qk(params: Params, cfg, path: ParamPath, rotated: int | None = None) -> Params:
    """`params` with the query's and key's kernels (and biases) of the layer at `path` as
    posjax's rotary pairs (`_pairs_as_halves`)."""
    for name in ("query", "key"):
        for kind in ("kernel", "bias")[:1 + cfg.qkv_bias]:
            where = (*path, "attn", name, kind)
            params[where] = _pairs_as_halves(params[where], rotated)
    return params


def _cohere_layer(tensors: Tensors, cfg, i: int) -> Params:
    """Llama's projections and MLP; input_layernorm before both branches; q and k (and their
    biases, and Command R+'s q_norm and k_norm scales [heads, Dh]) with their rotary pairs as
    posjax's."""
    hf, path = f"model.layers.{i}", ("backbone", "layers", i)
    params = _interleaved_qk(_llama_projections(tensors, cfg, i), cfg, path)
    for ours in ("attn_norm", "mlp_norm"):
        params.update(_norm(tensors, f"{hf}.input_layernorm", (*path, ours), False))
    for name in ("q_norm", "k_norm")[:2 * cfg.qk_norm]:
        scale = _pairs_as_halves(tensors[f"{hf}.self_attn.{name}.weight"])
        params[(*path, "attn", name, "scale")] = scale.reshape(-1)
    return params


def _cohere_weights(tensors: Tensors, cfg, config: Mapping[str, Any]) -> Params:
    """Llama's tensors in Cohere's layers; logit_scale folded into the final norm's scale
    (the logits are linear in it: h E^T, tied)."""
    params = _embedding_and_head(tensors, cfg, "model.embed_tokens.weight", "lm_head.weight")
    scale = config.get("logit_scale", COHERE_LOGIT_SCALE)
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not scale > 0:
        raise ConfigError(f"config.json's logit_scale={scale!r} is not a positive number: the "
                          "snapshot's config.json is damaged")
    params[("backbone", "final_norm", "scale")] = (
        tensors["model.norm.weight"].astype(np.float32) * float(scale))
    for i in range(cfg.num_layers):
        params.update(_cohere_layer(tensors, cfg, i))
    return params


def _rotating_where_sliding(config: Mapping[str, Any], windows: tuple[int, ...]
                            ) -> tuple[bool, ...]:
    """Layers that rotate where they slide (Cohere2's and EXAONE 4's full-attention layers
    are NoPE); a model with no sliding layer would use no position encoding, refused."""
    rotary = tuple(window > 0 for window in windows)
    if not any(rotary):
        raise ConfigError(f"config.json's sliding_window={config.get('sliding_window')!r} "
                          "with its layer_types leaves no sliding layer, and transformers' "
                          f"{config.get('model_type')} rotates only those: no layer would use "
                          "a position encoding; give the snapshot's own layer_types and "
                          "sliding_window")
    return rotary


def _cohere2_rotary(config: Mapping[str, Any]) -> tuple[bool, ...]:
    """Cohere2 rotates its sliding layers only (Cohere2Attention rotates where it slides; the
    window is 4096 where config.json names none, and null rotates no layer)."""
    return _rotating_where_sliding(config, _typed_windows(config, COHERE2_PATTERN))


# --- exaone4 ---------------------------------------------------------------------------------

# transformers' Exaone4Config default: a full-attention layer every this many layers where
# config.json names no layer_types.
EXAONE4_PATTERN = 4


def _exaone4_model(config: Mapping[str, Any]) -> dict[str, Any]:
    """Llama's fields with EXAONE 4's: no biases, q and k RMS-normalised per head, each
    sublayer's output normed and its input not (model.pre_norm false, post_norm)."""
    return dict(_llama_model(config, (False, False, False)), qk_norm=True, post_norm=True,
                pre_norm=False)


def _exaone4_windows(config: Mapping[str, Any]) -> tuple[int, ...]:
    """sliding_window (4096 where config.json names none) on the sliding_attention layers
    (layer_types, else all but every sliding_window_pattern-th: an int; EXAONE's own string
    form, "LLLG", needs layer_types); none anywhere where it is null, as transformers'
    Exaone4Config."""
    if not config.get("sliding_window"):
        return (0,) * need(config, "num_hidden_layers")
    pattern = config.get("sliding_window_pattern", EXAONE4_PATTERN)
    if not config.get("layer_types") and not isinstance(pattern, int):
        raise ConfigError(f"config.json's sliding_window_pattern={pattern!r} with no "
                          "layer_types: transformers' exaone4 reads a whole number there; add "
                          "layer_types (sliding_attention or full_attention per layer)")
    return _typed_windows(config, EXAONE4_PATTERN)


def _exaone4_rotary(config: Mapping[str, Any]) -> tuple[bool, ...]:
    """EXAONE 4 rotates every layer where sliding_window is null, else its sliding layers
    only (a window with no sliding layer rotates none, refused)."""
    if not config.get("sliding_window"):
        return ()
    return _rotating_where_sliding(config, _exaone4_windows(config))


# --- olmo2, olmo3 -----------------------------------------------------------------------------

# transformers' Olmo3Config: a full-attention layer every this many layers where config.json
# names no layer_types; its base where config.json names none (PreTrainedConfig's).
OLMO3_PATTERN = 4
OLMO_THETA = 10_000.0
OLMO3_ROPES = TypedRopes("rope_theta", OLMO_THETA, OLMO_THETA, OLMO3_PATTERN)


def _olmo2_model(config: Mapping[str, Any]) -> dict[str, Any]:
    """Llama's fields with OLMo 2's: attention_bias on q, k, v and the output, none on the
    MLP, q and k RMS-normalised over the whole projection (model.qk_norm_axes all), each
    sublayer's output normed and its input not (model.pre_norm false, post_norm)."""
    bias = bool(config.get("attention_bias", False))
    return dict(_llama_model(config, (bias, bias, False)), qk_norm=True, qk_norm_axes="all",
                post_norm=True, pre_norm=False)


def _output_norms_layer(tensors: Tensors, cfg, i: int) -> Params:
    """Llama's projections and MLP, q_norm and k_norm, and the two output norms (OLMo 2 and
    3, whose norms span the projection, and EXAONE 4, whose norms span a head)."""
    hf, path = f"model.layers.{i}", ("backbone", "layers", i)
    params = _llama_projections(tensors, cfg, i)
    for name, ours in (("self_attn.q_norm", ("attn", "q_norm")),
                       ("self_attn.k_norm", ("attn", "k_norm")),
                       ("post_attention_layernorm", ("attn_post_norm",)),
                       ("post_feedforward_layernorm", ("mlp_post_norm",))):
        params.update(_norm(tensors, f"{hf}.{name}", (*path, *ours), False))
    return params


# --- glm4 ------------------------------------------------------------------------------------

# transformers' Glm4Config default share of each head that rotates.
GLM4_ROTARY = 0.5


def _glm4_model(config: Mapping[str, Any]) -> dict[str, Any]:
    """Llama's fields with GLM-4's: attention_bias on q, k, v (none on the output or the MLP),
    a norm before and after each sublayer (model.post_norm)."""
    bias = bool(config.get("attention_bias", True))
    return dict(_llama_model(config, (bias, False, False)), post_norm=True)


def _glm4_rope(config: Mapping[str, Any]) -> dict[str, Any]:
    return rope_block(config, "rope_theta", _PARTIAL, 10000.0, GLM4_ROTARY)


def _glm4_layer(tensors: Tensors, cfg, i: int, rotated: int) -> Params:
    """Llama's attention projections with the first `rotated` dims of q and k as posjax's
    pairs, the fused SwiGLU, and the four norms."""
    hf, path = f"model.layers.{i}", ("backbone", "layers", i)
    params = _interleaved_qk(_llama_attention(tensors, cfg, i), cfg, path, rotated)
    params.update(_fused_mlp(tensors, hf, path))
    for name, ours in (("input_layernorm", "attn_norm"),
                       ("post_self_attn_layernorm", "attn_post_norm"),
                       ("post_attention_layernorm", "mlp_norm"),
                       ("post_mlp_layernorm", "mlp_post_norm")):
        params.update(_norm(tensors, f"{hf}.{name}", (*path, ours), False))
    return params


def _glm4_weights(tensors: Tensors, cfg, config: Mapping[str, Any]) -> Params:
    rotated = int(cfg.resolved_head_dim * _glm4_rope(config)["fraction"])
    return _llama_weights(tensors, cfg, config,
                          functools.partial(_glm4_layer, rotated=rotated))


# --- qwen3_moe, mixtral, gpt_oss -------------------------------------------------------------


def _moe_fields(config: Mapping[str, Any], experts: str, norm_top_k: bool) -> dict[str, Any]:
    """ModelConfig's mixture-of-experts fields: `experts` names config.json's expert count,
    num_experts_per_tok the top k, moe_intermediate_size (else intermediate_size) each
    expert's width."""
    return dict(moe_experts=need(config, experts), moe_top_k=need(config, "num_experts_per_tok"),
                moe_mlp_dim=need(config, "moe_intermediate_size",
                                 need(config, "intermediate_size")),
                moe_norm_top_k=norm_top_k)


def _experts(tensors: Tensors, cfg, i: int, hf: str, names: tuple[str, str, str]) -> Params:
    """The router `hf`.gate [E, D] and each expert `hf`.experts.e's gate, up and down
    projections (named `names`) of layer i, stacked [E, in, out] as posjax's MoEMLP."""
    path = ("backbone", "layers", i, "mlp")
    params = {(*path, "router", "kernel"): tensors[f"{hf}.gate.weight"].T}
    for name, ours in zip(names, ("gate", "up", "down"), strict=True):
        params[(*path, ours)] = np.stack([tensors[f"{hf}.experts.{e}.{name}.weight"].T
                                          for e in range(cfg.moe_experts)])
    return params


def _qwen3_moe_model(config: Mapping[str, Any]) -> dict[str, Any]:
    """Qwen3's fields (head_dim hidden_size / heads where config.json names none, as
    Qwen3MoeConfig) with a mixture of experts on every layer: num_experts (transformers 5
    saves it as num_local_experts); norm_topk_prob renormalises the top k."""
    heads = need(config, "num_attention_heads")
    experts = "num_experts" if "num_experts" in config else "num_local_experts"
    return dict(_qwen3_model(config),
                head_dim=need(config, "head_dim", need(config, "hidden_size") // heads),
                **_moe_fields(config, experts, bool(config.get("norm_topk_prob"))))


def _qwen3_moe_dense(config: Mapping[str, Any]) -> set[int]:
    """The layers with a dense MLP among the experts: those in mlp_only_layers, and those
    not on every decoder_sparse_step-th (Qwen3MoeDecoderLayer's rule)."""
    layers, step = need(config, "num_hidden_layers"), need(config, "decoder_sparse_step", 1)
    only = config.get("mlp_only_layers") or []
    if not isinstance(only, list) or not set(only) <= set(range(layers)):
        raise ConfigError(f"config.json's mlp_only_layers={only!r} is not a list of layer "
                          f"indices below {layers}: the snapshot's config.json is damaged")
    return {i for i in range(layers) if i in only or (i + 1) % step}


def _dense_settings(config: Mapping[str, Any], dense: Collection[int]) -> tuple[str, ...]:
    """Each layer's settings where the layers in `dense` have a dense MLP among experts."""
    return tuple("moe_experts=0" if i in dense else ""
                 for i in range(need(config, "num_hidden_layers")))


def _qwen3_moe_layer(tensors: Tensors, cfg, i: int, dense: set[int]) -> Params:
    """Qwen3's norms and attention (q_norm and k_norm) with the experts of mlp.experts, or,
    on the layers in `dense`, mlp's dense MLP."""
    hf, path = f"model.layers.{i}", ("backbone", "layers", i)
    mlp = (_gated_mlp(tensors, f"{hf}.mlp", (*path, "mlp")) if i in dense else
           _experts(tensors, cfg, i, f"{hf}.mlp", ("gate_proj", "up_proj", "down_proj")))
    return {**_pre_norms(tensors, hf, path), **_llama_attention(tensors, cfg, i),
            **_qk_norms(tensors, i), **mlp}


def _qwen3_moe_weights(tensors: Tensors, cfg, config: Mapping[str, Any]) -> Params:
    dense = _qwen3_moe_dense(config)
    return _llama_weights(tensors, cfg, config,
                          lambda tensors, cfg, i: _qwen3_moe_layer(tensors, cfg, i, dense))


def _qwen3_moe_windows(config: Mapping[str, Any]) -> tuple[int, ...]:
    """sliding_window on every layer where use_sliding_window is true (Qwen3MoeConfig drops
    it otherwise)."""
    if config.get("use_sliding_window"):
        return _every_layer_windows(config)
    return (0,) * need(config, "num_hidden_layers")


def _qwen2_moe_model(config: Mapping[str, Any]) -> dict[str, Any]:
    """Qwen2's fields (qkv_bias on q, k and v, default true; none on the output) with its
    experts (num_experts, moe_intermediate_size, norm_topk_prob) and a shared expert
    (shared_expert_intermediate_size) under a gate of its own (shared_expert_gate)."""
    return dict(_llama_model(config, (bool(config.get("qkv_bias", True)), False, False)),
                **_moe_fields(config, "num_experts", bool(config.get("norm_topk_prob"))),
                moe_shared_dim=need(config, "shared_expert_intermediate_size"),
                moe_shared_gate=True)


def _qwen2_moe_layer(tensors: Tensors, cfg, i: int, dense: set[int]) -> Params:
    """Llama's norms and attention with mlp's experts, its shared expert and that expert's
    gate [1, D], or, on the layers in `dense`, mlp's dense MLP."""
    hf, path = f"model.layers.{i}", ("backbone", "layers", i)
    params = {**_pre_norms(tensors, hf, path), **_llama_attention(tensors, cfg, i)}
    if i in dense:
        return {**params, **_gated_mlp(tensors, f"{hf}.mlp", (*path, "mlp"))}
    mlp = (*path, "mlp")
    return {**params, **_experts(tensors, cfg, i, f"{hf}.mlp", ("gate_proj", "up_proj",
                                                                  "down_proj")),
            **_gated_mlp(tensors, f"{hf}.mlp.shared_expert", (*mlp, "shared")),
            **_linear(tensors, f"{hf}.mlp.shared_expert_gate", (*mlp, "shared_gate"), False)}


def _qwen2_moe_weights(tensors: Tensors, cfg, config: Mapping[str, Any]) -> Params:
    dense = _qwen3_moe_dense(config)
    return _llama_weights(tensors, cfg, config,
                          lambda tensors, cfg, i: _qwen2_moe_layer(tensors, cfg, i, dense))


MIXTRAL_THETA = 1_000_000.0


def _mixtral_model(config: Mapping[str, Any]) -> dict[str, Any]:
    """Mistral's fields with a mixture of experts on every layer, its top k always
    renormalised (MixtralTopKRouter)."""
    return dict(_llama_model(config, (False, False, False)),
                **_moe_fields(config, "num_local_experts", True))


def _mixtral_layer(tensors: Tensors, cfg, i: int) -> Params:
    """Llama's norms and attention with the experts of block_sparse_moe (w1 gate, w3 up, w2
    down)."""
    hf, path = f"model.layers.{i}", ("backbone", "layers", i)
    return {**_pre_norms(tensors, hf, path), **_llama_attention(tensors, cfg, i),
            **_experts(tensors, cfg, i, f"{hf}.block_sparse_moe", ("w1", "w3", "w2"))}


# transformers' GptOssConfig defaults where config.json names none (gpt-oss-120b's sizes):
# YaRN over 4096 tokens, a sliding layer (window 128) then a full one.
GPT_OSS_DEFAULTS = dict(
    vocab_size=201_088, hidden_size=2880, intermediate_size=2880, num_hidden_layers=36,
    num_attention_heads=64, num_key_value_heads=8, head_dim=64, num_local_experts=128,
    num_experts_per_tok=4, sliding_window=128, max_position_embeddings=131_072,
    rms_norm_eps=1e-5, attention_bias=True, tie_word_embeddings=False, rope_theta=150_000.0,
    rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                  "truncate": False, "original_max_position_embeddings": 4096})
GPT_OSS_PATTERN = 2


def _gpt_oss_model(config: Mapping[str, Any]) -> dict[str, Any]:
    """Llama's fields with GPT-OSS's: biases on q, k, v and the output (attention_bias), a
    learned sink logit per head, and a mixture of experts on every layer whose router and
    experts have biases, each expert GPT-OSS's clipped SwiGLU (model.mlp swiglu_clamped), its
    top k renormalised (a softmax over the top k's logits)."""
    bias = bool(config.get("attention_bias"))
    return dict(_llama_model(config, (bias, bias, True)), mlp="swiglu_clamped",
                sink_logit=True, **_moe_fields(config, "num_local_experts", True))


def _gpt_oss_layer(tensors: Tensors, cfg, i: int) -> Params:
    """Llama's norms and attention, the sinks, and the router and experts of mlp: the experts'
    gate_up_proj [E, D, 2F] (and its bias) interleaves the gate's and the up projection's
    columns, (g_0, u_0, g_1, u_1, ...)."""
    hf, path = f"model.layers.{i}", ("backbone", "layers", i)
    mlp = (*path, "mlp")
    gate_up, gate_up_bias = (tensors[f"{hf}.mlp.experts.{name}"]
                             for name in ("gate_up_proj", "gate_up_proj_bias"))
    return {**_pre_norms(tensors, hf, path), **_llama_attention(tensors, cfg, i),
            (*path, "attn", "sink"): tensors[f"{hf}.self_attn.sinks"],
            **_linear(tensors, f"{hf}.mlp.router", (*mlp, "router"), True),
            (*mlp, "gate"): gate_up[..., ::2], (*mlp, "up"): gate_up[..., 1::2],
            (*mlp, "gate_bias"): gate_up_bias[..., ::2], (*mlp, "up_bias"): gate_up_bias[..., 1::2],
            (*mlp, "down"): tensors[f"{hf}.mlp.experts.down_proj"],
            (*mlp, "down_bias"): tensors[f"{hf}.mlp.experts.down_proj_bias"]}


# --- llama4_text -----------------------------------------------------------------------------

# transformers' Llama4TextConfig defaults where config.json names none (Llama 4 Scout's
# sizes): 3 chunked RoPE layers per NoPE layer, experts on every layer.
LLAMA4_DEFAULTS = dict(
    vocab_size=202_048, hidden_size=5120, intermediate_size=8192, intermediate_size_mlp=16_384,
    num_hidden_layers=48, num_attention_heads=40, num_key_value_heads=8, head_dim=128,
    max_position_embeddings=131_072, rms_norm_eps=1e-5, tie_word_embeddings=False,
    num_local_experts=16, num_experts_per_tok=1, interleave_moe_layer_step=1,
    use_qk_norm=True, no_rope_layer_interval=4, attention_chunk_size=8192,
    attn_temperature_tuning=True, floor_scale=8192, attn_scale=0.1, attention_bias=False,
    rope_theta=500_000.0)


def _llama4_model(config: Mapping[str, Any]) -> dict[str, Any]:
    """Llama's fields with Llama 4's: attention_bias on q, k, v and the output; q and k of the
    RoPE layers divided by their RMS, no scale (use_qk_norm; the NoPE layers' entries turn
    it off); dense layers intermediate_size_mlp wide; experts intermediate_size wide, a
    sigmoid router's top k (num_experts_per_tok) weighting each expert's input, and a shared
    expert as wide."""
    bias = bool(config.get("attention_bias"))
    width = need(config, "intermediate_size")
    norm = dict(qk_norm=True, qk_norm_type="rmsnorm_no_scale") if config.get("use_qk_norm") \
        else {}
    return dict(_llama_model(config, (bias, bias, False)),
                mlp_dim=need(config, "intermediate_size_mlp"), **norm,
                moe_experts=need(config, "num_local_experts"),
                moe_top_k=need(config, "num_experts_per_tok"), moe_mlp_dim=width,
                moe_norm_top_k=False, moe_router="sigmoid", moe_scale_input=True,
                moe_shared_dim=width)


def _llama4_rotary(config: Mapping[str, Any]) -> tuple[bool, ...]:
    """Whether each layer rotates: no_rope_layers (1: RoPE), where empty or absent a NoPE
    layer every no_rope_layer_interval-th (Llama4TextConfig's, as SmolLM3's)."""
    return _smollm3_rotary({**config, "no_rope_layers": config.get("no_rope_layers") or None})


def _llama4_moe_layers(config: Mapping[str, Any]) -> set[int]:
    """The layers with experts: moe_layers, else every interleave_moe_layer_step-th (Scout:
    all, Maverick: every other), as Llama4TextConfig."""
    layers, given = need(config, "num_hidden_layers"), config.get("moe_layers")
    if given is None:
        step = need(config, "interleave_moe_layer_step")
        return set(range(step - 1, layers, step))
    if not isinstance(given, list) or not set(given) <= set(range(layers)):
        raise ConfigError(f"config.json's moe_layers={given!r} is not a list of layer indices "
                          f"below {layers}: the snapshot's config.json is damaged")
    return set(given)


def _llama4_settings(config: Mapping[str, Any]) -> tuple[str, ...]:
    """Each layer's settings beyond its RoPE: attention_chunk_size on the chunked_attention
    layers (layer_types, else the RoPE layers), q/k norm off on the NoPE layers, and no
    experts on the dense ones."""
    rotary, chunk = _llama4_rotary(config), config.get("attention_chunk_size")
    types = config.get("layer_types") or [
        "chunked_attention" if rotates and chunk else "full_attention" for rotates in rotary]
    if len(types) != len(rotary) or not set(types) <= {"chunked_attention", "full_attention"}:
        raise ConfigError(f"config.json's layer_types={types!r} is not chunked_attention or "
                          f"full_attention for each of its {len(rotary)} layers: the "
                          "snapshot's config.json is damaged")
    moe = _llama4_moe_layers(config)
    return tuple(",".join([f"attention_chunk={chunk}"] * (kind == "chunked_attention")
                          + ["qk_norm=false"] * bool(config.get("use_qk_norm") and not rotates)
                          + ["moe_experts=0"] * (i not in moe))
                 for i, (kind, rotates) in enumerate(zip(types, rotary, strict=True)))


def _llama4_ropes(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The NoPE layers' query temperature (attn_temperature_tuning: floor_scale, attn_scale)
    as a RoPE that rotates nothing (rope p=0), "" on the RoPE layers; () without it."""
    if not config.get("attn_temperature_tuning"):
        return ()
    temperature = (f"p=0.0,temperature_floor={need(config, 'floor_scale')},"
                   f"temperature_scale={float(config['attn_scale'])}")
    return tuple("" if rotates else temperature for rotates in _llama4_rotary(config))


def _llama4_layer(tensors: Tensors, cfg, i: int, moe: set[int]) -> Params:
    """Llama's norms and attention, q and k with their rotary pairs as posjax's (Llama 4's are
    interleaved); feed_forward's gate, up and down projections, or, on the layers in `moe`,
    its router, its experts' gate_up_proj [E, D, 2F] (the gate's columns, then the up
    projection's) and down_proj [E, F, D], and its shared expert."""
    hf, path = f"model.layers.{i}", ("backbone", "layers", i)
    ff, mlp = f"{hf}.feed_forward", (*path, "mlp")
    params = {**_pre_norms(tensors, hf, path),
              **_interleaved_qk(_llama_attention(tensors, cfg, i), cfg, path)}
    if i not in moe:
        return {**params, **_gated_mlp(tensors, ff, mlp)}
    gate_up = tensors[f"{ff}.experts.gate_up_proj"]
    width = gate_up.shape[-1] // 2
    return {**params, (*mlp, "router", "kernel"): tensors[f"{ff}.router.weight"].T,
            (*mlp, "gate"): gate_up[..., :width], (*mlp, "up"): gate_up[..., width:],
            (*mlp, "down"): tensors[f"{ff}.experts.down_proj"],
            **_gated_mlp(tensors, f"{ff}.shared_expert", (*mlp, "shared"))}


def _llama4_weights(tensors: Tensors, cfg, config: Mapping[str, Any]) -> Params:
    moe = _llama4_moe_layers(config)
    return _llama_weights(tensors, cfg, config,
                          lambda tensors, cfg, i: _llama4_layer(tensors, cfg, i, moe))


# --- deepseek_v3 -----------------------------------------------------------------------------


def _deepseek_v3_model(config: Mapping[str, Any]) -> dict[str, Any]:
    """Llama's fields with DeepSeek-V3's: multi-head latent attention (kv_lora_rank,
    q_lora_rank; heads qk_nope_head_dim + qk_rope_head_dim wide, values qk_nope_head_dim);
    dense layers intermediate_size wide; experts moe_intermediate_size wide under a sigmoid
    router choosing with e_score_correction_bias among its topk_group best of n_group
    groups, its top k renormalised (norm_topk_prob) times routed_scaling_factor, beside
    n_shared_experts shared ones (one MLP as wide as they are together)."""
    nope, rotated = need(config, "qk_nope_head_dim"), need(config, "qk_rope_head_dim")
    if need(config, "v_head_dim", nope) != nope:
        raise ConfigError(f"config.json has v_head_dim={config['v_head_dim']} and "
                          f"qk_nope_head_dim={nope}: posjax's latent attention reads values as "
                          "wide as the keys' latent part; it loads snapshots where they agree")
    if (config.get("quantization_config") or {}).get("quant_method") == "fp8":
        raise ConfigError("config.json's quantization_config stores the weights in FP8 with "
                          "block scales, which posjax does not dequantize: load a bfloat16 "
                          "copy of the snapshot")
    heads = need(config, "num_attention_heads")
    return dict(_llama_model(config, (False, False, False)), head_dim=nope + rotated,
                num_kv_heads=heads, kv_lora_rank=need(config, "kv_lora_rank"),
                q_lora_rank=config.get("q_lora_rank") or 0, **_deepseek_moe_fields(config))


def _deepseek_moe_fields(config: Mapping[str, Any]) -> dict[str, Any]:
    """DeepSeek-V3's experts (GLM-4.5's the same): n_routed_experts moe_intermediate_size
    wide under a sigmoid router choosing with e_score_correction_bias among its topk_group
    best of n_group groups, its top k renormalised (norm_topk_prob) times
    routed_scaling_factor, beside n_shared_experts shared ones (one MLP as wide as they are
    together)."""
    width = need(config, "moe_intermediate_size")
    return dict(moe_experts=need(config, "n_routed_experts"),
                moe_top_k=need(config, "num_experts_per_tok"), moe_mlp_dim=width,
                moe_norm_top_k=bool(config.get("norm_topk_prob")), moe_router="sigmoid",
                moe_shared_dim=width * (config.get("n_shared_experts") or 0),
                moe_choice_bias=True, moe_groups=config.get("n_group") or 1,
                moe_top_groups=config.get("topk_group") or 1,
                moe_route_scale=float(config.get("routed_scaling_factor", 1.0)))


def _deepseek_v3_rope(config: Mapping[str, Any]) -> dict[str, Any]:
    """RoPE over each head's qk_rope_head_dim dims (fraction of the head), YaRN's DeepSeek
    block whole on q and k, every dim: DeepSeek's attention scales the scores by
    mscale(s, mscale_all_dim)^2, its rotary module the rotated dims by the ratio of the two."""
    nope, rotated = need(config, "qk_nope_head_dim"), need(config, "qk_rope_head_dim")
    return dict(rope_block(config, "rope_theta", None, 10000.0, deepseek_yarn=True),
                fraction=rotated / (rotated + nope), attention_factor_dims="all")


# Glm4MoeConfig's defaults: GLM-4.5's first layer is dense, half of each head rotates.
GLM4_MOE_DENSE, GLM4_MOE_PARTIAL = 1, 0.5


def _first_dense(config: Mapping[str, Any]) -> int:
    """first_k_dense_replace: the layers that come first with a dense MLP (DeepSeek-V3,
    GLM-4.5; 0: none; the family's defaults fill an absent one)."""
    value = config.get("first_k_dense_replace", 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"config.json's first_k_dense_replace={value!r} is not a whole "
                          "number of layers: the snapshot's config.json is damaged")
    return value


def _first_dense_settings(config: Mapping[str, Any]) -> tuple[str, ...]:
    return _dense_settings(config, range(_first_dense(config)))


def _deepseek_v3_layer(tensors: Tensors, cfg, i: int, dense: int, interleaved: bool) -> Params:
    """Llama's norms; self_attn's latent projections as posjax's LatentAttention: the rows of
    kv_a_proj_with_mqa are the latent's, then the shared rotated key's; kv_b_proj's, per
    head, the key's latent part, then the value; q's (q_b_proj, else q_proj), per head, the
    latent part, then the rotated one, which posjax puts first (its pairs moved to posjax's
    where rope_interleave); mlp's as `_deepseek_mlp` reads it."""
    hf, path = f"model.layers.{i}", ("backbone", "layers", i)
    attn, heads = (*path, "attn"), cfg.num_heads
    rank, head_dim = cfg.kv_lora_rank, cfg.resolved_head_dim
    kv_a = tensors[f"{hf}.self_attn.kv_a_proj_with_mqa.weight"]
    rotated = kv_a.shape[0] - rank
    turn = _pairs_as_halves if interleaved else (lambda kernel: kernel)
    kv_b = tensors[f"{hf}.self_attn.kv_b_proj.weight"].T.reshape(rank, heads, -1)
    q_name = "q_b_proj" if cfg.q_lora_rank else "q_proj"
    q = tensors[f"{hf}.self_attn.{q_name}.weight"].T
    q = q.reshape(q.shape[0], heads, head_dim)
    params = {**_pre_norms(tensors, hf, path),
              (*attn, "kv_down", "kernel"): kv_a[:rank].T,
              (*attn, "kv_norm", "scale"): tensors[f"{hf}.self_attn.kv_a_layernorm.weight"],
              (*attn, "key_up", "kernel"): kv_b[..., :head_dim - rotated],
              (*attn, "value_up", "kernel"): kv_b[..., head_dim - rotated:],
              (*attn, "key_rope", "kernel"): turn(kv_a[rank:].T)[:, None],
              (*attn, "query", "kernel"): np.concatenate(
                  [turn(q[..., head_dim - rotated:]), q[..., :head_dim - rotated]], axis=-1),
              (*attn, "out", "kernel"): _out(tensors[f"{hf}.self_attn.o_proj.weight"], heads)}
    if cfg.q_lora_rank:
        params[(*attn, "q_down", "kernel")] = tensors[f"{hf}.self_attn.q_a_proj.weight"].T
        params[(*attn, "q_norm", "scale")] = tensors[f"{hf}.self_attn.q_a_layernorm.weight"]
    return {**params, **_deepseek_mlp(tensors, cfg, i, dense)}


def _deepseek_mlp(tensors: Tensors, cfg, i: int, dense: int) -> Params:
    """Layer i's dense MLP (below layer `dense`), else its router and choice bias (mlp.gate),
    experts and shared experts, as DeepSeek-V3 and GLM-4.5 store them."""
    hf, mlp = f"model.layers.{i}.mlp", ("backbone", "layers", i, "mlp")
    if i < dense:
        return _gated_mlp(tensors, hf, mlp)
    return {**_experts(tensors, cfg, i, hf, ("gate_proj", "up_proj", "down_proj")),
            (*mlp, "choice_bias"): tensors[f"{hf}.gate.e_score_correction_bias"],
            **(_gated_mlp(tensors, f"{hf}.shared_experts", (*mlp, "shared"))
               if cfg.moe_shared_dim else {})}


def _deepseek_v3_weights(tensors: Tensors, cfg, config: Mapping[str, Any]) -> Params:
    dense = _first_dense(config)
    interleaved = bool(config.get("rope_interleave", True))
    return _llama_weights(tensors, cfg, config, lambda tensors, cfg, i: _deepseek_v3_layer(
        tensors, cfg, i, dense, interleaved))


def _deepseek_v3_unread(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The multi-token-prediction layers past num_hidden_layers (num_nextn_predict_layers:
    DeepSeek-V3's one), which next-token logits never read."""
    layers = need(config, "num_hidden_layers")
    return tuple(f"model.layers.{layers + i}." for i in range(
        config.get("num_nextn_predict_layers") or 0))


# --- glm4_moe --------------------------------------------------------------------------------


def _glm4_moe_model(config: Mapping[str, Any]) -> dict[str, Any]:
    """Llama's fields with GLM-4.5's: biases on q, k and v (attention_bias), none on the
    output; q and k RMS-normalised per head before the rotation (use_qk_norm, as Qwen3's);
    first_k_dense_replace dense layers, then DeepSeek-V3's experts."""
    bias = bool(config.get("attention_bias"))
    norm = {"qk_norm": True} if config.get("use_qk_norm") else {}
    return dict(_llama_model(config, (bias, False, False)), **norm,
                **_deepseek_moe_fields(config))


def _glm4_moe_layer(tensors: Tensors, cfg, i: int, dense: int) -> Params:
    """Llama's norms and attention, Qwen3's q_norm and k_norm (use_qk_norm), DeepSeek-V3's
    MLP (`_deepseek_mlp`)."""
    hf, path = f"model.layers.{i}", ("backbone", "layers", i)
    return {**_pre_norms(tensors, hf, path), **_llama_attention(tensors, cfg, i),
            **(_qk_norms(tensors, i) if cfg.qk_norm else {}),
            **_deepseek_mlp(tensors, cfg, i, dense)}


def _glm4_moe_weights(tensors: Tensors, cfg, config: Mapping[str, Any]) -> Params:
    dense = _first_dense(config)
    return _llama_weights(tensors, cfg, config,
                          lambda tensors, cfg, i: _glm4_moe_layer(tensors, cfg, i, dense))


# --- ministral3 ------------------------------------------------------------------------------

_LLAMA4_BETA = "llama_4_scaling_beta"


def _ministral3_rope(config: Mapping[str, Any]) -> dict[str, Any]:
    """Llama's rope with the Mistral 3 models' query temperature: the rope block's
    llama_4_scaling_beta s scales q at position m by 1 + s log(1 + floor(m / F)), F the
    block's original_max_position_embeddings as Hugging Face fills it (transformers'
    get_llama_4_attn_scale); a block without one (no yarn) is refused."""
    key = "rope_parameters" if config.get("rope_parameters") else "rope_scaling"
    block = dict(config.get(key) or {})
    beta = block.pop(_LLAMA4_BETA, None)
    rope = rope_block({**config, key: block}, "rope_theta", None, 10000.0)
    if not beta:
        return rope
    floor = dict(rope["scaling"] or {}).get(_ORIGINAL)  # a yarn block's, as rope_block reads it
    if isinstance(floor, bool) or not isinstance(floor, int) or floor < 1:
        raise ConfigError(f"config.json's rope block has {_LLAMA4_BETA}={beta!r} and "
                          f"{_ORIGINAL}={floor!r}: transformers' ministral3 divides positions "
                          "by that length, a positive whole number; the config is damaged")
    return dict(rope, temperature_floor=floor, temperature_scale=float(beta),
                temperature_offset=0)


@dataclasses.dataclass(frozen=True)
class Family:
    """How one model_type becomes posjax's model.

    model: config.json -> ModelConfig fields; rope: config.json -> rope hyperparameters
    (theta, fraction, scaling); weights: (tensors by Hugging Face name, ModelConfig,
    config.json) -> {posjax parameter path: array}; checked: config keys whose every
    accepted value posjax implements (others are refused); windows: config.json -> each
    layer's sliding window (0: full attention; () for a family without); rotary: config.json
    -> whether each layer rotates (() where every layer does); ropes: config.json -> each
    layer's RoPE settings over the loaded encoding ("" for none; () where no layer has any);
    buffers: name suffixes of stored non-parameters to skip; about: what it builds, in a
    line (`posjax list pretrained`); defaults: the config keys' values where config.json
    names none (transformers' config class); wrappers: the model_types of multimodal
    snapshots whose text_config is this family's, each with its tensors' name prefix;
    settings: config.json -> each layer's other settings as its layer_pattern entry writes
    them ("attention_chunk=8192,moe_experts=0"; "" for none; () where no layer has any);
    unread: config.json -> name prefixes of stored tensors the model does not use.
    """

    model: Callable[[Mapping[str, Any]], dict[str, Any]]
    rope: Callable[[Mapping[str, Any]], dict[str, Any]]
    weights: Callable[[Tensors, Any], Params]
    checked: Mapping[str, tuple[Any, ...]]
    windows: Callable[[Mapping[str, Any]], tuple[int, ...]] = lambda config: ()
    rotary: Callable[[Mapping[str, Any]], tuple[bool, ...]] = lambda config: ()
    ropes: Callable[[Mapping[str, Any]], tuple[str, ...]] = lambda config: ()
    buffers: tuple[str, ...] = ("rotary_emb.inv_freq",)
    about: str = ""
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    wrappers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    settings: Callable[[Mapping[str, Any]], tuple[str, ...]] = lambda config: ()
    unread: Callable[[Mapping[str, Any]], tuple[str, ...]] = lambda config: ()


FAMILIES = Registry("pretrained family")


def register(model_type: str, family: Family) -> Family:
    """Make `family` the one that loads config.json's `model_type` (once)."""
    return FAMILIES.add(model_type, family)


SILU = {"hidden_act": ("silu",)}
register("llama", Family(
    _llama_model, _llama_rope, _llama_weights, SILU,
    about="Llama 2 and 3: RMSNorm, SwiGLU, grouped-query attention, untied or tied output, "
          "optional biases (attention_bias, mlp_bias); rope_scaling llama3 too"))
register("mistral", Family(
    lambda config: _llama_model(config, (False, False, False)), _llama_rope, _llama_weights,
    SILU, _every_layer_windows,
    about="llama's blocks with no biases and sliding_window on every layer (default 4096)"))
register("qwen2", Family(
    lambda config: _llama_model(config, (True, False, False)), _llama_rope, _llama_weights,
    SILU, _qwen2_windows,
    about="Qwen2, Qwen2.5: llama's blocks with biases on q, k and v (only); sliding windows "
          "by use_sliding_window, layer_types or max_window_layers"))
register("qwen3", Family(
    _qwen3_model, _llama_rope, functools.partial(_llama_weights, layer=_qwen3_layer), SILU,
    _qwen2_windows,
    about="llama's blocks (attention_bias on q, k, v and output) with q and k RMS-normalised "
          "per head before the rotation (model.qk_norm); head_dim default 128; qwen2's windows"))
register("smollm3", Family(
    _llama_model, _llama_rope, _llama_weights, SILU, _smollm3_windows, _smollm3_rotary,
    about="llama's blocks with NoPE layers (no_rope_layers, else every "
          "no_rope_layer_interval-th: SmolLM3's 3 RoPE layers per NoPE layer)"))
register("phi3", Family(
    lambda config: _llama_model(config, (False, False, False)), _phi3_rope,
    functools.partial(_llama_weights, layer=_phi3_layer), SILU,
    functools.partial(_every_layer_windows, absent=None),
    about="Phi-3, Phi-4-mini: llama's blocks, no biases, fused qkv and gate/up tensors, "
          "partial rotary (partial_rotary_factor), LongRoPE, sliding_window on every layer"))
register("gemma3_text", Family(
    _gemma3_model, GEMMA3_ROPES.rope, functools.partial(_gemma_weights, layer=_gemma3_layer),
    {"hidden_activation": ("gelu_pytorch_tanh",), "attn_logit_softcapping": (None,),
     "use_bidirectional_attention": (False, None)},
    functools.partial(_typed_windows, every=GEMMA3_PATTERN), ropes=GEMMA3_ROPES.ropes,
    defaults=GEMMA3_TEXT_DEFAULTS,
    wrappers={"gemma3": "language_model."},
    about="Gemma 3's text model (the 1B; of the 4B-27B, model_type gemma3, the text model): "
          "GeGLU, q and k normalised, a norm before and after each sublayer "
          "(model.post_norm), scaled tied embeddings, Gemma 2's output cap where config.json "
          "sets one; sliding layers (layer_types, else 5 per "
          "global one) rotate at their own base, unscaled, the global ones at rope_theta with "
          "the model's scaling"))
register("gemma2", Family(
    _gemma2_model, _llama_rope, functools.partial(_gemma_weights, layer=_gemma2_layer),
    {"hidden_activation": ("gelu_pytorch_tanh",), "use_bidirectional_attention": (False, None)},
    functools.partial(_typed_windows, every=GEMMA2_PATTERN), defaults=GEMMA2_DEFAULTS,
    about="Gemma 2: Gemma 3's blocks without q and k normalised, every layer at rope_theta; "
          "attention logits capped at attn_logit_softcapping (model.attn_softcap), the output's "
          "at final_logit_softcapping (model.final_softcap); sliding layers (layer_types, else "
          "every other one, the first) see sliding_window keys"))
register("cohere", Family(
    _cohere_model, _llama_rope, _cohere_weights, SILU,
    about="Command R, R+: llama's projections and SwiGLU fed in parallel by one LayerNorm "
          "without bias, rotary pairs interleaved (mapped to posjax's halves), logits times "
          "logit_scale, tied output; use_qk_norm (R+): q and k LayerNorm'd per head, each its "
          "own scale (model.qk_norm_axes per_head, qk_norm_type layernorm_no_bias)"))
register("cohere2", Family(
    _cohere2_model, _llama_rope, _cohere_weights, SILU,
    functools.partial(_typed_windows, every=COHERE2_PATTERN), _cohere2_rotary,
    defaults={"sliding_window": HF_SLIDING_WINDOW},
    about="Command R7B, Command A: cohere's blocks; sliding layers (layer_types, else 3 per "
          "full one) rotate, the full-attention layers are NoPE"))
register("exaone4", Family(
    _exaone4_model, _llama_rope, functools.partial(_llama_weights, layer=_output_norms_layer),
    SILU,
    _exaone4_windows, _exaone4_rotary, defaults={"sliding_window": HF_SLIDING_WINDOW},
    about="EXAONE 4.0: llama's blocks without biases, q and k RMS-normalised per head, norms "
          "on each sublayer's output only (model.pre_norm false, post_norm); with a "
          "sliding_window, sliding layers (layer_types, else 3 per full one) rotate and the "
          "full-attention layers are NoPE"))
register("olmo2", Family(
    _olmo2_model, _llama_rope, functools.partial(_llama_weights, layer=_output_norms_layer),
    SILU,
    about="OLMo 2: llama's blocks, q and k RMS-normalised over the whole projection "
          "(model.qk_norm_axes all), norms on each sublayer's output only (model.pre_norm "
          "false, post_norm)"))
register("olmo3", Family(
    _olmo2_model, OLMO3_ROPES.rope,
    functools.partial(_llama_weights, layer=_output_norms_layer), SILU,
    functools.partial(_typed_windows, every=OLMO3_PATTERN), ropes=OLMO3_ROPES.ropes,
    defaults={"sliding_window": HF_SLIDING_WINDOW},
    about="OLMo 3: olmo2's blocks; sliding layers (layer_types, else 3 per full one) rotate "
          "unscaled, the full-attention layers with the model's scaling"))
register("glm4", Family(
    _glm4_model, _glm4_rope, _glm4_weights, SILU,
    about="GLM-4 (0414): llama's blocks with biases on q, k and v, a norm before and after "
          "each sublayer (model.post_norm), a fused gate/up, the first half of each head "
          "rotating (partial_rotary_factor) in interleaved pairs, mapped to posjax's halves"))
register("ministral3", Family(
    lambda config: _llama_model(config, (False, False, False)), _ministral3_rope,
    _llama_weights, SILU, functools.partial(_every_layer_windows, absent=None),
    about="Ministral 3's text model (text-only snapshots): llama's blocks without biases; "
          "its rope block's llama_4_scaling_beta scales q by position (rope "
          "temperature_offset=0), YaRN as its block says"))
register("qwen3_moe", Family(
    _qwen3_moe_model, _llama_rope, _qwen3_moe_weights, SILU, _qwen3_moe_windows,
    settings=lambda config: _dense_settings(config, _qwen3_moe_dense(config)),
    about="Qwen3-MoE (30B-A3B, 235B-A22B): qwen3's attention with a mixture of experts "
          "(model.moe_experts: num_experts or num_local_experts, num_experts_per_tok, "
          "moe_intermediate_size, norm_topk_prob) on every decoder_sparse_step-th layer not in "
          "mlp_only_layers, the others dense; sliding_window where use_sliding_window"))
register("qwen2_moe", Family(
    _qwen2_moe_model, _llama_rope, _qwen2_moe_weights, SILU,
    # Qwen2MoeConfig's layer_types: the even layers below max_window_layers slide
    functools.partial(_qwen2_windows, sliding=lambda i, first: i % 2 == 0 and i < first),
    settings=lambda config: _dense_settings(config, _qwen3_moe_dense(config)),
    about="Qwen1.5-MoE, Qwen2-MoE: qwen2's attention with experts (model.moe_experts: "
          "num_experts, num_experts_per_tok, moe_intermediate_size, norm_topk_prob) beside a "
          "shared expert under a sigmoid gate of its own (model.moe_shared_dim, "
          "moe_shared_gate), on qwen3_moe's layers; sliding_window where use_sliding_window, "
          "on layer_types' sliding layers, else the even ones below max_window_layers"))
register("mixtral", Family(
    _mixtral_model, lambda config: rope_block(config, "rope_theta", None, MIXTRAL_THETA),
    functools.partial(_llama_weights, layer=_mixtral_layer), SILU,
    functools.partial(_every_layer_windows, absent=None),
    about="Mixtral: mistral's attention (sliding_window if set) with a mixture of experts on "
          "every layer (model.moe_experts: num_local_experts, num_experts_per_tok), its "
          "top k renormalised"))
register("gpt_oss", Family(
    _gpt_oss_model, lambda config: rope_block(config, "rope_theta", None, 150_000.0),
    functools.partial(_llama_weights, layer=_gpt_oss_layer),
    {**SILU, "swiglu_alpha": (1.702, None), "swiglu_limit": (7.0, None)},
    functools.partial(_typed_windows, every=GPT_OSS_PATTERN), defaults=GPT_OSS_DEFAULTS,
    about="GPT-OSS (its experts in bfloat16 or MXFP4): llama's attention with biases and a "
          "learned sink "
          "logit per head (model.sink_logit), sliding layers (layer_types, else every other "
          "one, the first) of sliding_window keys, YaRN; a mixture of experts on every layer "
          "(router and experts biased, GPT-OSS's clipped SwiGLU: model.mlp swiglu_clamped)"))
register("llama4_text", Family(
    _llama4_model, _llama_rope, _llama4_weights, SILU, rotary=_llama4_rotary, ropes=_llama4_ropes,
    defaults=LLAMA4_DEFAULTS, wrappers={"llama4": "language_model."}, settings=_llama4_settings,
    about="Llama 4's text model (text-only snapshots; of Scout and Maverick, model_type llama4, "
          "the text model): iRoPE, chunked RoPE layers (attention_chunk_size; interleaved "
          "pairs, mapped to posjax's halves) with q and k divided by their RMS (use_qk_norm), "
          "and full-attention NoPE layers (no_rope_layers, else every 4th) whose q grows with "
          "position (attn_temperature_tuning); experts (moe_layers, else every "
          "interleave_moe_layer_step-th layer) under a sigmoid router, each reading its "
          "weighted input, beside a shared expert"))
register("deepseek_v3", Family(
    _deepseek_v3_model, _deepseek_v3_rope, _deepseek_v3_weights,
    {**SILU, "attention_bias": (False, None), "rms_norm_eps": (1e-6,),
     "topk_method": ("noaux_tc", None), "scoring_func": ("sigmoid", None),
     "moe_layer_freq": (1, None)},
    settings=_first_dense_settings, unread=_deepseek_v3_unread,
    about="DeepSeek-V3, R1, Moonlight (bfloat16 snapshots): multi-head latent attention with "
          "decoupled RoPE (model.kv_lora_rank, q_lora_rank; rope_interleave's pairs mapped to "
          "posjax's halves), DeepSeek's YaRN; after first_k_dense_replace dense layers, "
          "experts under a sigmoid router choosing with a bias among its best groups "
          "(moe_choice_bias, moe_groups, moe_top_groups), times routed_scaling_factor, "
          "beside shared experts"))
register("glm4_moe", Family(
    _glm4_moe_model,
    lambda config: rope_block(config, "rope_theta", _PARTIAL, 10000.0, GLM4_MOE_PARTIAL),
    _glm4_moe_weights, SILU, settings=_first_dense_settings,
    defaults={"first_k_dense_replace": GLM4_MOE_DENSE},
    about="GLM-4.5, 4.6 (Air too): llama's attention with biases on q, k and v, q and k "
          "RMS-normalised per head where use_qk_norm, the first half of each head rotating "
          "(partial_rotary_factor, default 0.5); after first_k_dense_replace dense layers, "
          "deepseek_v3's experts"))
register("gpt_neox", Family(
    _neox_model, _neox_rope, _neox_weights, {"hidden_act": tuple(NEOX_MLPS)},
    buffers=("rotary_emb.inv_freq", "attention.bias", "attention.masked_bias"),
    about="GPT-NeoX, Pythia: LayerNorm, GELU MLP, biases everywhere, partial rotary "
          "(rotary_pct, 0.25 where absent), attention and MLP in parallel "
          "(use_parallel_residual)"))
