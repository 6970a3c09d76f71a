"""Registry of position encodings: `names()` and `get(name, **hparams)`.

Every encoding module registers its classes with `@register("name")`; the names are what
users type in a config (`encoding=NAME`), and variants are hyperparameters, not new names.
"""

from __future__ import annotations

import dataclasses
import inspect
import numbers

from posjax.encoders.base import Dims, Encoding, Params
from posjax.errors import ConfigError, did_you_mean
from posjax.registry import Registry, import_package_modules

_REGISTRY = Registry("encoding", own="register it in your config file or a module it "
                     "imports (docs/extending.md); posjax train, sweep, extrapolate, list and "
                     "plot take --import=FILE")


def register(name: str):
    """Class decorator: make an Encoding subclass (a frozen dataclass, as Encoding is)
    available as `get(name)`; anything else is refused here, at the user's decorator, not
    when a config first builds it."""

    def wrap(cls):
        if not (isinstance(cls, type) and issubclass(cls, Encoding)):
            raise TypeError(
                f"encoding {name!r}: register takes a frozen dataclass that subclasses "
                f"posjax.encoders.Encoding, got {getattr(cls, '__qualname__', cls)!r}; put "
                "@encoders.register(...) above @dataclasses.dataclass(frozen=True) on a class "
                "(docs/extending.md)")
        hidden = _undeclared_fields(cls)
        if hidden:
            raise TypeError(
                f"encoding {name!r}: {', '.join(hidden)} of {cls.__qualname__} is no dataclass "
                "field (no config arg sets it, and a saved run does not record it): put "
                "@dataclasses.dataclass(frozen=True) on the class, under @encoders.register")
        required = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]
        if required:
            raise TypeError(
                f"encoding {name!r}: {', '.join(required)} of {cls.__qualname__} has no default "
                "value, and a config builds the encoding from its defaults and the arg: give "
                "each a default (scale: float = 1.0; a list as a tuple, slopes: tuple = "
                "(0.5, 0.25), not a default_factory)")
        return _REGISTRY.register(name)(cls)

    return wrap


def _undeclared_fields(cls: type) -> list[str]:
    """The names `cls` annotates itself that are no field of its dataclass: a subclass of
    Encoding not decorated with @dataclasses.dataclass (ClassVars aside)."""
    fields = {f.name for f in dataclasses.fields(cls)}
    return [key for key, kind in inspect.get_annotations(cls).items()
            if key not in fields and "ClassVar" not in str(kind)]


# A name that is no encoding but means something elsewhere: refer(name, where it goes).
refer = _REGISTRY.refer


def names() -> tuple[str, ...]:
    """All registered encoding names, in registration order."""
    return tuple(_REGISTRY)


def names_of(kind: type[Encoding]) -> tuple[str, ...]:
    """The registered names whose encodings are a `kind` (a subclass of it), in names() order."""
    return tuple(name for name in _REGISTRY if issubclass(_lookup(name), kind))


def hparams(name: str) -> dict[str, object]:
    """The hyperparameters of encoding `name` with their defaults."""
    return {f.name: f.default for f in dataclasses.fields(_lookup(name))}


def _lookup(name: str) -> type[Encoding]:
    return _REGISTRY.lookup(name)


def get(name: str, **hparams) -> Encoding:
    """Build encoding `name` with hyperparameters; unknown names or keys are one-line errors."""
    cls = _lookup(name)
    fields = {f.name for f in dataclasses.fields(cls)}
    for key in hparams:
        if key not in fields:
            valid = ", ".join(sorted(fields)) or "none"
            raise ConfigError(
                f"encoding {name!r} has no hyperparameter {key!r}{did_you_mean(key, fields)}; "
                f"its hyperparameters: {valid}"
            )
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    switches = {f.name for f in dataclasses.fields(cls) if _is_switch(f)}
    for key, value in hparams.items():
        if key in switches and not isinstance(value, bool) and not (
                value is None and defaults[key] is None):
            unset = " (or leave it out, for its default)" if (
                defaults[key] is None) else ""
            raise ConfigError(f"encoding {name!r} {key}={value!r} is not a boolean: give "
                              f"{key}=true or {key}=false{unset}")
        number = isinstance(defaults[key], numbers.Real) and not isinstance(defaults[key], bool)
        if number and not (isinstance(value, numbers.Real) and not isinstance(value, bool)):
            raise ConfigError(f"encoding {name!r} {key}={value!r} is not a number: give {key} "
                              f"a number (its default is {defaults[key]})")
        if isinstance(defaults[key], tuple):  # config.json holds a tuple as a JSON list
            if not isinstance(value, (tuple, list)):
                raise ConfigError(f"encoding {name!r} {key}={value!r} is not a list of values: "
                                  f"give a tuple (its default is {defaults[key]})")
            hparams[key] = _as_tuples(value)
    return cls(**hparams)


def _is_switch(field: dataclasses.Field) -> bool:
    """Whether `field` takes a boolean: its default is one, or its annotation is `bool |
    None` (None: decided elsewhere, e.g. T5's direction by the model). Any other value would
    be read by truthiness (0 or "no" as one choice in one place, the other in another)."""
    return isinstance(field.default, bool) or (
        field.default is None and str(field.type).replace(" ", "") in ("bool|None", "None|bool"))


def _as_tuples(value):
    """`value` with every list in it a tuple (hashable, as a frozen dataclass's field)."""
    return tuple(map(_as_tuples, value)) if isinstance(value, (tuple, list)) else value


# Every module of the package registers its encodings on import (names() order: module name,
# then order in the module).
import_package_modules(__name__, __path__)

__all__ = ["Dims", "Encoding", "Params", "get", "hparams", "names", "names_of", "register"]
