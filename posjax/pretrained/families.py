"""The Hugging Face model families posjax loads, by config.json's `model_type`.

Each family says how its config.json becomes posjax's ModelConfig and rope encoding, and how
its tensors become posjax's parameters (`Family`), and in a line what it builds (`about`:
`posjax list pretrained` prints them). The same blocks serve models trained from scratch
(configs/lm.py arch=llama | qwen2 | qwen3 | smollm3 | gemma3 | gpt_neox; phi3: arch=llama
with rope fraction=F).

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
from collections.abc import Callable, Mapping
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
               theta_default: float, fraction_default: float = 1.0) -> dict[str, Any]:
    """posjax rope hyperparameters (theta, fraction, scaling) from either config layout:
    transformers < 5 (`rope_theta` or GPT-NeoX's `rotary_emb_base`, `rotary_pct`, a
    `rope_scaling` block) or 5 (one `rope_parameters` block holding them all). The block's
    training length follows Hugging Face: llama3, yarn and longrope read
    original_max_position_embeddings (the config's own top-level value first, else the
    block's, else max_position_embeddings), yarn and longrope with no factor take it as
    max_position_embeddings over that; dynamic reads max_position_embeddings only; yarn's
    mscale pair is read as Hugging Face's rotary module reads it (`scaling.hugging_face_yarn`).
    A family without `fraction_key` rotates whole heads and refuses a partial rotary factor."""
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
    block = scaling.hugging_face_yarn(block)
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
    hf, path = f"model.layers.{i}", ("backbone", "layers", i)
    attn = (*path, "attn")
    params = _pre_norms(tensors, hf, path)
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
    for proj, name in (("gate_proj", "gate"), ("up_proj", "up"), ("down_proj", "down")):
        params.update(_linear(tensors, f"{hf}.mlp.{proj}", (*path, "mlp", name),
                              bool(cfg.mlp_bias)))
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


def _qwen3_layer(tensors: Tensors, cfg, i: int) -> Params:
    """Llama's layer and its q_norm and k_norm scales [head_dim]."""
    params = _llama_layer(tensors, cfg, i)
    for name in ("q_norm", "k_norm"):
        params.update(_norm(tensors, f"model.layers.{i}.self_attn.{name}",
                            ("backbone", "layers", i, "attn", name), False))
    return params


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


def _qwen2_windows(config: Mapping[str, Any]) -> tuple[int, ...]:
    """sliding_window where use_sliding_window is true, on the layers layer_types names
    sliding_attention (default: those from max_window_layers on), as transformers' Qwen2."""
    layers = need(config, "num_hidden_layers")
    window = (config.get("sliding_window", HF_SLIDING_WINDOW)
              if config.get("use_sliding_window") else None)
    if not window:
        return (0,) * layers
    first = config.get("max_window_layers", QWEN2_MAX_WINDOW_LAYERS)
    types = config.get("layer_types") or [
        "sliding_attention" if i >= first else "full_attention" for i in range(layers)]
    return tuple(window if kind == "sliding_attention" else 0 for kind in types)


def layer_fields(windows: tuple[int, ...], rotary: tuple[bool, ...] = (),
                 ropes: tuple[str, ...] = ()) -> dict[str, Any]:
    """ModelConfig fields of each layer's sliding window (0: full attention), whether it
    rotates (() : every layer does) and its RoPE's own settings ("" or () : the loaded
    encoding's): model.window where the layers agree, all rotate and none has settings,
    else a layer_pattern of RoPE entries (the loaded encoding under its own name) and NoPE
    ones, one per run of equal layers, e.g. rope*14+rope(window=4096)*14, rope*3+none or
    rope(theta=10000.0,scaling=None,window=512)*5+rope."""
    rotary = rotary or (True,) * len(windows)
    ropes = ropes or ("",) * len(windows)
    layers = tuple(zip(windows, rotary, ropes, strict=True))
    if len(set(layers)) <= 1 and all(rotary) and not any(ropes):
        return {"window": windows[0]} if windows else {}

    def entry(window: int, rotates: bool, settings: str) -> str:
        given = [settings] * bool(settings and rotates) + [f"window={window}"] * bool(window)
        return ("rope" if rotates else "none") + (f"({','.join(given)})" if given else "")

    runs = [(entry(*layer), len(list(run))) for layer, run in itertools.groupby(layers)]
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
    gate, up = np.split(tensors[f"{hf}.mlp.gate_up_proj.weight"], 2)
    params[(*path, "mlp", "gate", "kernel")] = gate.T
    params[(*path, "mlp", "up", "kernel")] = up.T
    params.update(_linear(tensors, f"{hf}.mlp.down_proj", (*path, "mlp", "down"), False))
    return params


def _phi3_rope(config: Mapping[str, Any]) -> dict[str, Any]:
    return rope_block(config, "rope_theta", _PARTIAL, 10000.0)


# --- gemma3_text -----------------------------------------------------------------------------

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
    """Llama's fields with Gemma 3's: GeGLU, q and k normalised per head, a norm after each
    sublayer too, embeddings times sqrt(hidden_size), tied output; attention_bias on q, k, v
    and the output (none on the MLP)."""
    bias = bool(config.get("attention_bias"))
    return dict(_llama_model(config, (bias, bias, False)), mlp="geglu", qk_norm=True,
                post_norm=True, embed_scale=True)


def _gemma3_rope_blocks(config: Mapping[str, Any]) -> tuple[dict, dict]:
    """(global, local) rope blocks: transformers 5's rope_parameters by layer type, else
    (transformers < 5) the top-level rope_theta and rope_scaling, and rope_local_base_freq."""
    nested = config.get("rope_parameters") or {}
    if set(nested) & set(_LAYER_TYPES):
        return dict(nested.get("full_attention") or {}), dict(nested.get("sliding_attention")
                                                              or {})
    local = config.get("rope_local_base_freq") or GEMMA3_LOCAL_THETA
    return dict(config.get("rope_scaling") or nested), {"rope_theta": local}


def _gemma3_rope(config: Mapping[str, Any]) -> dict[str, Any]:
    """The global layers' rope, the model's encoding (its scaling is Gemma 3's only one); the
    local layers' where no layer is global."""
    full, local = _gemma3_rope_blocks(config)
    if "full_attention" not in _gemma3_types(config):
        return dict(rope_block({"rope_parameters": local}, "rope_theta", None,
                               GEMMA3_LOCAL_THETA), scaling=None)
    view = {k: v for k, v in config.items() if k not in ("rope_scaling", "rope_parameters")}
    return rope_block(dict(view, rope_parameters=full), "rope_theta", None, GEMMA3_THETA)


def _gemma3_local_rope(config: Mapping[str, Any]) -> str:
    """The local layers' rope settings over the model's encoding: their own base, unscaled
    (Gemma 3 scales its global layers only); a local block of another type is refused."""
    _, local = _gemma3_rope_blocks(config)
    kind = local.get("rope_type", local.get("type", "default"))
    if kind != "default" or set(local) - {"rope_type", "type", "rope_theta"}:
        raise ConfigError(f"config.json's sliding_attention rope block {local!r}: posjax's "
                          "gemma3_text model rotates its local layers by a plain base only "
                          "(rope_type default), as Gemma 3's checkpoints do")
    theta = float(local.get("rope_theta") or GEMMA3_LOCAL_THETA)
    return f"theta={theta!r},scaling=None"


def _gemma3_types(config: Mapping[str, Any]) -> list[str]:
    """Each layer's type: layer_types, else a full_attention layer every
    sliding_window_pattern-th (default 6), as transformers' Gemma3TextConfig."""
    every, layers = (need(config, "sliding_window_pattern", GEMMA3_PATTERN),
                     need(config, "num_hidden_layers"))
    types = config.get("layer_types") or [
        "full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers or not set(types) <= set(_LAYER_TYPES):
        raise ConfigError(f"config.json's layer_types={types!r} is not one of "
                          f"{' or '.join(_LAYER_TYPES)} for each of its {layers} layers: the "
                          "snapshot's config.json is damaged")
    return types


def _gemma3_windows(config: Mapping[str, Any]) -> tuple[int, ...]:
    window = config.get("sliding_window") or 0
    return tuple(window if kind == "sliding_attention" else 0 for kind in _gemma3_types(config))


def _gemma3_ropes(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The local layers' settings beside global ones (none where every layer is local: the
    model's encoding is then theirs)."""
    local, types = _gemma3_local_rope(config), _gemma3_types(config)
    if "full_attention" not in types:
        return ()
    return tuple(local if kind == "sliding_attention" else "" for kind in types)


def _gemma_norm(tensors: Tensors, name: str, path: ParamPath, times: float = 1.0) -> Params:
    """A Gemma RMSNorm, whose weight w scales by 1 + w (Gemma3RMSNorm), as posjax's scale
    (times `times`)."""
    return {(*path, "scale"): (1.0 + tensors[f"{name}.weight"].astype(np.float32)) * times}


def _gemma3_layer(tensors: Tensors, cfg, i: int, query_scale: float = 1.0) -> Params:
    """Llama's projections and MLP, with Gemma's four norms and q_norm, k_norm; q_norm's scale
    carries `query_scale` (sqrt(head_dim / query_pre_attn_scalar): Gemma scales scores by
    query_pre_attn_scalar^-1/2, posjax by head_dim^-1/2)."""
    hf, path = f"model.layers.{i}", ("backbone", "layers", i)
    params = _llama_layer(tensors, cfg, i)
    for name, ours in (("input_layernorm", "attn_norm"),
                       ("post_attention_layernorm", "attn_post_norm"),
                       ("pre_feedforward_layernorm", "mlp_norm"),
                       ("post_feedforward_layernorm", "mlp_post_norm")):
        params.update(_gemma_norm(tensors, f"{hf}.{name}", (*path, ours)))
    params.update(_gemma_norm(tensors, f"{hf}.self_attn.q_norm", (*path, "attn", "q_norm"),
                              query_scale))
    params.update(_gemma_norm(tensors, f"{hf}.self_attn.k_norm", (*path, "attn", "k_norm")))
    return params


def _gemma3_weights(tensors: Tensors, cfg, config: Mapping[str, Any]) -> Params:
    scalar = config.get("query_pre_attn_scalar")
    if isinstance(scalar, bool) or not isinstance(scalar, int | float) or not scalar > 0:
        raise ConfigError(f"config.json's query_pre_attn_scalar={scalar!r} is not a positive "
                          "number: the snapshot's config.json is damaged")
    layer = functools.partial(_gemma3_layer,
                              query_scale=float(np.sqrt(cfg.resolved_head_dim / scalar)))
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
    snapshots whose text_config is this family's, each with its tensors' name prefix.
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
    _gemma3_model, _gemma3_rope, _gemma3_weights,
    {"hidden_activation": ("gelu_pytorch_tanh",), "final_logit_softcapping": (None,),
     "attn_logit_softcapping": (None,), "use_bidirectional_attention": (False, None)},
    _gemma3_windows, ropes=_gemma3_ropes, defaults=GEMMA3_TEXT_DEFAULTS,
    wrappers={"gemma3": "language_model."},
    about="Gemma 3's text model (the 1B; of the 4B-27B, model_type gemma3, the text model): "
          "GeGLU, q and k normalised, a norm before and after each sublayer "
          "(model.post_norm), scaled tied embeddings; sliding layers (layer_types, else 5 per "
          "global one) rotate at their own base, unscaled, the global ones at rope_theta with "
          "the model's scaling"))
register("gpt_neox", Family(
    _neox_model, _neox_rope, _neox_weights, {"hidden_act": tuple(NEOX_MLPS)},
    buffers=("rotary_emb.inv_freq", "attention.bias", "attention.masked_bias"),
    about="GPT-NeoX, Pythia: LayerNorm, GELU MLP, biases everywhere, partial rotary "
          "(rotary_pct, 0.25 where absent), attention and MLP in parallel "
          "(use_parallel_residual)"))
