"""The sections every config has, and the model sizes and step schedules config files share."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ml_collections

from posjax import data, encoders
from posjax.config.args import arg_keys, dataset_fields, encoding_config
from posjax.config.fields import (
    EVAL_DEFAULTS,
    EVALS_OPTIONS,
    MODEL_DEFAULTS,
    MODEL_PLACEHOLDERS,
    TRAIN_DEFAULTS,
)
from posjax.errors import ConfigError, unknown


def base_config(
    *,
    encoding: str,
    encoding_overrides: Mapping[str, Any],
    kind: str,
    dataset: str,
    stages: tuple[tuple[int, int, int], ...],
    data_overrides: Mapping[str, Any] = (),
    smoke: bool = False,
) -> ml_collections.ConfigDict:
    """The sections every config has, with this project's small-model defaults;
    data_overrides: values of `dataset`'s own config.data fields (`dataset_fields`; other
    keys are ignored, so a parsed arg can be passed whole); smoke: a smoke run's config
    (train.smoke: its plots and tables say it checks the set-up only)."""
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
    config.train.smoke = smoke
    config.eval = ml_collections.ConfigDict(EVAL_DEFAULTS)
    config.evals = ml_collections.ConfigDict()  # scored while training: add_evals
    return config


def add_evals(config, spec: str) -> None:
    """config.evals entries from a config arg: "TYPE@EVERY" joined by "+" ("text@100+
    passkey@200"), each named by its type and scoring the run's config.eval lengths; options
    are set with --config.evals.TYPE.KEY=V (posjax.eval.during)."""
    for item in spec.split("+") if spec else ():
        kind, sep, every = item.partition("@")
        if sep and every.isdigit() and int(every) < 1:
            raise ConfigError(f"evals={spec!r}: {kind}@{every} scores every {every} steps: "
                              "give a whole number of steps >= 1")
        if not sep or not every.isdigit():
            raise ConfigError(f"evals={spec!r}: write each entry as TYPE@EVERY_STEPS, e.g. "
                              "evals=text@100+passkey@200 (posjax list evaluations)")
        if kind in config.evals:  # the second would replace the first
            raise ConfigError(f"evals={spec!r} gives {kind} twice: give each evaluation once "
                              "(its options, lengths included, with --config.evals."
                              f"{kind}.KEY=V)")
        config.evals[kind] = ml_collections.ConfigDict(
            dict(type=kind, every_steps=int(every), **EVALS_OPTIONS.get(kind, {}),
                 lengths=tuple(config.eval.lengths)))


# The model sizes of config files with a `size` arg: model widths plus the size's batch and
# steps. Every such file has this smoke size (seconds, for tests).
SMOKE_SIZE = dict(d_model=32, num_layers=1, num_heads=2, head_dim=16, mlp_dim=64,
                  batch_size=4, steps=6)
MODEL_SIZE_KEYS = ("d_model", "num_layers", "num_heads", "head_dim", "mlp_dim")


def check_sweep_encodings(a, arg: str) -> None:
    """`encodings=A+B`, the arg a file's sweep() reads for its runs, checked in one run's
    `arg` (parsed as `a`): each a registered encoding, and with `encoding=` one of them, as
    the sweep's own runs have; alone (`posjax train ...:encodings=rope+alibi`) it would train
    the file's default encoding without a word."""
    if "encodings" not in arg_keys(arg):
        return
    for name in a.encodings:
        if name not in encoders.names():
            raise unknown("encoding in encodings", name, encoders.names())
    if "encoding" not in arg_keys(arg) or a.encoding not in a.encodings:
        raise ConfigError(f"encodings={'+'.join(a.encodings)} names the runs of posjax sweep, "
                          "one per encoding; one run trains one: give encoding=NAME, one of "
                          "them, or drop encodings=")


def check_one_size(a, arg: str) -> None:
    """Refuse `smoke` with another size= in `arg` (parsed as `a`): smoke picks its own size,
    and the size= the user gave would be ignored without a word."""
    if a.smoke and a.size != "smoke" and "size" in arg_keys(arg):
        raise ConfigError(f"config args smoke and size={a.size} both pick the size (smoke is "
                          "size=smoke): give one of them")


def size_budget(a, sizes: Mapping[str, Mapping[str, int]],
                arg: str) -> tuple[str, dict, int, int]:
    """(size name, its entry, batch size, steps) for `arg` parsed as `a`, with the keys size,
    smoke, batch_size and steps (0 = the size's own); smoke=true picks "smoke", and with
    another size= in `arg` too is a ConfigError (`check_one_size`)."""
    check_one_size(a, arg)
    size = "smoke" if a.smoke else a.size
    check_size(size, sizes)
    dims = dict(sizes[size])
    return size, dims, a.batch_size or dims["batch_size"], a.steps or dims["steps"]


def check_size(size: str, sizes: Mapping) -> None:
    """Refuse a size no entry of `sizes` names, in one line listing them (`size=smoke`
    where a file's quick try is the bare word alone says so)."""
    if size not in sizes:
        hint = ("; the quick try is the bare word smoke in the arg" if size == "smoke" else "")
        raise ConfigError(f"{unknown('size', size, sizes)}{hint}")


# The `parts` config files pass step_schedule (lm.py and most: 4; mlm.py: 8).
SCHEDULE_PARTS = (4, 8)


def step_schedule(config, steps: int, *, parts: int = 4) -> None:
    """The step schedule of a `steps`-step run (`schedule_fields`), set in config.train.
    These are the size's defaults: `--config.train.KEY=V` is applied after the config file
    and wins (a warm-up that does not end before the run is refused: optim.check), and
    `--config.train.stages` of another length moves them along (`files.overridden`)."""
    config.train.update(schedule_fields(steps, bool(config.train.get("smoke")), parts))


def schedule_fields(steps: int, smoke: bool, parts: int) -> dict[str, int]:
    """Warm-up min(100, steps / 10), logging every min(25, steps / parts) and a checkpoint
    every steps / parts steps, a smoke run's at its end only: one save costs more than a
    smoke step."""
    return {"warmup_steps": min(100, steps // 10),
            "checkpoint_every_steps": steps if smoke else max(steps // parts, 1),
            "log_every_steps": max(min(25, steps // parts), 1)}


def apply_size(config, dims: Mapping[str, int], steps: int) -> None:
    """Set the model widths of `dims` and the step schedule of a `steps`-step run
    (`step_schedule`)."""
    for key in MODEL_SIZE_KEYS:
        config.model[key] = dims[key]
    step_schedule(config, steps)


def doubling_lengths(train_len: int, max_factor: int, arg: str) -> tuple[int, ...]:
    """train_len * 1, 2, 4, ... up to train_len * max_factor (the extrapolation grid);
    ConfigError in the words of the config's `arg` that gives max_factor where that gives
    no length."""
    if max_factor < 1:
        raise ConfigError(f"{arg}={max_factor} gives no evaluation length: give 1 or more "
                          f"(the lengths double from the training length up to {arg} times it)")
    lengths, factor = [], 1
    while factor <= max_factor:
        lengths.append(train_len * factor)
        factor *= 2
    return tuple(lengths)
