"""Shared pieces of the config files in configs/: the arg-string parser and the base config.

A config file defines `get_config(arg)`; `arg` is a short string such as
`encoding=rope,theta=500,seq_len=128,smoke`. `parse_arg` turns it into typed values using the
file's defaults (a bare word sets a boolean to True); keys that are not the file's own but are
hyperparameters of the chosen encoding go to `config.encoding`. Unknown keys are rejected with a
"did you mean". Every config has the same sections (encoding, model, data, train, eval), so a key
means the same thing in every file.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from typing import Any

import ml_collections

from posjax import data, encoders
from posjax.errors import ConfigError, did_you_mean
from posjax.errors import unknown as unknown  # config files raise configlib.unknown(...)


def _convert(key: str, text: str, default: Any) -> Any:
    """Parse `text` as the type of `default` (None defaults take a Python literal or a string)."""
    if isinstance(default, bool):
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{key}={text!r} is not a boolean: use {key}=true or {key}=false")
    if isinstance(default, (int, float)):
        try:
            return type(default)(float(text)) if isinstance(default, int) else float(text)
        except ValueError:
            raise ConfigError(
                f"{key}={text!r} is not a number: give {key} a {type(default).__name__}"
            ) from None
    if isinstance(default, tuple):
        parts = [p for p in text.split("+") if p]
        inner = default[0] if default else ""
        return tuple(_convert(key, p, inner) for p in parts)
    if default is None:
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text
    return text


def _split_pairs(arg: str) -> list[str]:
    """`arg` split at the commas outside brackets and quotes, so a value may be a JSON object
    (`scaling={"rope_type": "yarn", "factor": 4}`)."""
    pairs, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(arg):
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "{[(":
            depth += 1
        elif char in "}])":
            depth -= 1
        elif char == "," and depth == 0:
            pairs.append(arg[start:i])
            start = i + 1
    return [*pairs, arg[start:]]


def _unknown_arg(key: str, encoding_name: str | None, known: list[str]) -> ConfigError:
    """An arg key that is neither the file's nor a hyperparameter of the chosen encoding:
    when other encodings take it, which; else the valid keys."""
    takers = [name for name in encoders.names() if key in encoders.hparams(name)]
    if takers and encoding_name:
        return ConfigError(
            f"config arg {key!r} is a hyperparameter of {', '.join(takers)}, not of "
            f"encoding={encoding_name}: drop it, or pick one of those encodings "
            f"(posjax list encodings)")
    return ConfigError(f"unknown config arg {key!r}{did_you_mean(key, known)}; "
                       f"valid: {', '.join(sorted(known))}")


def arg_keys(arg: str) -> set[str]:
    """The keys `arg` ("k=v,k=v,flag") sets itself, defaults aside: what the user asked for."""
    return {p.partition("=")[0].strip() for p in _split_pairs(arg or "") if p.strip()}


def parse_arg(arg: str, defaults: Mapping[str, Any]) -> ml_collections.ConfigDict:
    """Typed values of `arg` ("k=v,k=v,flag") over `defaults`.

    Keys not in `defaults` are accepted when they are hyperparameters of the chosen
    `encoding` (so `encoding=rope,theta=500` works); tuples are written with `+`
    (`lengths=128+256+512`); a value may be a JSON object (commas inside it are kept).
    Unknown keys raise a one-line ConfigError.
    """
    values = dict(defaults)
    pairs = [p.strip() for p in _split_pairs(arg or "") if p.strip()]
    extra: dict[str, str] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep:
            if not isinstance(defaults.get(key), bool):
                raise ConfigError(
                    f"config arg {key!r} has no value{did_you_mean(key, defaults)}: "
                    f"write {key}=VALUE (bare words are only for the flags "
                    f"{', '.join(k for k, v in defaults.items() if isinstance(v, bool))})"
                )
            values[key] = True
        elif key in defaults:
            values[key] = _convert(key, text.strip(), defaults[key])
        else:
            extra[key] = text.strip()
    encoding_name = values.get("encoding")
    enc_defaults = encoders.hparams(encoding_name) if encoding_name else {}
    data_defaults = dataset_fields(values.get("dataset"))
    for key, text in extra.items():
        if key in enc_defaults:
            values[key] = _convert(key, text, enc_defaults[key])
        elif key in data_defaults:
            values[key] = _convert(key, text, data_defaults[key])
        else:
            kinds = [name for name in data.kinds.names()
                     if key in data.kinds.declared_fields(data.kinds.kind_class(name))]
            if kinds:
                raise ConfigError(
                    f"config arg {key!r} is a field of dataset {' or '.join(kinds)}, not of "
                    f"dataset={values.get('dataset')}: add dataset={kinds[0]} (posjax list "
                    "datasets)")
            raise _unknown_arg(key, encoding_name,
                               list(dict.fromkeys([*defaults, *enc_defaults, *data_defaults])))
    return ml_collections.ConfigDict(values)


def dataset_fields(dataset: str | None) -> dict[str, Any]:
    """The config.data fields the data kind of `dataset` declares itself (local_text's
    text_glob, ...), with their defaults for it: a config file's arg takes them as keys
    (`parse_arg`; `base_config(data_overrides=...)` sets them)."""
    if not isinstance(dataset, str) or not dataset:
        return {}
    own = data.kinds.declared_fields(data.kinds.kind_class(dataset))
    defaults = data.default_data_config(dataset)
    return {key: defaults[key] for key in own}


def encoding_config(name: str, overrides: Mapping[str, Any]) -> ml_collections.ConfigDict:
    """`config.encoding`: the name plus every hyperparameter of that encoding (defaults filled in,
    so `--config.encoding.KEY=V` can override any of them)."""
    section = {"name": name, **encoders.hparams(name)}
    for key, value in overrides.items():
        if key in section:
            section[key] = value
    if "scaling" in section:
        # Text (JSON, NAME:FACTOR or "" for none): a None field could not be overridden.
        section["scaling"] = scaling_text(section["scaling"])
    return ml_collections.ConfigDict(section)


def scaling_text(value: Any) -> str:
    """rope's `scaling` as config text: "" for none, a mapping as JSON, text as is."""
    if value is None or isinstance(value, str):
        return value or ""
    return json.dumps(dict(value.items() if hasattr(value, "items") else value))


# Every field of the model, train and eval sections, defined once: its default and what it
# means (`posjax list fields`; the data section's are posjax.data.kinds' fields). Tuples, not
# lists: ConfigDict keeps their type.
Field = data.kinds.Field
MODEL_FIELDS = {
    "d_model": Field(256, "width of the residual stream"),
    "num_layers": Field(4, "Transformer blocks"),
    "num_heads": Field(4, "attention (query) heads"),
    "head_dim": Field(64, "width of each attention head"),
    "mlp": Field("gelu", "the MLP: gelu, gelu_exact or swiglu"),
    "mlp_dim": Field(1024, "hidden width of the MLP"),
    "norm": Field("layernorm", "the normalisation: layernorm or rmsnorm"),
    "dropout": Field(0.0, "dropout rate while training"),
    "param_dtype": Field("float32", "dtype the parameters are stored in"),
    "dtype": Field("auto", "compute dtype; auto: bfloat16 on GPU and TPU, float32 on CPU"),
    "attention": Field("auto", "auto (dense up to dense_max_len, chunked above), dense, "
                               "chunked, fused or linear"),
    "dense_max_len": Field(1024, "auto attention: the longest sequence attended densely"),
    "block_size": Field(256, "chunked attention: keys per block"),
    "linear_feature": Field("elu", "linear attention: the feature map, elu (elu + 1) or cos"),
    "tie_embeddings": Field(False, "causal LM: the output projection is the token embedding"),
    "embed_scale": Field(False, "token embeddings times sqrt(d_model) (Vaswani et al.)"),
    "output": Field("pooled", "patch model's read-out: pooled or per_patch"),
    "pooling": Field("cls", "classifier's pooled representation: cls (the first token through "
                            "BERT's tanh pooler) or mean (over non-padding tokens)"),
    "absolute_last_layers": Field(0, "k > 0: a learned absolute table into the last k layers "
                                     "(DeBERTa's enhanced mask decoder)"),
    "share_position_params": Field(False, "one copy of the encoding's attention-site "
                                          "parameters for all layers"),
    "layer_pattern": Field("", 'per-layer encodings joined by "+", cycled '
                               '("rope+rope+rope+none"); "" = the encoding everywhere'),
    "qkv_bias": Field(True, "a bias on the q, k, v projections"),
    "attn_out_bias": Field(True, "a bias on the attention output projection"),
    "head_bias": Field(True, "a bias on the causal LM's untied output projection"),
    "norm_eps": Field(1e-6, "epsilon of every normalisation layer"),
    "parallel_residual": Field(False, "attention and MLP both read the block's input (NeoX)"),
    "output_gate": Field("none", "a sigmoid gate on each head's output from the layer's input "
                                 "(Qiu et al. 2025): none, elementwise or headwise"),
    "sink_logit": Field(False, "a learned logit per head in the softmax's denominator "
                               "(GPT-OSS): dense, chunked, auto"),
    "qk_norm": Field(False, "RMSNorm of q and k per head over head_dim, before the rotation "
                            "(Qwen3, Gemma 3)"),
}
# Model fields that are None unless set: typed placeholders, so --config.model.KEY=V works.
MODEL_PLACEHOLDERS = {
    "grid_width": (int, "patch model: patches per row of the widest grid (raster index)"),
    "num_kv_heads": (int, "grouped-query attention: key/value heads (None: num_heads)"),
    "mlp_bias": (bool, "biases in the MLP (None: the MLP's own, gelu biased, swiglu not)"),
}
TRAIN_FIELDS = {
    "learning_rate": Field(1e-3, "peak learning rate, reached after warmup_steps"),
    "schedule": Field("cosine", "after warm-up: cosine (decay to 0 at the last step) or "
                                "constant"),
    "warmup_steps": Field(100, "linear warm-up steps (a config file's size sets "
                               "min(100, steps / 10); --config.train.warmup_steps wins)"),
    "optimizer": Field("adamw", "an optax optimizer by name (posjax.train.optim.OPTIMIZERS)"),
    "optimizer_args": Field('{"b1": 0.9, "b2": 0.98}', "the optimizer's keyword arguments "
                                                       "beyond the learning rate, as JSON"),
    "weight_decay": Field(0.01, "weight decay on matrices (decoupled where the optimizer "
                                "takes it, else added to the gradient)"),
    "grad_clip": Field(1.0, "clip gradients to this global norm"),
    "log_every_steps": Field(10, "metrics.jsonl and TensorBoard every this many steps"),
    "checkpoint_every_steps": Field(200, "a checkpoint every this many steps"),
    "eval_every_steps": Field(0, "held-out loss every this many steps (0: at stage ends)"),
    "eval_batches": Field(4, "batches of each held-out evaluation (0: none)"),
    "randomize_positions": Field(0, "M > 0: draw each segment's positions from [0, M)"),
    "pose": Field(0, "PoSE (Zhu et al. 2024): the target length the training positions "
                     "reach; 0 = off"),
    "pose_chunks": Field(2, "PoSE: chunks the training positions are cut into"),
    "seed": Field(0, "seed of the initialisation and the data order"),
    "init_from": Field("", "a trained run whose parameters start this one where names and "
                           "shapes match (fine-tuning an MLM run's encoder; new heads keep "
                           "their initialisation); '' = none"),
    "distributed": Field(False, "join the run's processes as SLURM, a TPU pod, ... set them"),
    "mesh": Field((("data", -1), ("fsdp", 1)), '(axis, size) pairs, -1 = the devices left '
                                                'over; "fsdp" > 1 shards the state'),
    "sharding_rules": Field(((".*", "fsdp"),), '(regex over a state leaf\'s path, "fsdp" | '
                                               '"replicate"); the first match decides'),
}
EVAL_FIELDS = {
    "lengths": Field((), "evaluation lengths (a config file's default: 1x..16x the training "
                         "length)"),
    "protocol": Field("nonoverlapping", "windowing: nonoverlapping or sliding"),
    "stride": Field(0, "sliding windows: the stride (0: half the training length)"),
    "rope_scaling": Field("", "length extension at evaluation (posjax extrapolate "
                              "--rope_scaling)"),
    "max_tokens": Field(16384, "scored tokens per length"),
    "batch_size": Field(1, "windows per evaluation batch"),
    "learned_extension": Field("", "encoding that extends a learned table past its length "
                                   "('' for none)"),
    "group_factor": Field(4, "lengths share compiled row lengths train_len * group_factor**i "
                             "(1: one per length)"),
}
MODEL_DEFAULTS = {key: field.default for key, field in MODEL_FIELDS.items()}
TRAIN_DEFAULTS = {key: field.default for key, field in TRAIN_FIELDS.items()}
EVAL_DEFAULTS = {key: field.default for key, field in EVAL_FIELDS.items()}

def base_config(
    *,
    encoding: str,
    encoding_overrides: Mapping[str, Any],
    kind: str,
    dataset: str,
    stages: tuple[tuple[int, int, int], ...],
    data_overrides: Mapping[str, Any] = (),
) -> ml_collections.ConfigDict:
    """The sections every config has, with this project's small-model defaults;
    data_overrides: values of `dataset`'s own config.data fields (`dataset_fields`; other
    keys are ignored, so a parsed arg can be passed whole)."""
    config = ml_collections.ConfigDict()
    config.encoding = encoding_config(encoding, encoding_overrides)
    config.model = ml_collections.ConfigDict(dict(
        kind=kind, **MODEL_DEFAULTS, **{key: ml_collections.config_dict.placeholder(type_)
                                        for key, (type_, _) in MODEL_PLACEHOLDERS.items()}))
    config.data = data.default_data_config(dataset)
    overrides = dict(data_overrides)
    for key in dataset_fields(dataset):
        if key in overrides:
            config.data[key] = overrides[key]
    config.train = ml_collections.ConfigDict(
        dict(stages=tuple(tuple(s) for s in stages), **TRAIN_DEFAULTS))
    config.eval = ml_collections.ConfigDict(EVAL_DEFAULTS)
    return config


# The model sizes of config files with a `size` arg: model widths plus the size's batch and
# steps. Every such file has this smoke size (seconds, for tests).
SMOKE_SIZE = dict(d_model=32, num_layers=1, num_heads=2, head_dim=16, mlp_dim=64,
                  batch_size=4, steps=6)
MODEL_SIZE_KEYS = ("d_model", "num_layers", "num_heads", "head_dim", "mlp_dim")


def size_budget(a, sizes: Mapping[str, Mapping[str, int]]) -> tuple[str, dict, int, int]:
    """(size name, its entry, batch size, steps) for a parsed arg with the keys size, smoke,
    batch_size and steps (0 = the size's own); smoke=true picks "smoke"."""
    size = "smoke" if a.smoke else a.size
    if size not in sizes:
        raise unknown("size", size, sizes)
    dims = dict(sizes[size])
    return size, dims, a.batch_size or dims["batch_size"], a.steps or dims["steps"]


def step_schedule(config, steps: int, *, parts: int = 4,
                  checkpoint_every: int | None = None) -> None:
    """The step schedule of a `steps`-step run: warm-up min(100, steps / 10), logging every
    min(25, steps / parts) and a checkpoint every `checkpoint_every` (default steps / parts)
    steps. These are the size's defaults: `--config.train.KEY=V` is applied after the config
    file and wins (a warm-up that does not end before the run is refused: optim.check)."""
    config.train.warmup_steps = min(100, steps // 10)
    config.train.checkpoint_every_steps = checkpoint_every or max(steps // parts, 1)
    config.train.log_every_steps = max(min(25, steps // parts), 1)


def apply_size(config, dims: Mapping[str, int], steps: int, *,
               checkpoint_every: int | None = None) -> None:
    """Set the model widths of `dims` and the step schedule of a `steps`-step run
    (`step_schedule`)."""
    for key in MODEL_SIZE_KEYS:
        config.model[key] = dims[key]
    step_schedule(config, steps, checkpoint_every=checkpoint_every)


def doubling_lengths(train_len: int, max_factor: int) -> tuple[int, ...]:
    """train_len * 1, 2, 4, ... up to train_len * max_factor (the extrapolation grid)."""
    lengths, factor = [], 1
    while factor <= max_factor:
        lengths.append(train_len * factor)
        factor *= 2
    return tuple(lengths)
