"""The arg-string parser of config files.

A config file defines `get_config(arg)`; `arg` is a short string such as
`encoding=rope,theta=500,seq_len=128,smoke`. `parse_arg` turns it into typed values using the
file's defaults (a bare word sets a boolean to True); keys that are not the file's own but are
hyperparameters of the chosen encoding go to `config.encoding`. Unknown keys are rejected with a
"did you mean". Every config has the same sections (encoding, model, data, train, eval), so a key
means the same thing in every file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import ml_collections

from posjax import data, encoders
from posjax.config.fields import MODEL_PLACEHOLDERS, SECTION_FIELDS, field_section
from posjax.errors import ConfigError, did_you_mean
from posjax.models import transformer
from posjax.models.pattern import (
    literal_or_text,
    scalar_value,
    split_top,
    unquoted,
)


class PathText(str):
    """A config file's default whose key names files or a folder (configs/finetune.py's
    `pretrained=`): parsed as text, and made absolute by a sweep when it plans
    (`absolute_paths`), as are the fields declared with `path=True` (data.text_glob, ...)."""


def _check_no_clash(encoding: str | None, hyperparameters: Mapping[str, Any],
                    defaults: Mapping[str, Any], fields: bool) -> None:
    """A one-line ConfigError where a hyperparameter of `encoding` has the name of one of the
    config file's arg keys (`defaults`) or, with `fields`, of a model, train or eval field:
    the arg KEY=V could not set one without the other, and left out, the hyperparameter
    would take the file's value, not its own default."""
    for key in hyperparameters:
        section = field_section(key) if fields else None
        if key in defaults or section:
            what = (f"this config file's arg {key} ({key}={defaults[key]!r} by default)"
                    if key in defaults else f"the {section} field {key} (config.{section}.{key})")
            raise ConfigError(
                f"encoding {encoding!r} has a hyperparameter {key!r}, and {key} is also {what}, "
                f"so the arg cannot tell them apart: rename the hyperparameter (in the "
                "encoding's dataclass)")


def _convert(key: str, text: str, default: Any) -> Any:
    """Parse `text` as the type of `default` (None defaults, and the items of an empty tuple
    default, take a Python literal or a string: `lengths=128+256` is (128, 256); a string
    in quotes is the text inside them: posjax.models.pattern.scalar_value)."""
    if isinstance(default, tuple):
        parts = [p for p in text.split("+") if p]
        if not parts:  # "lengths=" would quietly be the file's default, "encodings=" none
            raise ConfigError(f"config arg {key}={text} gives no value: give one or more "
                              f"joined by + ({key}=A+B), or leave it out")
        inner = default[0] if default else None
        return tuple(_convert(key, p, inner) for p in parts)
    try:
        return scalar_value(text, default)
    except ValueError as err:
        if isinstance(default, bool):
            raise ConfigError(f"{key}={text!r} is not a boolean: use {key}=true or "
                              f"{key}=false") from None
        kind = "an integer" if isinstance(default, int) else "a number"
        raise ConfigError(f"{key}={text!r} is not {err.args[0]}: give {key} {kind}") from None


def _split_pairs(arg: str) -> list[str]:
    """`arg` split at the commas outside brackets and quotes, so a value may be a JSON object
    (`scaling={"rope_type": "yarn", "factor": 4}`) or a layer pattern's entry (`rope(a=1,b=2)`)."""
    return split_top(arg, ",")


def _unknown_arg(key: str, encoding_name: str | None, fields: bool,
                 known: list[str]) -> ConfigError:
    """An arg key that is neither the file's nor a hyperparameter of the chosen encoding:
    when other encodings take it, which; `seeds`, posjax sweep's axis, what trains seeds
    outside a sweep; else the valid keys."""
    if key == "seeds":  # posjax sweep takes it out of the arg before any get_config
        return ConfigError(
            "config arg 'seeds' is posjax sweep's seeds axis; posjax train trains several "
            "seeds with --seeds=0,1,2 and {seed} in --workdir (runs/rope,seed={seed})")
    takers = [name for name in encoders.names() if key in encoders.hparams(name)]
    if takers and encoding_name:
        return ConfigError(
            f"config arg {key!r} is a hyperparameter of {', '.join(takers)}, not of "
            f"encoding={encoding_name}: drop it, or pick one of those encodings "
            f"(posjax list encodings)")
    if fields:
        known = [*known, *(k for section in SECTION_FIELDS.values() for k in section),
                 *MODEL_PLACEHOLDERS]
    return ConfigError(f"unknown config arg {key!r}{did_you_mean(key, known)}; "
                       f"valid: {', '.join(sorted(set(known)))}")


def arg_keys(arg: str) -> set[str]:
    """The keys `arg` ("k=v,k=v,flag") sets itself, defaults aside: what the user asked for."""
    return set(arg_pairs(arg))


def arg_pairs(arg: str) -> dict[str, str]:
    """{key: its text} of what `arg` ("k=v,k=v,flag") sets itself, the last of a repeated
    key; a bare flag's text is "true"."""
    pairs = (p.strip().partition("=") for p in _split_pairs(arg or "") if p.strip())
    return {key.strip(): text.strip() if sep else "true" for key, sep, text in pairs}


def with_defaults(arg: str, **defaults: Any) -> str:
    """`arg` with `key=value` put first for each of `defaults` that `arg` does not set: a
    config file that builds on another's get_config gives its own value of a key
    (`with_defaults(arg, encoding="my_bias")`) and the user's arg, a sweep's grid included,
    still chooses another (`encoding=rope`)."""
    given = arg_keys(arg)
    return ",".join([*(f"{key}={arg_text(value)}" for key, value in defaults.items()
                       if key not in given), *([arg] if arg else [])])


def with_pair(arg: str, pair: str) -> str:
    """`arg` with `pair` ("key=value", or a bare "key") in place of the key's own pairs, or
    added last: the arg a user meant by `--key=value` typed beside --config."""
    key = pair.partition("=")[0]
    kept = [p.strip() for p in _split_pairs(arg or "")
            if p.strip() and p.strip().partition("=")[0].strip() != key]
    return ",".join([*kept, pair])


def check_each_once(where: str, values, shown: str | None = None) -> None:
    """A one-line ConfigError where `values` (lengths, grid sides, depths, seeds) hold one
    twice: it would be scored, trained or drawn twice, a row repeated in every table.
    `shown`: the values as the user typed them (a flag's text), else their tuple."""
    seen = set()
    for value in values:
        if value in seen:
            raise ConfigError(f"{where}={shown or repr(tuple(values))} gives {value!r} twice: "
                              "give each value once")
        seen.add(value)


def encoding_entry(name: str, arg: str, values: Mapping[str, Any]) -> str:
    """Encoding `name` as an entry of model.layer_pattern's grammar (train.stage_encodings),
    with the hyperparameters of it that `arg` sets itself at their `values`
    (`rope(theta=500000.0)`), else the bare name: a stage's encoding keeps what was given."""
    hparams = encoders.hparams(name)
    given = [key for key in arg_pairs(arg) if key in hparams]
    if not given:
        return name
    return f"{name}({','.join(f'{key}={arg_text(values[key])}' for key in given)})"


def arg_text(value: Any) -> str:
    """`value` as an arg writes it, so that parse_arg reads it back: a tuple joined by "+"
    (`fractions=0.25+0.5`), a dict as JSON, a text with a comma in quotes (a sweep's run
    folder, `pretrained='runs/mlm/encoding=rope,seed=0'`)."""
    if isinstance(value, (tuple, list)):
        return "+".join(map(arg_text, value))
    if isinstance(value, Mapping):
        return json.dumps(value)
    text = str(value)
    if "," in text and unquoted(text) == text:
        return f'"{text}"' if "'" in text else f"'{text}'"
    return text


def check_given_once(pairs: list[str]) -> None:
    """Refuse an arg's key given twice (`encoding=rope,smoke,encoding=alibi`): the last one
    would win without a word. A config file that adds a key to the arg it passes on (its
    own encoding) is told how to let the user's arg choose."""
    seen: dict[str, str] = {}
    for pair in pairs:
        key = pair.partition("=")[0].strip()
        if key in seen:
            raise ConfigError(f"config arg {key!r} is given twice ({seen[key]} and {pair}): "
                              "give it once (a config file that adds it to the arg it passes "
                              f"on: configlib.with_defaults(arg, {key}=...) lets the arg's "
                              "own win)")
        seen[key] = pair


def split_values(text: str) -> list[str]:
    """"V1,V2,..." split at the commas outside brackets and quotes (a value may be JSON)."""
    return [v.strip() for v in _split_pairs(text or "") if v.strip()]


def parse_arg(arg: str, defaults: Mapping[str, Any], *,
              fields: bool = False) -> ml_collections.ConfigDict:
    """Typed values of `arg` ("k=v,k=v,flag") over `defaults`.

    Keys not in `defaults` are accepted when they are hyperparameters of the chosen
    `encoding` (so `encoding=rope,theta=500` works), fields of the chosen dataset, or, with
    `fields`, the name of a model, train or eval field (`posjax list fields`), which the
    file then sets with `set_fields`; tuples are written with `+` (`lengths=128+256+512`);
    a value may be a JSON object (commas inside it are kept). Unknown keys raise a one-line
    ConfigError.
    """
    values = dict(defaults)
    pairs = [p.strip() for p in _split_pairs(arg or "") if p.strip()]
    check_given_once(pairs)
    extra: dict[str, str] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep:
            if type(literal_or_text(key)) in (int, float):  # `lengths=128,256`: "," for "+"
                raise ConfigError(
                    f"config arg {key!r} has no key: join a list's items with + "
                    "(lengths=128+256), not with commas")
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
    _check_no_clash(encoding_name, enc_defaults, defaults, fields)
    data_defaults = dataset_fields(values.get("dataset"))
    for key, text in extra.items():
        if key in enc_defaults:
            values[key] = _convert(key, text, enc_defaults[key])
        elif key in data_defaults:
            values[key] = _convert(key, text, data_defaults[key])
        elif fields and field_section(key):
            values[key] = _convert(key, text, _field_default(key))
        else:
            kinds = [name for name in data.kinds.names()
                     if key in data.kinds.declared_fields(data.kinds.kind_class(name))]
            if kinds and "dataset" not in defaults:  # the file picks its dataset itself
                raise ConfigError(
                    f"config arg {key!r} is a field of config.data (of dataset "
                    f"{' or '.join(kinds)}), which this config file takes no arg for: where "
                    f"it trains {' or '.join(kinds)}, give --config.data.{key}=VALUE; else "
                    "drop it")
            if kinds:
                given = values.get("dataset")
                unknown = ("" if given in data.kinds.names() else
                           f", a dataset posjax does not build"
                           f"{did_you_mean(given, data.kinds.names())}")
                raise ConfigError(
                    f"config arg {key!r} is a field of dataset {' or '.join(kinds)}, not of "
                    f"dataset={given}{unknown}: give dataset={kinds[0]} (posjax list "
                    "datasets)")
            raise _unknown_arg(key, encoding_name, fields,
                               list(dict.fromkeys([*defaults, *enc_defaults, *data_defaults])))
    _check_stage_counts(values, defaults)
    return ml_collections.ConfigDict(values)


# Args that count a training stage's tokens per row, rows per batch, or steps.
STAGE_COUNTS = ("seq_len", "batch_size", "steps")


def _check_stage_counts(values: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
    """A stage count below 1 is refused in the arg's words (train.stages would name it
    later), where a file's default of 0 ("the size's own") allows 0."""
    for key in STAGE_COUNTS:
        if isinstance(defaults.get(key), int) and values[key] < 1 and not (
                values[key] == 0 == defaults[key]):
            zero = " (or 0 for the config file's default)" if defaults[key] == 0 else ""
            raise ConfigError(f"config arg {key}={values[key]} must be >= 1{zero}")


def _field_default(key: str) -> Any:
    """A value of the field's type: its default, or for a placeholder (None unless set) its
    type's zero, which types the arg's text."""
    if key in MODEL_PLACEHOLDERS:
        return MODEL_PLACEHOLDERS[key][0]()
    section = field_section(key)
    return SECTION_FIELDS[section][key].default if section else None


def set_fields(config, arg: str, a: Mapping[str, Any], defaults: Mapping[str, Any], *,
               smoke: bool = False) -> None:
    """Set each model, train or eval field that `arg` names (parsed as `a`) and the file's
    `defaults` do not: a config file's shortcut to `--config.SECTION.KEY=V`, called last in
    its get_config so that what the user typed wins over the file's sizes and schedules.
    smoke: the toy size, whose model (unless `arg` names num_layers) is made as deep as its
    layer pattern, so a study's patterns check their set-up at that size too."""
    given = arg_keys(arg)
    taken = {*defaults, *encoders.hparams(a.get("encoding") or "none"),
             *dataset_fields(a.get("dataset"))}
    for key in given - taken:
        if field_section(key):
            config[field_section(key)][key] = a[key]
    if smoke and config.model.layer_pattern and "num_layers" not in given:
        depth = len(transformer.layer_specs(config.model))
        config.model.num_layers = max(config.model.num_layers, depth)


def _path_key(key: str, defaults: Mapping[str, Any], dataset: str) -> bool:
    """Whether an arg's `key` names files or a folder: a PathText default of the file, else
    a field of the dataset's kind or a model, train or eval field declared `path`."""
    if key in defaults:
        return isinstance(defaults[key], PathText)
    own = data.kinds.declared_fields(data.kinds.kind_class(dataset)) if dataset else {}
    field = own.get(key) or (SECTION_FIELDS[field_section(key)].get(key)
                             if field_section(key) else None)
    return bool(field and field.path)


def _absolute(path: str) -> str | None:
    """`path` (or glob) absolute against this process's directory; None where it is empty,
    absolute already or from the home directory (~, the host's own)."""
    if not path or os.path.isabs(path) or path.startswith("~"):
        return None
    return os.path.abspath(path)


def _quoted(text: str) -> str:
    """`text` as an arg's value: in quotes where it has a comma, a bracket or a quote."""
    if not any(c in text for c in ",'\"[]{}()"):
        return text
    return f"'{text}'" if "'" not in text else f'"{text}"'


def absolute_paths(arg: str, defaults: Mapping[str, Any]) -> str:
    """`arg` with each relative path made absolute against this process's directory: the
    values of keys that name files or a folder (`_path_key`; `defaults`: the config file's
    DEFAULTS). A sweep plans its runs' args with it, so a run started on another host or
    from another directory (Ray, SLURM) reads the files the user meant."""
    dataset = unquoted(str(arg_pairs(arg).get("dataset", defaults.get("dataset", ""))))
    pairs = []
    for pair in split_values(arg):
        key, sep, text = (part.strip() for part in pair.partition("="))
        absolute = (_absolute(unquoted(text))
                    if sep and _path_key(key, defaults, dataset) else None)
        pairs.append(f"{key}={_quoted(absolute)}" if absolute else pair)
    return ",".join(pairs)


def absolute_override(flag: str) -> str:
    """A `--config.SECTION.KEY=VALUE` flag with a relative path VALUE made absolute, where
    the field names files or a folder (declared `path`: data.text_glob, train.init_from)."""
    name, sep, value = flag.partition("=")
    section, _, key = name.removeprefix("--config.").partition(".")
    fields = data.kinds.all_fields() if section == "data" else SECTION_FIELDS.get(section, {})
    field = fields.get(key) if sep and name.startswith("--config.") else None
    absolute = _absolute(value) if field is not None and field.path else None
    return f"{name}={absolute}" if absolute else flag


def absolute_fields(config: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """`config` with the relative paths of its fields that name files or a folder (declared
    `path`: data.text_glob, data.data_dir, train.init_from, ...) made absolute against this
    process's directory: a run's config.json then names the files it read, and a later
    command on it (extrapolate, a resumed train) reads the same ones from any directory."""
    sections = {"data": data.kinds.all_fields(), **SECTION_FIELDS}
    for section, fields in sections.items():
        values = config.get(section)
        for key, field in fields.items():
            if field.path and values is not None and isinstance(values.get(key), str):
                absolute = _absolute(values[key])
                if absolute:
                    values[key] = absolute
    return config


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
