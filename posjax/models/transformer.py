"""The models: causal LM (and its mixed text + image variant), RoFormer-style MLM encoder,
and a patch model for 2-D inputs.

All share one `Backbone` (input position site -> dropout -> pre-norm blocks -> final
norm) and differ only in how inputs become vectors and in the head:

    CausalLM     tokens -> E[tokens] -> Backbone(causal) -> logits = h W_out   (or h E^T if tied)
    MixedLM      CausalLM whose positions may have A components, int32[B, L, A] (M-RoPE's t, h, w)
    MLMEncoder   tokens -> E[tokens] -> Backbone -> logits = Norm(gelu(h W + b)) E^T + c
                 (BERT's MLM head, output projection tied to the input embedding; RoFormer
                 keeps BERT's model and changes only the position encoding)
    Classifier   MLMEncoder's body -> pooled ([CLS] or mean) -> logits [B, C] (fine-tuning)
    PatchModel   patches -> patches W_p -> Backbone -> per-patch or pooled classification

Positions are always inputs (data, never an implicit arange), int32[B, L] or one row for
every example, int32[1, L] (`multi_head_attention`'s one_row); segment ids too, int32[B, L],
or None for rows that are each one whole document (`whole_rows`).
The encoding object comes from `posjax.encoders.get`; its parameters live in the model as
nnx.Param: one model-level copy for the input (embed) site, one copy per layer for the
attention sites, each from `encoding.init` with its own key from the 'params' stream.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import nnx

from posjax import encoders
from posjax.attention import capped, check_compatible
from posjax.encoders import Dims, Encoding
from posjax.encoders.base import ATTENTION_SITES, check_site_shapes, grid_position_form
from posjax.errors import ConfigError, unknown
from posjax.models import initialisers, pattern
from posjax.models.latent import LatentAttention
from posjax.models.layers import (
    Attention,
    Block,
    ModelConfig,
    TableEmbed,
    dense,
    make_dropout,
    make_norm,
    param_tree,
    values,
)
from posjax.models.moe import MoEMLP
from posjax.models.pattern import LayerSpec
from posjax.models.recurrent import RECURRENT_LAYERS
from posjax.registry import Registry

# Model kinds by the name users pass as `model.kind`. `@register(name)` makes a class one;
# it declares, as class attributes: `input_key` (the batch field holding its input), `causal`
# (causal attention, next-token targets), `masked_lm` (the data pipeline masks its inputs,
# BERT style) and `sizes` (the keyword arguments its constructor reads from the data's
# BatchSpec: vocab_size, num_classes, patch_dim). Its constructor is
# `cls(cfg, encoding, *, max_len, rngs, **sizes)` and its call
# `model(inputs, positions, segment_ids, *, deterministic, rngs=None) -> logits`.
KINDS = Registry("model.kind", attribute="kind")
register = KINDS.register
model_kind = KINDS.lookup


@functools.partial(jax.jit, static_argnums=0)
def _embed_site(encoding: Encoding, params: Any, x: jax.Array, positions: jax.Array):
    """encoding.embed(params, x, positions); x: [B, L, D], positions: int32[B, L] or [B, L, A].

    Jitted so that an eagerly run model (tests, notebooks) compiles a site with loops
    (FLOATER's ODE scan) once per shape instead of re-tracing it on every call; inside the
    trainer's jit this is inlined. Encodings are frozen, hashable dataclasses: static.
    """
    return encoding.embed(params, x, positions)


class InputSite(nnx.Module):
    """The encoding's input (embed) site with the model-level copy of its parameters.

    x: [B, L, D], positions: int32[B, L] or [B, L, A] -> [B, L, D].
    When the data has more position axes than the encoding reads (A = 2 patch coordinates
    for a 1-D encoding such as learned or sinusoidal) the site is applied axially: D is split
    into A equal parts and part a is encoded with coordinate a using its own parameter copy,
        x[..., a*D/A:(a+1)*D/A] <- embed(params_a, x[..., a*D/A:(a+1)*D/A], positions[..., a]),
    i.e. a row table and a column table of width D/A each, concatenated (ViT's "2-D
    embedding", Dosovitskiy et al. 2021, App. D.4; MAE's 2-D sin-cos). Splitting, rather than
    summing two full-width embeddings, keeps (r, c) and (c, r) apart for parameter-free
    encodings too.
    """

    def __init__(self, encoding: Encoding, dims: Dims, *, axes: int, rngs: nnx.Rngs):
        """axes: 1 to hand the positions to the site as they are, A > 1 for the axial split."""
        if dims.d_model % axes:
            raise ConfigError(
                f"model.d_model={dims.d_model} must be divisible by {axes} to encode {axes} "
                f"position axes with the 1-D encoding {encoding.name!r} (one part per axis)"
            )
        part = dataclasses.replace(dims, d_model=dims.d_model // axes)
        self.encoding = encoding
        self.axes = axes
        drawn = [encoding.init(rngs.params(), part) for _ in range(axes)]
        check_site_shapes(encoding, drawn[0], part, sites=("embed",))
        self.params = nnx.data([param_tree(p) for p in drawn])

    def __call__(self, x: jax.Array, positions: jax.Array) -> jax.Array:
        if self.axes == 1:
            return _embed_site(self.encoding, values(self.params[0]), x, positions)
        parts = jnp.split(x, self.axes, axis=-1)
        return jnp.concatenate(
            [
                _embed_site(self.encoding, values(p), part, positions[..., a])
                for a, (p, part) in enumerate(zip(self.params, parts, strict=True))
            ],
            axis=-1,
        )


# The keys a layer_pattern entry of each name may set (posjax.models.pattern): an encoding's
# hyperparameters plus these ModelConfig fields of its layer, each with the value that
# types it: the layer's sliding window, attention chunk and q/k norm (its attention's) and
# its experts (0: one MLP); a recurrent layer takes none.
WINDOW_KEY = "window"
CHUNK_KEY = "attention_chunk"
ATTENTION_KEYS = {WINDOW_KEY: 0, CHUNK_KEY: 0, "qk_norm": False}
LAYER_KEYS = (*ATTENTION_KEYS, "moe_experts")


def _pattern_keys() -> dict[str, dict[str, object]]:
    keys: dict[str, dict[str, object]] = {name: {} for name in RECURRENT_LAYERS}
    for name in encoders.names():
        keys[name] = {**encoders.hparams(name), **ATTENTION_KEYS, "moe_experts": 0}
    return keys


def layer_specs(cfg: ModelConfig) -> tuple[LayerSpec, ...]:
    """cfg.layer_pattern's entries (posjax.models.pattern: NAME, NAME(KEY=VALUE,...), *N),
    each an encoding or a RECURRENT_LAYERS token with its settings, before cycling; a
    mistake is a one-line ConfigError naming the entry (and the valid names or keys)."""
    return pattern.parse(cfg.layer_pattern, _pattern_keys())


def _pattern(cfg: ModelConfig) -> tuple[str, ...]:
    """cfg.layer_pattern's names, one per entry after repetition."""
    return tuple(spec.name for spec in layer_specs(cfg))


def _cycled(cfg: ModelConfig, per_entry: tuple) -> tuple:
    """`per_entry` (an item per pattern entry after repetition) cycled over the layers; a
    pattern longer than the model would leave its last entries to no layer
    (rope+rope+rope+none on 2 layers is plain RoPE): refused, naming them in short form."""
    if len(per_entry) > cfg.num_layers:
        unused = pattern.written(layer_specs(cfg)[cfg.num_layers:])
        raise ConfigError(
            f"model.layer_pattern={cfg.layer_pattern!r} names {len(per_entry)} layers but "
            f"model.num_layers={cfg.num_layers}, so {unused} would reach no layer: set "
            f"--config.model.num_layers={len(per_entry)} (or a multiple), or shorten the "
            f"pattern to {cfg.num_layers} name(s)")
    return tuple(per_entry[i % len(per_entry)] for i in range(cfg.num_layers))


def layer_recurrent(cfg: ModelConfig) -> tuple[type[nnx.Module] | None, ...]:
    """Each layer's recurrent layer class (RECURRENT_LAYERS, named in cfg.layer_pattern), or
    None for an attention layer."""
    if not cfg.layer_pattern:
        return (None,) * cfg.num_layers
    return _cycled(cfg, tuple(RECURRENT_LAYERS.get(name) for name in _pattern(cfg)))


def _layer_setting(cfg: ModelConfig, key: str) -> tuple[int, ...]:
    """Each layer's `key` (one of LAYER_KEYS, 0 = none): its layer_pattern entry's, else
    model.<key>; for a recurrent layer, which has no attention, 0 for an attention key."""
    if not cfg.layer_pattern:
        return (getattr(cfg, key),) * cfg.num_layers
    specs = layer_specs(cfg)
    for spec in specs:
        if spec.get(key, 0) < 0:
            raise ConfigError(f"model.layer_pattern entry {spec.text!r}: {key} must be >= 0 "
                              "(0 = none)")
    return _cycled(cfg, tuple(0 if spec.name in RECURRENT_LAYERS and key in ATTENTION_KEYS
                              else spec.get(key, getattr(cfg, key)) for spec in specs))


def layer_configs(cfg: ModelConfig) -> tuple[ModelConfig, ...]:
    """Each layer's ModelConfig: `cfg` with its LAYER_KEYS as the layer's (`_layer_setting`;
    a layer without q/k norm keeps no qk_norm_axes or qk_norm_type, which would describe
    it); a value that layer cannot take is a one-line ConfigError."""
    layers = []
    for layer in zip(*(_layer_setting(cfg, key) for key in LAYER_KEYS), strict=True):
        own = dict(zip(LAYER_KEYS, layer, strict=True))
        if not own["qk_norm"]:
            own.update(qk_norm_axes="head", qk_norm_type="rmsnorm")
        layers.append(dataclasses.replace(cfg, **own))
    return tuple(layers)


def layer_windows(cfg: ModelConfig) -> tuple[int, ...]:
    """Each layer's sliding window (0 = full attention): its layer_pattern entry's `window=`,
    else model.window; 0 for a recurrent layer."""
    return _layer_setting(cfg, WINDOW_KEY)


def layer_chunks(cfg: ModelConfig) -> tuple[int, ...]:
    """Each layer's attention chunk (0 = none): its layer_pattern entry's
    `attention_chunk=`, else model.attention_chunk; 0 for a recurrent layer."""
    return _layer_setting(cfg, CHUNK_KEY)


def _entry_encoding(spec: LayerSpec, encoding: Encoding) -> Encoding:
    """The encoding of an attention entry: the configured one under its own name (its
    hyperparameters, with the entry's settings replacing theirs), else the named encoding
    with its defaults and the entry's settings."""
    hparams = spec.without(*LAYER_KEYS)
    if spec.name != encoding.name:
        return encoders.get(spec.name, **hparams)
    return dataclasses.replace(encoding, **hparams) if hparams else encoding


def layer_encodings(cfg: ModelConfig, encoding: Encoding) -> tuple[Encoding | None, ...]:
    """Each layer's encoding: `encoding` everywhere, or cfg.layer_pattern's entries cycled
    over the layers, where the configured encoding's own name keeps its hyperparameters and
    any other name is that encoding with its defaults, either with the entry's settings
    (`rope(theta=1e6)`) over them; None for a recurrent layer ("gdn"), which takes no
    encoding. A name whose encoding sits at the input (learned, sinusoidal, ...) is a
    ConfigError: the input is the model's, not a layer's. So is a pattern that leaves the
    configured encoding, or a hyperparameter it was given, to no layer at all.
    cfg.window_encoding, where set, takes `encoding`'s place in the layers with a sliding
    window."""
    def base(window: int) -> Encoding:
        return cfg.window_encoding if window and cfg.window_encoding is not None else encoding

    if not cfg.layer_pattern:
        return tuple(base(window) for window in layer_windows(cfg))
    pattern, specs = [], layer_specs(cfg)
    for spec in specs:
        own = base(spec.get(WINDOW_KEY, cfg.window))
        chosen = None if spec.name in RECURRENT_LAYERS else _entry_encoding(spec, own)
        if chosen is not None and chosen.embed is not None and chosen is not own:
            raise ConfigError(
                f"model.layer_pattern={cfg.layer_pattern!r}: {spec.text!r} encodes at the "
                "input, which belongs to the model, not to a layer; give it as the encoding "
                "instead"
            )
        pattern.append(chosen)
    _check_configured_encoding_used(cfg, encoding, specs)
    return _cycled(cfg, tuple(pattern))


def _check_configured_encoding_used(cfg: ModelConfig, encoding: Encoding,
                                    specs: tuple[LayerSpec, ...]) -> None:
    """A one-line ConfigError where the configured encoding's attention sites reach no layer
    of the pattern (`encoding=alibi` beside `rope+none` trained RoPE and NoPE under ALiBi's
    name), or where a hyperparameter it was given differs from its default and every entry
    of its name sets its own (`arch=gemma4,theta=500`: every rope entry sets theta).
    An encoding of no site at all (NoPE) names the attention layers that take no position:
    `arch=gemma3,encoding=none` trained RoPE alone under NoPE's name."""
    nope = not encoding.sites() and any(s.name not in RECURRENT_LAYERS for s in specs)
    if not nope and not any(s in encoding.sites() for s in ATTENTION_SITES):
        return
    own = [spec for spec in specs if spec.name == encoding.name]
    if not own:
        names = list(dict.fromkeys(s.name for s in specs))
        recurrent = "+".join(n for n in names if n in RECURRENT_LAYERS)
        note = (f" ({recurrent} layers take no position encoding: their recurrence orders "
                "the tokens)" if recurrent else "")
        others = "/".join(n for n in names if n not in RECURRENT_LAYERS) or "none"
        raise ConfigError(
            f"encoding {encoding.name!r} reaches no layer of model.layer_pattern="
            f"{cfg.layer_pattern!r}, whose entries name {', '.join(names)}{note}: name "
            f"{encoding.name!r} in the pattern for its attention layers, or set "
            f"encoding={others}")
    for key, default in encoders.hparams(encoding.name).items():
        value = getattr(encoding, key)
        if value != default and all(key in dict(spec.settings) for spec in own):
            raise ConfigError(
                f"encoding {encoding.name!r} {key}={value!r} reaches no layer: every "
                f"{encoding.name} entry of model.layer_pattern={cfg.layer_pattern!r} sets its "
                f"own {key}; drop {key}=, or write it into the pattern's entries")


def _blocks(cfg: ModelConfig, encodings: tuple[Encoding | None, ...], dims: Dims, *,
            causal: bool, rngs: nnx.Rngs) -> nnx.List:
    """One Block per layer with its encoding (`layer_encodings`) and its own copy of that
    encoding's attention-site parameters (drawn right before the block's own), or with the
    one copy its encoding shares across layers (`share_position_params`); a recurrent
    layer's block (`layer_recurrent`) has no encoding and no such parameters. Each block
    reads its own settings (`layer_configs`: its sliding window, chunk, q/k norm and
    experts)."""

    checked: set[Encoding] = set()

    def layer_params(encoding: Encoding | None):
        per_layer = encoding is not None and any(s in encoding.sites() for s in ATTENTION_SITES)
        if not per_layer:
            return {}
        params = encoding.init(rngs.params(), dims)
        if encoding not in checked:  # a site of the wrong shape: one line, here
            check_site_shapes(encoding, params, dims)
            checked.add(encoding)
        return param_tree(params)

    # One set of nnx.Param objects referenced by every layer is one set of parameters.
    shared = ({e: layer_params(e) for e in dict.fromkeys(encodings)}
              if cfg.share_position_params else {})
    return nnx.List([
        Block(own, e, shared[e] if e in shared else layer_params(e), causal=causal, rngs=rngs,
              recurrent=r, position_reach=dims.max_len,
              attention=LatentAttention if cfg.kv_lora_rank else Attention,
              mlp=MoEMLP if own.moe_experts else None)
        for e, r, own in zip(encodings, layer_recurrent(cfg), layer_configs(cfg), strict=True)
    ])


class Backbone(nnx.Module):
    """Input site -> dropout -> blocks -> final norm; x: [B, L, D] -> [B, L, D].

    DeBERTa's enhanced mask decoder (He et al. 2021): with `model.absolute_last_layers`
    = k > 0, a learned absolute table P [max_len, D] is added once to
    the hidden states entering the last k layers, h <- h + P[pos] (DeBERTa's I = H + P fed to
    its last layers), so absolute position reaches only the top of the network. Like every
    learned table here, a position >= max_len reads NaN (jnp.take's fill mode).
    """

    def __init__(
        self,
        cfg: ModelConfig,
        encoding: Encoding,
        *,
        causal: bool,
        max_len: int,
        input_axes: int | None,
        rngs: nnx.Rngs,
    ):
        """input_axes: None when the model's positions are int32[B, L], A for [B, L, A]."""
        encodings = layer_encodings(cfg, encoding)
        for each in dict.fromkeys(e for e in (encoding, *encodings) if e is not None):
            check_compatible(each, cfg.attention, causal, sink=cfg.sink_logit,
                             softcap=cfg.attn_softcap)
            if each.position_axes is not None and each.position_axes != input_axes:
                have = "int32[B, L]" if input_axes is None else f"int32[B, L, {input_axes}]"
                raise ConfigError(
                    f"encoding {each.name!r} with ndim={each.position_axes} reads positions "
                    f"int32[B, L, {each.position_axes}] but this model has {have}: use "
                    "kind='patch2d' with ndim=2, or a 1-D encoding"
                )
        for each, window in dict.fromkeys(zip(encodings, layer_windows(cfg), strict=True)):
            if each is not None and window:  # linear and bidirectional refuse a window
                check_compatible(each, cfg.attention, causal, sink=cfg.sink_logit,
                                 window=window, softcap=cfg.attn_softcap)
        enc_axes = encoding.position_axes
        dims = cfg.dims(max_len)
        sites = encoding.sites()
        # A 1-D encoding on A-D positions is applied axially, one coordinate per part of D.
        axial = input_axes if enc_axes is None and input_axes is not None else 1
        self.input_site = (
            InputSite(encoding, dims, axes=axial, rngs=rngs) if "embed" in sites else None
        )
        self.layers = _blocks(cfg, encodings, dims, causal=causal, rngs=rngs)
        k = cfg.absolute_last_layers
        self.absolute_from = cfg.num_layers - k
        self.absolute = (
            TableEmbed(
                max_len,
                cfg.d_model,
                dtype=cfg.compute_dtype,
                param_dtype=cfg.weight_dtype,
                embedding_init=initialisers.convention(cfg.init).embedding,
                rngs=rngs,
            )
            if k
            else None
        )
        self.dropout = make_dropout(cfg, rngs)
        self.final_norm = make_norm(cfg.d_model, cfg, rngs)

    def __call__(
        self,
        x: jax.Array,
        input_positions: jax.Array,
        positions: jax.Array,
        segment_ids: jax.Array,
        *,
        deterministic: bool,
        rngs: nnx.Rngs | None,
    ) -> jax.Array:
        """x: [B, L, D]; input_positions: int32[B, L] or [B, L, A] for the input site;
        positions: int32[B, L] (or [B, L, A] for an A-D encoding, or [1, L] for every row:
        module docstring) for the attention sites and the absolute table; segment_ids:
        int32[B, L], 0 = padding, or None for whole rows."""
        if self.input_site is not None:
            # The contract does not fix the site's output dtype; keep the compute dtype.
            x = self.input_site(x, input_positions).astype(x.dtype)
        x = self.dropout(x, deterministic=deterministic, rngs=rngs)
        for i, layer in enumerate(self.layers):
            if self.absolute is not None and i == self.absolute_from:
                x = x + self.absolute(positions)
            x = layer(x, positions, segment_ids, deterministic=deterministic, rngs=rngs)
        return self.final_norm(x)


def _token_embedding(cfg: ModelConfig, vocab_size: int, rngs: nnx.Rngs) -> TableEmbed:
    return TableEmbed(
        vocab_size,
        cfg.d_model,
        dtype=cfg.compute_dtype,
        param_dtype=cfg.weight_dtype,
        embedding_init=initialisers.convention(cfg.init).embedding,
        rngs=rngs,
    )


class _TokenModel(nnx.Module):
    """What the two token models share: h = Backbone(E[tokens] * s), s = sqrt(d_model) with
    `model.embed_scale` (Vaswani et al. 2017, sec. 3.4) and 1 otherwise; a subclass sets
    `causal` and adds its head (`add_head`, `head_logits`), whose logits `model.final_softcap`
    caps (c tanh(z / c), Gemma 2; every model kind's output logits)."""

    input_key: ClassVar[str] = "inputs"
    sizes: ClassVar[tuple[str, ...]] = ("vocab_size",)
    causal: ClassVar[bool]
    masked_lm: ClassVar[bool] = False
    # a classifier fine-tuned from a masked-LM encoder's run (posjax.train.finetune)
    fine_tune: ClassVar[bool] = False

    def __init__(self, cfg: ModelConfig, encoding: Encoding, *, vocab_size: int, max_len: int,
                 rngs: nnx.Rngs, input_axes: int | None = None):
        """input_axes: None for positions int32[B, L], A for int32[B, L, A]."""
        self.embed = _token_embedding(cfg, vocab_size, rngs)
        self.embed_multiplier = math.sqrt(cfg.d_model) if cfg.embed_scale else None
        self.final_softcap = cfg.final_softcap
        self.backbone = Backbone(
            cfg, encoding, causal=self.causal, max_len=max_len, input_axes=input_axes, rngs=rngs
        )
        self.add_head(cfg, vocab_size, rngs)

    def hidden(self, tokens, positions, segment_ids, *, deterministic, rngs) -> jax.Array:
        """tokens: int32[B, L]; positions, segment_ids: as `__call__`'s -> final hidden
        states [B, L, D]."""
        x = self.embed(tokens)
        if self.embed_multiplier is not None:
            x = x * jnp.asarray(self.embed_multiplier, x.dtype)
        return self.backbone(x, positions, positions, segment_ids, deterministic=deterministic,
                             rngs=rngs)

    def __call__(
        self,
        tokens: jax.Array,
        positions: jax.Array,
        segment_ids: jax.Array,
        *,
        deterministic: bool = True,
        rngs: nnx.Rngs | None = None,
    ) -> jax.Array:
        """tokens: int32[B, L]; positions: int32[B, L] (or [B, L, A], or [1, L] for every row);
        segment_ids: int32[B, L] or None (whole rows): module docstring -> logits
        float32[B, L, V].

        rngs (optional): a 'dropout' stream used instead of the model's own for this call.
        """
        h = self.hidden(tokens, positions, segment_ids, deterministic=deterministic, rngs=rngs)
        return capped(self.head_logits(h), self.final_softcap)


@register("causal_lm")
class CausalLM(_TokenModel):
    """Decoder-only language model: logits[b, i] predict token i + 1 from tokens <= i.

    Untied output projection (with a bias unless `model.head_bias` is false) by default;
    `model.tie_embeddings` uses logits = h E^T (Press & Wolf 2017).
    """

    causal = True

    def add_head(self, cfg: ModelConfig, vocab_size: int, rngs: nnx.Rngs) -> None:
        self.head = None if cfg.tie_embeddings else dense(
            cfg.d_model, vocab_size, cfg, rngs, use_bias=cfg.head_bias)

    def head_logits(self, h: jax.Array) -> jax.Array:
        """h: [B, L, D] -> logits float32[B, L, V]."""
        logits = self.embed.attend(h) if self.head is None else self.head(h)
        return logits.astype(jnp.float32)


@register("mixed_lm")
class MixedLM(CausalLM):
    """A causal LM over one sequence mixing text and image-patch tokens, whose positions have
    the components the data gives (BatchSpec.position_axes): int32[B, L] (0), or
    int32[B, L, A] such as M-RoPE's (t, h, w) (A = 3) or axial (h, w) (A = 2), handed to
    every site as they are (posjax.data.text_image writes them). An encoding whose attention
    sites read another form fails here, naming the form the data has."""

    sizes = ("vocab_size", "position_axes")

    def __init__(self, cfg: ModelConfig, encoding: Encoding, *, vocab_size: int,
                 position_axes: int, max_len: int, rngs: nnx.Rngs):
        axes = position_axes or None
        for each in dict.fromkeys((encoding, *layer_encodings(cfg, encoding))):
            attends = each is not None and any(s in each.sites() for s in ATTENTION_SITES)
            if attends and not each.reads_positions(axes):
                have = "int32[B, L]" if axes is None else f"int32[B, L, {axes}]"
                raise ConfigError(
                    f"encoding {each.name!r} cannot read this data's positions {have}: set "
                    "data.position_rule to the one the encoding reads (mrope: (t, h, w); "
                    "rope2d: axial (h, w); 1-D encodings: sequence)")
        super().__init__(cfg, encoding, vocab_size=vocab_size, max_len=max_len, rngs=rngs,
                         input_axes=axes)


@register("mlm")
class MLMEncoder(_TokenModel):
    """Bidirectional encoder with BERT's MLM head (the RoFormer model shape).

    logits = LayerNorm(gelu(h W_t + b_t)) E^T + c, E the input token embedding (tied).
    """

    causal = False
    masked_lm = True

    def add_head(self, cfg: ModelConfig, vocab_size: int, rngs: nnx.Rngs) -> None:
        self.transform = dense(cfg.d_model, cfg.d_model, cfg, rngs)
        self.transform_norm = make_norm(cfg.d_model, cfg, rngs)
        self.output_bias = nnx.Param(jnp.zeros((vocab_size,), cfg.weight_dtype))

    def head_logits(self, h: jax.Array) -> jax.Array:
        """h: [B, L, D] -> logits float32[B, L, V]."""
        h = self.transform_norm(jax.nn.gelu(self.transform(h)))
        logits = self.embed.attend(h).astype(jnp.float32)
        return logits + self.output_bias[...].astype(jnp.float32)


@register("classifier")
class Classifier(_TokenModel):
    """The MLM encoder's body (token embedding + bidirectional backbone) with a pooled
    classification head instead of the MLM head, for fine-tuning a pretrained MLM run
    (`train.init_from`; RoFormer Table 5's set-up).

    pooled = tanh(h[:, 0] W_p + b_p)   model.pooling="cls": the first token (BOS, BERT's [CLS])
                                       through BERT's pooler, as BERT and RoFormer fine-tune
    pooled = mean of h over the tokens whose segment id != 0        model.pooling="mean"
    logits = pooled W_c + b_c, C = num_classes outputs

    tokens int32[B, L] -> logits [B, C]. tokens int32[B, K, L] (K candidate rows per example,
    e.g. the pairs (A, B), (A, C) of a matching task) -> each row is encoded and scored
    alone, logits [B, K * C] (C = 1: one score per candidate, softmaxed over the K; BERT's
    multiple-choice head), so swapping two candidates swaps their logits exactly.
    """

    causal = False
    fine_tune = True
    sizes = ("vocab_size", "num_classes")

    def __init__(self, cfg: ModelConfig, encoding: Encoding, *, vocab_size: int,
                 num_classes: int, max_len: int, rngs: nnx.Rngs):
        self.num_classes = num_classes
        self.pooling = cfg.pooling
        super().__init__(cfg, encoding, vocab_size=vocab_size, max_len=max_len, rngs=rngs)

    def add_head(self, cfg: ModelConfig, vocab_size: int, rngs: nnx.Rngs) -> None:
        del vocab_size
        self.pooler = dense(cfg.d_model, cfg.d_model, cfg, rngs) if cfg.pooling == "cls" \
            else None
        self.classify = dense(cfg.d_model, self.num_classes, cfg, rngs)

    def pooled(self, h: jax.Array, segment_ids: jax.Array | None) -> jax.Array:
        """h: [N, L, D] -> [N, D] (`model.pooling`)."""
        if self.pooler is not None:
            return jnp.tanh(self.pooler(h[:, 0]))
        return _pool(h, jnp.ones(h.shape[:2], jnp.int32) if segment_ids is None
                     else segment_ids)

    def __call__(self, tokens, positions, segment_ids, *, deterministic=True, rngs=None):
        """tokens, positions, segment_ids: int32[B, L] or [B, K, L] -> logits float32[B, C]
        or [B, K * C] (see the class docstring); segment_ids None: no padding."""
        batch, length = tokens.shape[0], tokens.shape[-1]
        flat = tokens.reshape(-1, length)
        if positions.ndim == tokens.ndim:  # one row of positions per row of tokens
            positions = positions.reshape(-1, length)
        segments = None if segment_ids is None else segment_ids.reshape(-1, length)
        h = self.hidden(flat, positions, segments, deterministic=deterministic, rngs=rngs)
        logits = self.classify(self.pooled(h, segments)).astype(jnp.float32)
        return capped(logits, self.final_softcap).reshape(batch, -1)


def _pool(h: jax.Array, segment_ids: jax.Array) -> jax.Array:
    """[B, N, D] -> [B, D]: mean over non-padding patches (segment id != 0), summed in
    float32 so a bfloat16 model does not lose the small terms of a long sum."""
    keep = (segment_ids != 0)[..., None].astype(jnp.float32)
    mean = (h.astype(jnp.float32) * keep).sum(1) / jnp.maximum(keep.sum(1), 1.0)
    return mean.astype(h.dtype)


# How the patch model reads out its hidden states, by the name users pass as `model.output`.
PATCH_OUTPUTS = {"pooled": _pool, "per_patch": lambda h, segment_ids: h}


@register("patch2d")
class PatchModel(nnx.Module):
    """Bidirectional encoder over patches with 2-D positions (row, col).

    Positions reach each site in the form it reads:
      * an encoding that reads 2-D positions (rope2d, rope_mixed) gets (row, col) everywhere;
      * M-RoPE, which reads (t, h, w), gets an image's (0, row, col) at its attention sites;
      * a 1-D encoding's input site is applied axially (see InputSite);
      * a 1-D encoding's attention sites (and DeBERTa's absolute table) get the raster index
        row * grid_width + col, grid_width = `model.grid_width`, the widest grid the model
        will see (every col must be < grid_width for the index to be unique).
    Output (`model.output`): "pooled" -> [B, num_classes] from the mean of the non-padding
    patches; "per_patch" -> [B, N, num_classes].
    """

    input_key: ClassVar[str] = "patches"
    sizes: ClassVar[tuple[str, ...]] = ("num_classes", "patch_dim")
    causal: ClassVar[bool] = False
    masked_lm: ClassVar[bool] = False
    fine_tune: ClassVar[bool] = False

    def __init__(
        self,
        cfg: ModelConfig,
        encoding: Encoding,
        *,
        num_classes: int,
        patch_dim: int,
        max_len: int,
        rngs: nnx.Rngs,
    ):
        if cfg.output not in PATCH_OUTPUTS:
            raise unknown("model.output", cfg.output, PATCH_OUTPUTS)
        self.positions = grid_position_form(encoding)
        self.raster = self.positions == "raster"
        needs_index = cfg.absolute_last_layers or any(
            s in encoding.sites() for s in ATTENTION_SITES
        )
        if self.raster and needs_index and cfg.grid_width is None:
            raise ConfigError(
                f"kind='patch2d' with the 1-D encoding {encoding.name!r} numbers patches "
                "row * grid_width + col: set model.grid_width to the widest grid (patches per row)"
            )
        self.grid_width = cfg.grid_width
        self.output = cfg.output
        self.patch_embed = dense(patch_dim, cfg.d_model, cfg, rngs)
        self.backbone = Backbone(
            cfg, encoding, causal=False, max_len=max_len, input_axes=2, rngs=rngs
        )
        self.head = dense(cfg.d_model, num_classes, cfg, rngs)
        self.final_softcap = cfg.final_softcap

    def __call__(
        self,
        patches: jax.Array,
        positions: jax.Array,
        segment_ids: jax.Array,
        *,
        deterministic: bool = True,
        rngs: nnx.Rngs | None = None,
    ) -> jax.Array:
        """patches: float32[B, N, P]; positions: int32[B, N, 2] (row, col); segment_ids:
        int32[B, N] -> logits float32[B, C] ("pooled") or [B, N, C] ("per_patch").

        rngs (optional): a 'dropout' stream used instead of the model's own for this call.
        """
        x = self.patch_embed(patches)
        attn_positions = positions
        if self.raster and self.grid_width is not None:
            attn_positions = positions[..., 0] * self.grid_width + positions[..., 1]
        elif self.positions == "image":  # one image at time 0: (0, row, col)
            attn_positions = jnp.pad(positions, ((0, 0), (0, 0), (1, 0)))
        h = self.backbone(
            x,
            positions,
            attn_positions,
            segment_ids,
            deterministic=deterministic,
            rngs=rngs,
        )
        logits = self.head(PATCH_OUTPUTS[self.output](h, segment_ids)).astype(jnp.float32)
        return capped(logits, self.final_softcap)


def build_model(
    model_cfg: Any,
    encoding: Encoding,
    *,
    kind: str,
    max_len: int,
    rngs: nnx.Rngs,
    **sizes: int | None,
) -> nnx.Module:
    """Build model `kind` (a name in `KINDS`) around `encoding`.

    model_cfg: `config.model` (ConfigDict, mapping or ModelConfig); max_len: the training
    length (size of learned position tables, the encoding's Dims.max_len); rngs: nnx.Rngs
    with a 'params' stream (and 'dropout' when model.dropout > 0); sizes: what the kind reads
    from the data (`cls.sizes`: vocab_size for token models, num_classes and patch_dim for
    patches). Incompatible choices (e.g. ALiBi with linear attention, xPos in a
    bidirectional model) raise ConfigError here.
    """
    cls = model_kind(kind)
    for name in cls.sizes:
        if sizes.get(name) is None:
            raise ConfigError(f"kind={kind!r} needs build_model(..., {name}=...)")
    cfg = model_cfg if isinstance(model_cfg, ModelConfig) else ModelConfig.from_config(model_cfg)
    if max_len < 1:
        raise ConfigError(f"max_len={max_len} must be >= 1 (the training sequence length)")
    return cls(cfg, encoding, max_len=max_len, rngs=rngs, **{n: sizes[n] for n in cls.sizes})


def abstract_model(make: Callable[[], nnx.Module]) -> nnx.Module:
    """`make()`'s module with shapes for values (nnx.eval_shape), built with its variables as
    array refs and returned as plain ones. A plain variable's update under the trace (each
    draw from an rng stream) reads the traced value's sharding, whose error JAX words by
    walking the whole trace so far (jax-ml/jax#40041): quadratic in the draws, and twice the
    cost of the build itself for a 6-layer model. The model's own weights start as zeros
    (initialisers.shapes_only): their shapes are a real build's, their draws are not traced."""
    def build():
        with nnx.var_defaults(ref=True), initialisers.shapes_only():
            module = make()
        return nnx.with_vars(module, ref=False, allow_duplicates=True)

    return nnx.eval_shape(build)
