"""`load(path)`: a Hugging Face snapshot as posjax's own causal LM with the `rope` encoding."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import tokenizers
from flax import nnx

from posjax import encoders
from posjax.encoders import Encoding
from posjax.encoders.rotary import RoPE
from posjax.errors import ConfigError
from posjax.models import ModelConfig, abstract_model, build_model
from posjax.models.transformer import layer_chunks, layer_configs, layer_encodings
from posjax.pretrained import files, mxfp4
from posjax.pretrained.families import FAMILIES, Family, layer_fields, need

# Matrix products at the precision of the weights: XLA's default lets a GPU multiply float32
# matrices in TF32 (a 10-bit mantissa), about 1e-3 off Hugging Face's float32 logits.
MATMUL_PRECISION = {"float32": "highest", "bfloat16": "default"}


class _Tensors(Mapping):
    """The checkpoint's tensors by name (a multimodal snapshot's text model's, read from
    under `prefix`: named without it), remembering which ones were read; a name stored as
    MXFP4 (NAME_blocks, NAME_scales) is read dequantized (posjax.pretrained.mxfp4); a missing
    name is a one-line ConfigError."""

    def __init__(self, tensors: dict[str, np.ndarray], model_type: str, prefix: str = ""):
        self.tensors = {name.removeprefix(prefix): value for name, value in tensors.items()}
        self.model_type, self.read = model_type, set()

    def __getitem__(self, name: str) -> np.ndarray:
        quantized = (f"{name}_blocks", f"{name}_scales")
        if name not in self.tensors and all(q in self.tensors for q in quantized):
            self.read.update(quantized)  # MXFP4 (GPT-OSS's experts), dequantized
            return mxfp4.dequantize(*(self.tensors[q] for q in quantized))
        if name not in self.tensors:
            raise ConfigError(
                f"the checkpoint has no tensor {name!r}, which a {self.model_type} model needs: "
                "is the snapshot complete and its config.json's model_type right?"
            )
        self.read.add(name)
        return self.tensors[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)


def family_of(config: Mapping[str, Any]) -> tuple[str, Family, dict[str, Any], str]:
    """(model_type, its Family, the config it reads, the name prefix of its tensors):
    config.json's own model, or the text model of a multimodal snapshot whose family reads it
    (`Family.wrappers`: Gemma 3 4B-27B, model_type gemma3, its text_config and tensors
    language_model.*); the family's defaults fill what that config leaves out. An
    unsupported or missing model_type is a ConfigError."""
    model_type = config.get("model_type")
    text = dict(config.get("text_config") or {})
    if model_type not in FAMILIES and text.get("model_type") in FAMILIES:
        family = FAMILIES[text["model_type"]]
        if model_type not in family.wrappers:
            wrapped = f" and the text model of {', '.join(family.wrappers)} ones" * bool(
                family.wrappers)
            raise ConfigError(
                f"config.json has model_type {model_type!r}, a multimodal model whose text model "
                f"is {text['model_type']!r}: posjax loads text-only {text['model_type']} "
                f"snapshots{wrapped}")
        return (text["model_type"], family, {**family.defaults, **text},
                family.wrappers[model_type])
    if model_type not in FAMILIES:
        raise ConfigError(
            f"config.json has model_type {model_type!r}, which posjax cannot load; supported: "
            f"{', '.join(sorted(FAMILIES))}"
        )
    return model_type, FAMILIES[model_type], {**FAMILIES[model_type].defaults, **config}, ""


def check_values(config: Mapping[str, Any], model_type: str, family: Family) -> None:
    """Refuse a config value that changes the computation in a way posjax does not build."""
    for key, accepted in family.checked.items():
        if key in config and config[key] not in accepted:
            raise ConfigError(
                f"config.json has {key}={config[key]!r}, which posjax's {model_type} model does "
                f"not compute; it implements {key} in {', '.join(map(repr, accepted))}"
            )


def rope_encoding(config: Mapping[str, Any], family: Family, head_dim: int) -> Encoding:
    """posjax's rope in Hugging Face's conventions: pairs (i, i + R/2), YaRN's attention factor
    on the rotated dims only; partial rotary must rotate int(head_dim * fraction) dims."""
    hparams = family.rope(config)
    encoding = encoders.get("rope", **{"layout": "half", "attention_factor_dims": "rotated",
                                       **hparams})
    if encoding.rot_dim(head_dim) != int(head_dim * hparams["fraction"]):
        raise ConfigError(
            f"config.json's rotary share {hparams['fraction']} rotates "
            f"{int(head_dim * hparams['fraction'])} of {head_dim} dims, an odd count posjax's "
            "rotary pairs cannot split"
        )
    return encoding


def _abstract_model(cfg: ModelConfig, encoding: Encoding, vocab_size: int, max_len: int):
    return abstract_model(lambda: build_model(cfg, encoding, kind="causal_lm", max_len=max_len,
                                              rngs=nnx.Rngs(0), vocab_size=vocab_size))


def fill(abstract: nnx.Module, params: dict[tuple, np.ndarray], dtype) -> nnx.Module:
    """The model `abstract` (from nnx.eval_shape) with every parameter taken from `params`
    (path -> array); a missing, extra or misshapen one is a ConfigError."""
    graphdef, state = nnx.split(abstract)
    flat = nnx.to_flat_state(state)
    expected = {path for path, _ in flat}
    if set(params) != expected:
        odd = sorted(map(str, set(params) ^ expected))
        raise ConfigError(f"posjax's model and the checkpoint disagree on parameter {odd[0]}")
    for path, variable in flat:
        value = params[path]
        if value.shape != variable.shape:
            raise ConfigError(
                f"checkpoint parameter for {'/'.join(map(str, path))} has shape {value.shape}, "
                f"config.json implies {variable.shape}: the config and weights disagree"
            )
        variable.set_value(jnp.asarray(value.astype(np.float32), dtype))
    return nnx.merge(graphdef, nnx.from_flat_state(flat))


@dataclasses.dataclass
class Pretrained:
    """A loaded checkpoint: posjax's model with its encoding, and the model's tokenizer.

    config: config.json as read (a multimodal snapshot's text_config), with the family's
    defaults for the keys it leaves out; model_config: the posjax ModelConfig built from it;
    encoding: the rope encoding (Hugging Face's conventions, its rope_scaling block);
    model: posjax's CausalLM; train_len: the length the model was trained at (its
    max_position_embeddings, or the original length its rope_scaling block names);
    windows: each layer's sliding window from config.json (0: full attention; () for a
    family without), and whether each layer rotates (() where every layer does: a family
    without NoPE layers), which model_config carries (`layer_fields`).
    """

    config: dict[str, Any]
    model_config: ModelConfig
    encoding: Encoding
    model: nnx.Module
    tokenizer: tokenizers.Tokenizer
    train_len: int
    windows: tuple[int, ...]
    rotary: tuple[bool, ...] = ()

    def __repr__(self) -> str:
        """A summary to read, not the 17k characters of every layer and the vocabulary:
        family, sizes, MLP or experts, trained length, windows, chunks and NoPE layers,
        rotary base and scaling, tokenizer size."""
        cfg, encoding = self.model_config, self.encoding
        heads = (f"{cfg.num_heads} heads" if cfg.num_kv_heads in (None, cfg.num_heads)
                 else f"{cfg.num_heads} query / {cfg.num_kv_heads} key-value heads")
        params = sum(x.size for x in jax.tree.leaves(nnx.state(self.model, nnx.Param)))
        rotary = f"rope theta={encoding.theta:.0f}" + _other_bases(cfg, encoding) + (
            f", rotating {encoding.fraction:g} of each head" if encoding.fraction < 1 else "")
        block = dict(encoding.scaling or ())
        # Hugging Face's rope_scaling block, its type first
        scaling = json.dumps({"rope_type": block.pop("rope_type", None), **block}) \
            if block else "none"
        window = (_reach_said("sliding window", self.windows)
                  + _reach_said("chunks of", layer_chunks(cfg)) + _nope_said(self.rotary))
        tokens = self.tokenizer.get_vocab_size(with_added_tokens=True)
        return (f"Pretrained({self.config.get('model_type')}: {params:,} parameters "
                f"({cfg.param_dtype}), {cfg.num_layers} layers, d_model {cfg.d_model}, "
                f"{heads} of {cfg.resolved_head_dim}, {_mlp_said(cfg)}; trained at "
                f"{self.train_len} tokens{window}; {rotary}, rope_scaling {scaling}; "
                f"tokenizer of {tokens} tokens, vocab_size {self.config['vocab_size']})")

    def logits(self, token_ids) -> np.ndarray:
        """token_ids int32[B, L] -> float32[B, L, vocab] (positions 0..L-1, no padding); a
        float32 model multiplies in full float32 on every platform (MATMUL_PRECISION)."""
        tokens = np.asarray(token_ids)
        if tokens.ndim != 2 or not np.issubdtype(tokens.dtype, np.integer):
            raise ConfigError(f"logits takes integer token ids [batch, length], got "
                              f"{tokens.dtype}{list(tokens.shape)}")
        vocab = self.config["vocab_size"]
        if tokens.size and not 0 <= tokens.min() <= tokens.max() < vocab:
            raise ConfigError(f"token ids must lie in [0, {vocab}) (config.json's vocab_size), "
                              f"got {tokens.min()}..{tokens.max()}")
        graphdef, state = nnx.split(self.model)
        with jax.default_matmul_precision(MATMUL_PRECISION[self.model_config.param_dtype]):
            return np.asarray(_forward(graphdef, state, jnp.asarray(tokens, jnp.int32)))


@functools.partial(jax.jit, static_argnums=0)
def _forward(graphdef, state, tokens: jax.Array) -> jax.Array:
    """The causal LM's float32 logits [B, L, V] of tokens int32[B, L]."""
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
    return nnx.merge(graphdef, state)(tokens, positions, jnp.ones_like(tokens))


def _reach_said(what: str, sizes: tuple[int, ...]) -> str:
    """", WHAT S" for each layer's size (0: none; ", WHAT S1/S2" where they differ, "... on K
    of N layers" where the others have none), or "": the layers' sliding windows ("sliding
    window") or attention chunks ("chunks of", Llama 4's)."""
    given = [size for size in sizes if size]
    if not given:
        return ""
    listed = "/".join(map(str, dict.fromkeys(given)))
    return f", {what} {listed}" + (
        f" on {len(given)} of {len(sizes)} layers" if len(given) < len(sizes) else "")


def _mlp_said(cfg: ModelConfig) -> str:
    """"swiglu MLP F", or the experts: "swiglu experts, top k of E, F wide" (", a shared one
    F wide"; ", on K of N layers, the others MLP F" where some layers are dense)."""
    dense = f"{cfg.mlp} MLP {cfg.mlp_dim}"
    routed = sum(bool(layer.moe_experts) for layer in layer_configs(cfg))
    if not routed:
        return dense
    shared = f", a shared one {cfg.moe_shared_dim} wide" if cfg.moe_shared_dim else ""
    some = (f", on {routed} of {cfg.num_layers} layers, the others {dense}"
            if routed < cfg.num_layers else "")
    return (f"{cfg.mlp} experts, top {cfg.moe_top_k} of {cfg.moe_experts}, "
            f"{cfg.moe_mlp_dim or cfg.mlp_dim} wide{shared}{some}")


def _other_bases(cfg: ModelConfig, encoding: Encoding) -> str:
    """" (10000 on K of N layers)" where layers rotate at another base (Gemma 3's local ones),
    or ""."""
    others = [e.theta for e in layer_encodings(cfg, encoding)
              if isinstance(e, RoPE) and e.theta != encoding.theta]
    bases = "/".join(f"{theta:.0f}" for theta in dict.fromkeys(others))
    return f" ({bases} on {len(others)} of {cfg.num_layers} layers)" if others else ""


def _nope_said(rotary: tuple[bool, ...]) -> str:
    """", NoPE on K of N layers" where some layers do not rotate, or ""."""
    nope = rotary.count(False)
    return f", NoPE on {nope} of {len(rotary)} layers" if nope else ""


def _train_len(config: Mapping[str, Any], encoding: Encoding) -> int:
    scaling = dict(encoding.scaling or ())
    return int(scaling.get("original_max_position_embeddings")
               or need(config, "max_position_embeddings"))


def load(path: str | Path, *, dtype: str = "float32") -> Pretrained:
    """The Hugging Face snapshot at `path` (config.json, *.safetensors, tokenizer.json) as
    posjax's model; dtype: "float32" or "bfloat16" for weights and activations (softmax,
    angles and logits stay float32). Problems are one-line ConfigErrors naming them."""
    directory = files.snapshot(path)
    model_type, family, config, prefix = family_of(files.read_config(directory))
    check_values(config, model_type, family)
    windows, rotary = family.windows(config), family.rotary(config)
    cfg = ModelConfig(**family.model(config), **layer_fields(
        windows, rotary, family.ropes(config), family.settings(config)), dtype=dtype,
        param_dtype=dtype)
    encoding = rope_encoding(config, family, cfg.resolved_head_dim)
    tensors = _Tensors(files.read_weights(directory, prefix), model_type, prefix)
    params = family.weights(tensors, cfg, config)
    unread = sorted(name for name in tensors.tensors if name not in tensors.read
                    and not name.endswith(family.buffers)
                    and not name.startswith(family.unread(config)))
    if unread:
        why = ("config.json's tie_word_embeddings=true makes the embedding the output layer: "
               "set it false if this tensor is the output layer of its own"
               if unread[0] == "lm_head.weight" and config.get("tie_word_embeddings")
               else "a config key it depends on is missing from config.json")
        raise ConfigError(f"the checkpoint's tensor {unread[0]!r} is not read by posjax's "
                          f"{model_type} model: {why}")
    vocab = need(config, "vocab_size")
    max_len = need(config, "max_position_embeddings")
    model = fill(_abstract_model(cfg, encoding, vocab, max_len), params, cfg.weight_dtype)
    return Pretrained(config, cfg, encoding, model, files.read_tokenizer(directory),
                      _train_len(config, encoding), windows, rotary)
