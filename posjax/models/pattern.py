"""The grammar of `model.layer_pattern`: a per-layer schedule with per-layer settings.

    pattern  := entry ("+" entry)*
    entry    := NAME ["(" KEY=VALUE ("," KEY=VALUE)* ")"] ["*" N]

NAME is an encoding (posjax.encoders.names()) or a recurrent layer's token ("gdn"); the
settings are that encoding's hyperparameters plus the layer's own `window` (its sliding
window, model.window), `attention_chunk` (model.attention_chunk), `qk_norm` and
`moe_experts` (0: one MLP among experts); `*N` repeats the entry N times. The entries are
cycled over the layers (posjax.models.transformer). Examples:

    rope+rope+rope+none                              RNoPE (every 4th layer NoPE)
    rope(theta=1e4,window=1024)*5+rope(theta=1e6)    Gemma 3: 5 local layers, 1 global
    rope(theta=1e4,window=512)*5+rope(theta=1e6,p=0.25)   Gemma 4 (global p-RoPE 0.25)
    rope(window=512)*3+none                          SWAN-GPT: windowed RoPE, global NoPE
    rope(attention_chunk=8192)*3+rope(p=0,temperature_floor=8192)
                                                     Llama 4: chunked RoPE, global NoPE
    gdn*3+none                                       Qwen3-Next's 3:1 hybrid, NoPE softmax

A value is read as its default's type (1e4 for a float, 1024 for an int, true/false), a
default of None as true/false, a Python literal or else the text; commas and "+" inside brackets or
quotes stay in the value. Every mistake is a one-line ConfigError naming the entry.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

from posjax.errors import ConfigError, did_you_mean, unknown

_ENTRY = re.compile(r"^(?P<name>[A-Za-z_][\w]*)\s*(?:\((?P<settings>.*)\))?\s*"
                    r"(?:\*\s*(?P<repeat>\S+))?$", re.DOTALL)


@dataclasses.dataclass(frozen=True)
class LayerSpec:
    """One layer's entry: `name`, its settings as sorted (key, value) pairs, and `text`, the
    entry as written without its repetition (for messages)."""

    name: str
    settings: tuple[tuple[str, Any], ...] = ()
    text: str = ""

    def get(self, key: str, default: Any = None) -> Any:
        return dict(self.settings).get(key, default)

    def without(self, *keys: str) -> dict[str, Any]:
        """The settings other than `keys`, as a dict (an encoding's hyperparameters)."""
        return {k: v for k, v in self.settings if k not in keys}


def split_top(text: str, sep: str) -> list[str]:
    """`text` split at `sep` outside brackets and quotes."""
    parts, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "{[(":
            depth += 1
        elif char in "}])":
            depth -= 1
        elif char == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


# The words a boolean takes: in a config arg, a `--config.a.b=V` override and a layer
# pattern's setting alike.
BOOLEAN_WORDS = {"1": True, "true": True, "yes": True, "on": True,
                 "0": False, "false": False, "no": False, "off": False}


def scalar_value(text: str, default: Any) -> Any:
    """`text` as the type of `default` (a bool, a number, a string; None: a Python literal or
    the text), a string without one pair of quotes around it; ValueError(what it should be:
    "a boolean", "a number", "a whole number", "a finite number") when it is not one. The
    one reading of a typed value, for config args and layer-pattern settings alike."""
    if isinstance(default, bool):
        if text.lower() not in BOOLEAN_WORDS:
            raise ValueError("a boolean")
        return BOOLEAN_WORDS[text.lower()]
    if isinstance(default, (int, float)):
        try:
            number = float(text)
        except ValueError:
            raise ValueError("a number") from None
        if not math.isfinite(number):  # inf was saved as null (no JSON infinity)
            raise ValueError("a finite number")
        if isinstance(default, float):
            return number
        if not number.is_integer():  # 64.7 trained at 64
            raise ValueError("a whole number")
        return int(number)
    if default is None:
        return literal_or_text(text)
    return unquoted(text)


def unquoted(text: str) -> str:
    """`text` without one pair of matching quotes around it: a quoted value keeps its commas
    (`pretrained='runs/mlm/encoding=rope,seed=0'`, a sweep's run folder)."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _value(text: str, default: Any) -> Any:
    """`text` as the type of `default`, a tuple's items joined by + as in a config arg;
    ValueError(what it should be) when it is not one."""
    if isinstance(default, tuple):
        parts = [part for part in text.split("+") if part]
        if not parts:
            raise ValueError("one or more values joined by + (A+B)")
        return tuple(_value(part, default[0] if default else None) for part in parts)
    return scalar_value(text, default)


def literal_or_text(text: str) -> Any:
    """A value with no typed default: true / false, a Python literal, else the text itself."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _settings(entry: str, name: str, body: str, valid: Mapping[str, Any], field: str):
    """The (key, value) pairs of one entry's parenthesised `body`, typed by `valid`."""
    settings = {}
    for pair in split_top(body, ","):
        if not pair.strip():
            continue
        key, sep, text = (s.strip() for s in pair.partition("="))
        if not sep or not text:
            raise ConfigError(f"{field} entry {entry!r}: {pair.strip()!r} is not "
                              "KEY=VALUE")
        if key in settings:  # the last would win without a word
            raise ConfigError(f"{field} entry {entry!r}: {key} is given twice: give it once")
        if key not in valid:
            keys = ", ".join(sorted(valid)) or "none"
            raise ConfigError(
                f"{field} entry {entry!r}: {name} has no setting {key!r}"
                f"{did_you_mean(key, valid)}; its valid keys: {keys}")
        try:
            settings[key] = _value(text, valid[key])
        except ValueError as err:
            raise ConfigError(f"{field} entry {entry!r}: {key}={text!r} is not "
                              f"{err.args[0]}") from None
    return tuple(sorted(settings.items()))


def parse(pattern: str, valid: Mapping[str, Mapping[str, Any]],
          field: str = "model.layer_pattern") -> tuple[LayerSpec, ...]:
    """`pattern`'s entries, each repeated `*N` times, in order (module docstring).

    valid: each NAME a pattern may use -> its settings and their defaults (whose types read
    the values). An unknown name, an unknown key, a malformed entry or repetition: one-line
    ConfigError naming the entry and `field`, the config field that holds the pattern.
    """
    specs: list[LayerSpec] = []
    for raw in split_top(pattern, "+"):
        entry = raw.strip()
        match = _ENTRY.match(entry)
        if not entry or match is None:
            raise ConfigError(
                f"{field}={pattern!r}: entry {entry!r} is not NAME, "
                "NAME(KEY=VALUE,...) or either followed by *N (e.g. rope(theta=1e4,window=1024)*5)")
        name = match["name"]
        if name not in valid:
            raise unknown(f"encoding in {field}", name, valid)
        settings = () if match["settings"] is None else _settings(
            entry, name, match["settings"], valid[name], field)
        repeat = match["repeat"]
        if repeat is not None and not (repeat.isdigit() and int(repeat) >= 1):
            raise ConfigError(f"{field} entry {entry!r}: the repetition *{repeat} "
                              "must be a whole number >= 1")
        text = entry if repeat is None else entry[:entry.rindex("*")].strip()
        specs += [LayerSpec(name, settings, text)] * (1 if repeat is None else int(repeat))
    return tuple(specs)


def written(specs: tuple[LayerSpec, ...]) -> str:
    """`specs` as a pattern, runs of one entry as `TEXT*N` (rope*3+none): the short form of
    many layers in a message."""
    runs: list[list] = []
    for spec in specs:
        if runs and runs[-1][0] == spec.text:
            runs[-1][1] += 1
        else:
            runs.append([spec.text, 1])
    return "+".join(text if count == 1 else f"{text}*{count}" for text, count in runs)
