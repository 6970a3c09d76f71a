"""Loading a config file (`--config=FILE:ARG` calls FILE's get_config(ARG), as ml_collections'
config flags do) and applying `--config.a.b=v` overrides, typed as the field each replaces."""

from __future__ import annotations

import contextlib
import difflib
import importlib.util
import inspect
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import ml_collections
from absl import flags
from ml_collections import config_flags

from posjax import data, registry
from posjax.config.args import STAGE_COUNTS, absolute_fields, arg_keys, arg_pairs
from posjax.config.base import SCHEDULE_PARTS, schedule_fields
from posjax.config.fields import EVAL_FIELDS, TRAIN_FIELDS, field_section
from posjax.errors import ConfigError, did_you_mean, module_not_found, raised_in
from posjax.models.pattern import BOOLEAN_WORDS


def shown(value) -> str:
    """A config or flag value as a user would type it (true, a,b, none)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(map(str, value)) or "none"
    return "none" if value is None else str(value)


def _config_not_found(path: str) -> ConfigError:
    """A config file that is not there: where it was looked for, and posjax's own file of
    that name (`configs/lm.py` typed outside the checkout) or its config folder."""
    if Path(path).is_dir():
        inside = sorted(p.name for p in Path(path).glob("*.py") if not p.name.startswith("_"))
        return ConfigError(f"--config={path} is a folder: give a config file" + (
            f" in it ({', '.join(inside)})" if inside else
            " (one that defines get_config(arg)); it has no .py file"))
    where = f"config file {path!r} not found" + (
        "" if Path(path).is_absolute() else f" in {Path.cwd()}")
    file, comma, arg = path.partition(",")
    if comma and file.endswith(".py") and Path(file).is_file():
        return ConfigError(f"{where}: a colon starts the config arg: --config={file}:{arg}")
    ours = registry.posjax_configs()
    if ours is None:
        return ConfigError(f"{where}: give the path of a config file (one that defines "
                           "get_config(arg))")
    named = ours.parent / path
    if not Path(path).is_absolute() and named.is_file():
        return ConfigError(f"{where}: posjax's own is {named}; give that path")
    files = sorted(p.name for p in ours.glob("*.py") if not p.name.startswith("_"))
    name = Path(path).name
    near = (difflib.get_close_matches(name, files, n=1, cutoff=0.8)
            or difflib.get_close_matches(f"{name}.py", files, n=1, cutoff=0.8))
    example = ours / (near[0] if near else "lm.py")
    return ConfigError(f"{where}: give the path of a config file" + (
        f": did you mean {example}?" if near else
        f", e.g. {example} (posjax list configs lists {ours}'s)"))


def load_config_module(path: str) -> ModuleType:
    """Import a config file by path (as ml_collections' config flags do); it must define
    get_config(arg). Its folder, its project's root and posjax's checkout go on sys.path
    first (`registry.add_import_roots`), so it can import another config file
    (`from configs.lm import get_config`) or a module beside it."""
    if not Path(path).is_file():
        raise _config_not_found(path)
    if Path(path).suffix != ".py":  # importlib finds no loader for it
        raise ConfigError(f"config file {path} is not a Python file: give a .py file with "
                          "get_config(arg) (posjax list configs)")
    module = _executed(path, f"config file {path}")
    if not callable(getattr(module, "get_config", None)):
        raise ConfigError(f"config file {path} defines no get_config(arg): it must define "
                          "get_config(arg) returning the run's ml_collections.ConfigDict")
    return module


def call_sweep(module: ModuleType, add, arg: str) -> None:
    """The config file's `sweep(add, arg)`, or `sweep(add)` where it takes no arg (the
    arg still reaches every run's get_config): both forms plan the same runs."""
    kinds = [p.kind for p in inspect.signature(module.sweep).parameters.values()]
    positional = sum(k in (inspect.Parameter.POSITIONAL_ONLY,
                           inspect.Parameter.POSITIONAL_OR_KEYWORD) for k in kinds)
    if positional >= 2 or inspect.Parameter.VAR_POSITIONAL in kinds:
        module.sweep(add, arg)
    else:
        module.sweep(add)


def load_user_module(path: str, flag: str) -> ModuleType:
    """Import a Python file of the user's own code by path (`flag`, e.g. --import, named in
    errors), as a config file is imported, for the encodings, evaluations and families it
    registers; run inside `registry.loading(path)`."""
    if Path(path).is_dir():
        inside = sorted(p.name for p in Path(path).glob("*.py"))[:4]
        raise ConfigError(f"{flag}={path} is a folder: give the .py file in it that registers "
                          f"your code" + (f" ({', '.join(inside)})" if inside else ""))
    if not Path(path).is_file() or Path(path).suffix != ".py":
        raise ConfigError(f"{flag}={path}: no such Python file" + (
            "" if Path(path).is_absolute() else f" in {Path.cwd()}") + ": give the .py file "
            "that registers your code")
    return _executed(path, f"{flag}={path}")


def _executed(path: str, where: str) -> ModuleType:
    """The module of the Python file `path`, executed with its import roots on sys.path
    (`registry.add_import_roots`); what failed is a one-line ConfigError naming `where`."""
    check_syntax(path, where)
    roots = registry.add_import_roots(path)
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    try:
        with _no_bytecode():
            spec.loader.exec_module(module)
    except ModuleNotFoundError as e:  # an import of the user's own module
        raise module_not_found(where, e, roots) from e
    except Exception as e:  # a bug at the top level of the file or of a module it imports
        raise ConfigError(f"{where}: loading it raised {raised_in(e)}; fix it there") from e
    return module


@contextlib.contextmanager
def _no_bytecode():
    """Compile a config file (and the modules it imports first) without writing bytecode: no
    __pycache__ appears beside the user's files, and no cached .pyc outlives an edit made
    within the same second at the same size."""
    before, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        yield
    finally:
        sys.dont_write_bytecode = before


def check_syntax(path: str, where: str | None = None) -> None:
    """A config file (`where`: another file of the user's, named so) that does not parse
    as Python is one line naming where."""
    try:
        compile(Path(path).read_text(), path, "exec")
    except SyntaxError as e:
        raise ConfigError(f"{where or f'config file {path}'} has a syntax error at line "
                          f"{e.lineno}: {e.msg}; fix the file") from None


def _field_path(override: str) -> str:
    """The field an override names: "train.stages" of `--config.train.stages=((64,4,9),)`."""
    return override[len("--config."):].split("=", 1)[0]


def _declared_type(config, override: str) -> type | None:
    """The type the field `--config.a.b=v` names was declared with: its value's, or a
    placeholder's (model.mlp_bias: bool, unset); None for a plain unset field."""
    *sections, key = _field_path(override).split(".")
    node = config
    for section in sections:
        node = node[section]
    declared = node.get_type(key)
    return None if declared is type(None) else declared


def _boolean_spelled_for_absl(override: str, declared: type | None) -> str:
    """`--config.model.qk_norm=yes` as absl reads booleans (true/false), so an override takes
    the words a config arg takes (`qk_norm=yes`)."""
    key, _, text = override.partition("=")
    if declared is bool and text.lower() in BOOLEAN_WORDS:
        return f"{key}={str(BOOLEAN_WORDS[text.lower()]).lower()}"
    return override


def override_target(config, override: str):
    """The value `--config.a.b=v` replaces; a one-line error when it names a key the config
    lacks."""
    path = _field_path(override)
    node, parts = config, path.split(".")
    for depth, key in enumerate(parts):
        where = ".".join(["config", *parts[:depth]])
        if not hasattr(node, "keys"):
            raise ConfigError(f"--config.{path}: {where} is a value, not a section")
        keys = list(node.keys())
        if key not in keys and not keys:
            hint = (" (add entries with the config arg evals=TYPE@EVERY, e.g. evals=text@100)"
                    if where == "config.evals" else "")
            raise ConfigError(f"--config.{path}: {where} is empty, so it has no key "
                              f"{key!r}{hint}")
        if key not in keys and where == "config.train" and key in STAGE_COUNTS:
            raise ConfigError(f"--config.{path}: config.train has no key {key!r}: each of "
                              f"train.stages is (seq_len, batch_size, steps); give {key}=N in "
                              "--config's arg (configs/lm.py:smoke,steps=50), which sets them")
        if key not in keys:
            raise ConfigError(f"--config.{path}: {where} has no key {key!r}"
                              f"{did_you_mean(key, keys)}; valid: {', '.join(sorted(keys))}")
        node = node[key]
    return node


# How an error names the type of a config value.
_TYPE_WORDS = {bool: "true or false", int: "a whole number (int)", float: "a number (float)",
               str: "text (str)", tuple: "a tuple"}


def _bad_override(error: flags.Error, replaced: dict[str, object]) -> ConfigError:
    """absl's complaint about an override's value as one line naming the key, the type it
    takes and its current value as an example."""
    reason = str(error).splitlines()[0]
    override = next((o for o in replaced if f"flag {o.split('=', 1)[0]}=" in reason), None)
    if override is None:
        return ConfigError(reason)
    key, _, text = override.partition("=")
    current = replaced[override]
    if hasattr(current, "keys"):  # a whole section: its value is no one-line example
        field = next(iter(current.keys()), "KEY")
        return ConfigError(f"{key}={text}: {key[2:]} is a section, not a value: set one of "
                           f"its fields, e.g. {key}.{field}=... (posjax list fields)")
    kind = _TYPE_WORDS.get(type(current), f"a {type(current).__name__}")
    example = (str(current).replace(" ", "") if isinstance(current, tuple) and any(
        isinstance(item, tuple) for item in current)  # stages: ((128,4,6),), as typed
        else shown(list(current) if isinstance(current, tuple) else current))
    return ConfigError(f"{key}={text}: {key[2:]} takes {kind}, not {text!r}; e.g. "
                       f"{key}={example} (its value now)")


def check_not_given_twice(arg: str, overrides: Sequence[str]) -> None:
    """Refuse a field set both by the arg (`learning_rate=5e-3`, any model, train or eval
    field by its name) and by an override (`--config.train.learning_rate=1e-3`): the
    override would win without a word."""
    given = arg_pairs(arg)
    for override in overrides:
        name, _, value = override.removeprefix("--").removeprefix("config.").partition("=")
        section, _, key = name.partition(".")
        if key in given and field_section(key) == section:
            raise ConfigError(f"{section}.{key} is given twice, as the config arg's "
                              f"{key}={given[key]} and as --config.{name}={value}: give it "
                              "once")


def configured(spec: str, overrides: Sequence[str]) -> ml_collections.ConfigDict:
    """The config of `--config=FILE:ARG` (FILE's get_config(ARG)) with every `--config.a.b=v`
    of `overrides` applied, typed as the field it replaces; a bad file, arg, key or value is a
    one-line ConfigError."""
    path, _, arg = spec.partition(":")
    check_not_given_twice(arg, overrides)
    # What the file registers (its own encodings, data, ...) is recorded by a run trained
    # from it and imported again by every later command on the run (posjax.registry).
    with registry.loading(path):
        module = load_config_module(path)
        try:
            config = module.get_config(*_arg_taken(module.get_config, path, arg))
        except ConfigError:
            raise
        except Exception as e:  # the file's own complaint about its arg, or a bug in it
            raise ConfigError(f"config file {path}: get_config({arg!r}) raised {raised_in(e)}; "
                              "fix the arg or the file") from e
    if not isinstance(config, ml_collections.ConfigDict):
        raise ConfigError(f"config file {path}: get_config({arg!r}) returned a "
                          f"{type(config).__name__}, not an ml_collections.ConfigDict; fix the "
                          "file")
    _check_fields_known(config, path, arg)
    return absolute_fields(overridden(config, overrides, arg))


def _check_fields_known(config, path: str, arg: str) -> None:
    """A one-line ConfigError where the file's config sets a train, eval or data field
    posjax has none of (`c.train.learning_rat = 0.5`, `c.train.steps = 8`): nothing would
    read it, yet config.json would record it as the run's setting. config.model and
    config.encoding are checked where they are built."""
    if "data" in config and "dataset" in config.data:
        known_data = data.kinds.config_fields(config.data.dataset)
    else:
        known_data = None
    sections = {"train": {*TRAIN_FIELDS, "stages"}, "eval": set(EVAL_FIELDS),
                "data": known_data}
    for section, known in sections.items():
        if known is None or section not in config:
            continue
        listed = "posjax list datasets" if section == "data" else "posjax list fields"
        for key in config[section]:
            if key not in known:
                raise ConfigError(
                    f"config file {path}: get_config({arg!r}) sets config.{section}.{key}, "
                    f"a field posjax does not have{did_you_mean(key, known)}, so nothing "
                    f"would read it; fix the file (`{listed}` lists the fields)")


def _arg_taken(get_config, path: str, arg: str) -> tuple[str, ...]:
    """What `get_config` is called with: (arg,), or () for a get_config() of no parameter
    (as ml_collections' examples write it) given no arg; a one-line ConfigError for an arg
    it cannot take."""
    try:
        inspect.signature(get_config).bind(arg)
        return (arg,)
    except TypeError:
        pass
    except ValueError:  # no signature to read (a builtin): call it as posjax does
        return (arg,)
    if not arg:
        return ()
    raise ConfigError(f"config file {path}: its get_config takes no arg, and the arg {arg!r} "
                      f"was given: drop ':{arg}' from --config, or give get_config a parameter "
                      "(def get_config(arg): ...)")


def overridden(config: ml_collections.ConfigDict, overrides: Sequence[str],
               arg: str = "") -> ml_collections.ConfigDict:
    """`config` (made by its file's get_config(`arg`)) with every `--config.a.b=v` of
    `overrides` applied, typed as the field it replaces; a bad key or value is a one-line
    ConfigError."""
    before = config.copy_and_resolve_references()
    replaced = {override: override_target(config, override) for override in overrides}
    for override in overrides:  # the old encoding's hyperparameters would stay beside it
        key, _, name = override.partition("=")
        if key == "--config.encoding.name" and name != config.encoding.name:
            raise ConfigError(
                f"{override} would keep {config.encoding.name}'s hyperparameters in "
                f"config.encoding: choose the encoding in the config's arg instead "
                f"(FILE:{arg + ',' if arg else ''}encoding={name})")
    declared = {override: _declared_type(config, override) for override in overrides}
    unset = next((o for o in overrides if declared[o] is None), None)
    if unset is not None:  # absl overrides no field of no type
        key, _, text = unset.partition("=")
        raise ConfigError(f"{unset}: {key[2:]} is unset (None) with no type to read {text!r} "
                          f"as: give it in the config's arg instead "
                          f"(FILE:{arg + ',' if arg else ''}{key.rsplit('.', 1)[1]}={text})")
    argv = ["posjax", *(_boolean_spelled_for_absl(o, declared[o]) for o in overrides)]
    fv = flags.FlagValues()
    # Overrides are looked up in this argv, not sys.argv, so main(argv) works in-process.
    config_flags.DEFINE_config_dict("config", config, flag_values=fv, sys_argv=argv)
    try:
        fv(argv)
    except flags.Error as e:
        raise _bad_override(e, replaced) from None
    for override in overrides:  # JSON has no infinity: config.json would say null
        value = override_target(fv.config, override)
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{override.split('=', 1)[0]}={value}: give a finite number")
        _check_data_field_read(fv.config, override)
    given = {_field_path(override) for override in overrides}
    _schedule_follows_stages(before, fv.config, given, arg)
    _restarts_follow_stages(before, fv.config, given)
    _evals_follow_lengths(before, fv.config, given)
    return fv.config


def _schedule_follows_stages(before, config, overridden: set[str], arg: str) -> None:
    """Where `--config.train.stages` gives another number of steps than the config file's,
    the warm-up, logging and checkpoint cadence the arg and the overrides leave to the size
    (base.schedule_fields: a smoke run at 2000 steps checkpointed every 6) move to that
    schedule for the new steps, as `steps=N` in the arg would; a cadence key given in
    either stays, and none moves where the file set them otherwise. overridden: the fields
    the overrides give ("train.stages")."""
    given = overridden | {f"train.{key}" for key in arg_keys(arg)}
    steps = [_steps(c.train.get("stages", ())) for c in (before, config)]
    if "train.stages" not in given or None in steps or steps[0] == steps[1] or not steps[1]:
        return
    smoke = bool(config.train.get("smoke"))
    for parts in SCHEDULE_PARTS:
        left = {k: v for k, v in schedule_fields(steps[0], smoke, parts).items()
                if f"train.{k}" not in given}
        if all(before.train.get(k) == v for k, v in left.items()):
            config.train.update({k: schedule_fields(steps[1], smoke, parts)[k] for k in left})
            return


def _restarts_follow_stages(before, config, given: set[str]) -> None:
    """Where the config file restarts the learning-rate schedule at its stages' ends (DroPE's
    drope_restart) and `--config.train.stages` moves those ends, the restarts move with them
    (they stayed at the file's steps, inside a stage); restarts given as an override stay.
    given: the fields the overrides give."""
    if "train.stages" not in given or "train.schedule_restarts" in given:
        return
    ends = [_ends(c.train.get("stages", ())) for c in (before, config)]
    restarts = tuple(before.train.get("schedule_restarts", ()) or ())
    if restarts and None not in ends and restarts == ends[0] and len(ends[0]) == len(ends[1]):
        config.train.schedule_restarts = ends[1]


def _evals_follow_lengths(before, config, given: set[str]) -> None:
    """config.evals entries that score the run's eval lengths (`add_evals`) score those an
    override gives (`--config.eval.lengths`), unless it gives an entry's own lengths too.
    given: the fields the overrides give."""
    if "eval.lengths" not in given:
        return
    for kind, entry in config.get("evals", {}).items():
        if (f"evals.{kind}.lengths" not in given
                and tuple(entry.get("lengths", ())) == tuple(before.eval.lengths)):
            entry.lengths = tuple(config.eval.lengths)


def _ends(stages) -> tuple[int, ...] | None:
    """The steps at which each stage of `stages` but the last ends, None where they are not
    written as (seq_len, batch_size, steps)."""
    try:
        steps = [int(stage[2]) for stage in stages]
    except (TypeError, IndexError, ValueError):
        return None
    return tuple(sum(steps[:k + 1]) for k in range(len(steps) - 1))


def _steps(stages) -> int | None:
    """The steps of `stages` ((seq_len, batch_size, steps), ...), None where they are not
    written so (`(128,4,6)`, refused in its own words by the trainer's check)."""
    try:
        return sum(int(stage[2]) for stage in stages)
    except (TypeError, IndexError, ValueError):
        return None


def _check_data_field_read(config, override: str) -> None:
    """A --config.data.KEY override that the run's dataset or tokenizer never reads
    (text_glob on stdlib_text, sentencepiece_model with the bytes tokenizer): a one-line
    ConfigError, as config.json would record a setting unused."""
    path = _field_path(override).split(".")
    if len(path) != 2 or path[0] != "data" or path[1] == "dataset":
        return
    takers = data.tokenizers.readers(path[1])
    if takers and config.data.tokenizer not in takers:
        raise ConfigError(f"--config.data.{path[1]} is read by tokenizer {' or '.join(takers)}, "
                          f"not by tokenizer={config.data.tokenizer}: drop it, or add "
                          f"--config.data.tokenizer={takers[0]}")
    dataset = config.data.dataset
    kind = data.kinds.kind_class(dataset)
    if path[1] not in kind.fields_read(config.data):
        takers = [name for name in data.kinds.names() if path[1] in
                  data.kinds.kind_class(name).fields_read(config.data)]
        raise ConfigError(f"--config.data.{path[1]} is read by dataset "
                          f"{' or '.join(takers) or 'none'}, not by dataset={dataset}: drop it"
                          + (f", or add --config.data.dataset={takers[0]}" if takers else ""))
