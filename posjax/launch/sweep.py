"""Sweeps: expand a config file's `sweep(add, arg)` into runs and run them, resumably.

Each `add(key=value, ...)` call becomes one run: its arg string is the sweep's base arg with
those keys added (a key the base arg sets to another value is refused: the user's value is
never dropped), its directory SWEEPDIR/runs/<name>, and its command line
`posjax train --config=FILE:ARG --workdir=... --extrapolate` (training, then the evaluation
`posjax extrapolate` would write, in one process). With `seeds=N` and `vmap_seeds`, the N
seeds of a point are one job, one command, one vmapped program (`posjax train --seeds`),
each seed still its own run, directory and sweep.json row. `sweep.json`
records every run's arg, command, status (pending / running / done / failed + error /
interrupted) and result summary; it is rewritten atomically after every change. Re-running the
same sweep skips finished runs and resumes the others from their checkpoints; a failed run
does not stop the others. The runs execute on an executor (posjax.launch.executors: local,
inprocess, ray, slurm); while a sweep runs, its directory is locked. Planning calls the config
file's get_config once per run (`expand`); each run's own command calls it once more.
`--grid=KEY=V1,V2` flags (`grid_points`) replace the file's sweep() with the cartesian product
of their values.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import itertools
import os
import re
import shlex
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import ml_collections
from tqdm.auto import tqdm

from posjax import data, fileio
from posjax.config import (
    changes_text,
    config_changes,
    load_config_module,
    overridden,
    override_target,
    read_config_json,
)
from posjax.config.args import (
    absolute_override,
    absolute_paths,
    arg_pairs,
    arg_text,
    check_given_once,
    split_values,
)
from posjax.config.files import call_sweep, check_not_given_twice
from posjax.errors import ConfigError, missing_folder
from posjax.launch.executors import EXECUTORS, Job, Options, Outcome, runs_show_their_bars
from posjax.models.pattern import split_top, unquoted
from posjax.runlock import RunLock


@dataclasses.dataclass(frozen=True)
class Run:
    """One point of a sweep."""

    name: str  # directory name: the add() keys, e.g. "encoding=rope,theta=500"
    arg: str  # the full config arg string
    seed: int | None = None  # of a sweep with seeds=N > 1, whose run names end in seed=K
    point: str = ""  # the name without seed=K: what the seeds of one point share
    # get_config(arg), called once when the sweep is planned (`expand`) and reused after
    config: ml_collections.ConfigDict | None = dataclasses.field(
        default=None, compare=False, repr=False)


def _merge_arg(base: str, keys: dict) -> str:
    parts = {}
    for pair in split_values(base):  # a quoted or JSON value keeps its commas
        key, _, value = pair.partition("=")
        parts[key] = pair
    for key, value in keys.items():
        parts[key] = f"{key}={arg_text(value)}"
    return ",".join(parts.values())


def _same(text: str, value) -> bool:
    """Whether the arg's `text` and a run's `value` say the same (1e4 and 10000.0 do)."""
    shown = arg_text(value)
    if text.lower() == shown.lower():
        return True
    try:
        return float(text) == float(shown)
    except ValueError:
        return False


def _check_kept(config_file: str, module, given: dict[str, str], added: list[dict]) -> None:
    """A key of the arg that the file's sweep() sets to another value in a run is refused: the
    user's value would be dropped (study=theta,theta=5e5 trained 100..1e6, never 5e5), unless
    the file's sweep reads that key from the arg itself (its SWEEP_READS: algorithmic.py's
    randomize_positions=M puts runs at M beside controls at 0)."""
    for key, text in given.items():
        if key in getattr(module, "SWEEP_READS", ()):
            continue
        replaced = [keys for keys in added if key in keys and not _same(text, keys[key])]
        if replaced:
            keys = replaced[0]
            raise ConfigError(
                f"{Path(config_file).name}'s sweep sets {key}={arg_text(keys[key])} in run "
                f"{_name(keys)}, "
                f"which would replace --config's {key}={text}: drop {key}= from the arg, "
                f"or sweep your own values with --grid={key}=V1,V2 instead of the file's sweep")


def check_overrides(runs: list[Run], overrides) -> None:
    """Apply every `--config.a.b=v` to each run's config (a bad key or value is one line) and
    refuse an override that would make runs of different names train the same config: it
    replaces what the sweep sets per run (`--config.encoding.theta=3` in a theta sweep would
    train every point at 3 under the points' names), or a field the arg sets too."""
    trained: dict[str, str] = {}
    checked: set[str] = set()
    for run, config in zip(runs, _configs_given(runs, overrides), strict=True):
        _check_once(config, checked)  # what train refuses, with the overrides
        same = trained.setdefault(config.to_json(sort_keys=True), run.name)
        if same == run.name:
            continue
        other = next(r for r in runs if r.name == same).config
        override = next((o for o in overrides if override_target(other, o)
                         != override_target(run.config, o)), overrides[0])
        raise ConfigError(
            f"{override} would make runs {same} and {run.name} the same: it replaces "
            f"{override[len('--config.'):].partition('=')[0]}, which the sweep sets per run "
            f"({arg_text(override_target(other, override))}, "
            f"{arg_text(override_target(run.config, override))}); drop it, or sweep your own "
            "values with --grid")
    for run in runs:  # after: a run's seed=K is the sweep's, not given by the user
        check_not_given_twice(run.arg, overrides)


# --grid keys that are no config arg of a run, each with its one-line refusal.
GRID_REFUSED = {
    "seeds": "--grid={text}: seeds=N is the sweep's seeds axis, not a run's arg: put seeds=N "
             "in --config's arg (every grid point then runs N seeds)",
    "seed": "--grid={text}: seeds are the sweep's seeds axis, whose runs count as one "
            "point's seeds: put seeds=N in --config's arg (and seed=S to start from S)",
    "study": "--grid={text}: a study is a config file's own sweep, which --grid replaces: run "
             "one study at a time without --grid (posjax list studies)",
}


def grid_points(grid, base_arg: str = "") -> list[dict[str, str]]:
    """The points of `--grid=KEY=V1,V2` flags: the cartesian product of their values (the
    first flag's key varying slowest), each {key: value text}. A key given twice, a key the
    base arg sets too, study= in the base arg (the file's sweep is not used) or a key in
    GRID_REFUSED is a one-line ConfigError; whether each key is a config arg, get_config
    says (`expand`)."""
    given, axes = arg_pairs(base_arg), {}
    for text in grid:
        key, sep, listed = (part.strip() for part in text.partition("="))
        values = split_values(listed)
        if not (key and sep and values):
            raise ConfigError(f"--grid={text}: write --grid=KEY=V1,V2 (e.g. "
                              "--grid=theta=1e4,5e5), one flag per key")
        if len(values) != len(split_top(listed, ",")):  # "1e4,,5e5" or "1e4,": a lost value?
            raise ConfigError(f"--grid={text} has an empty value: write each value once, "
                              f"with one comma between two, e.g. --grid={key}={','.join(values)}")
        if key in GRID_REFUSED:
            raise ConfigError(GRID_REFUSED[key].format(text=text))
        if key in axes:
            raise ConfigError(f"--grid gives {key} twice: put all its values in one "
                              f"--grid={key}=V1,V2")
        if key in given:
            raise ConfigError(f"--grid={text} and --config's arg ({key}={given[key]}) both set "
                              f"{key}: drop one of them")
        twice = next((v for k, v in enumerate(values) if v in values[:k]), None)
        if twice is not None:
            raise ConfigError(f"--grid={text} gives {key}={twice} twice: give each value once")
        axes[key] = values
    if "study" in given:
        raise ConfigError(f"--grid replaces the config file's own sweep, so study="
                          f"{given['study']} would be ignored: drop study= from --config's arg, "
                          "or drop --grid")
    return [dict(zip(axes, combo, strict=True)) for combo in itertools.product(*axes.values())]


def _grid_error(grid, run: Run, error: ConfigError) -> ConfigError:
    """get_config's complaint about a grid run, naming the --grid flag whose key it quotes
    (an unknown key's line lists the valid ones) or else the run."""
    message, found = str(error), []
    for text in grid:
        key = text.partition("=")[0].strip()
        places = [message.find(mark) for mark in (f"'{key}'", f"{key}=")]
        found += [(place, text) for place in places if place >= 0]
    flag = f"--grid={min(found)[1]}" if found else f"--grid run {run.name}"
    return ConfigError(f"{flag}: {message}")


def grid_notice(config_file: str, base_arg: str, grid, runs: list[Run]) -> str:
    """The one line `posjax sweep --grid` prints: its runs, and the file's own sweep() that
    it replaces with the runs that sweep would have had."""
    seeds, _, arg = _seeds(base_arg)
    axes = " x ".join([f"{len(split_values(text.partition('=')[2]))} "
                       f"{text.partition('=')[0].strip()}" for text in grid]
                      + [f"{seeds} seeds"] * (seeds > 1))
    module, own = load_config_module(config_file), []
    try:
        call_sweep(module, lambda **keys: own.append(_name(keys)), arg)
        per_point = (f" ({len(own)} point{'s' * (len(own) != 1)} x {seeds} seeds)"
                     if seeds > 1 and own else "")
        replaced = (f"would run {len(own) * seeds}{per_point}: {', '.join(own[:3])}"
                    f"{', ...' * (len(own) > 3)}" if own else "would run none")
    except Exception as e:  # noqa: BLE001 (whatever it would do, it is not used)
        replaced = "is absent" if not hasattr(module, "sweep") else f"raises {type(e).__name__}"
    count = f"{len(runs)} run" + "s" * (len(runs) != 1)
    return (f"posjax sweep: --grid gives {count} ({axes}) over {config_file}:"
            f"{base_arg}; the file's own sweep() is not used (it {replaced})")


def _seeds(base_arg: str) -> tuple[int, int, str]:
    """(seeds, first seed, the arg without `seeds=`): the sweep-level seeds axis."""
    pairs = split_values(base_arg)  # a quoted or JSON value keeps its commas
    given = [p.partition("=")[2] for p in pairs if p.partition("=")[0] == "seeds"]
    first = [p.partition("=")[2] for p in pairs if p.partition("=")[0] == "seed"]
    try:
        count, start = int(given[-1]) if given else 1, int(first[-1]) if first else 0
    except ValueError:
        raise ConfigError(f"seeds={given[-1]!r} and seed={first[-1:]} must be integers, "
                          "e.g. seeds=3") from None
    if count < 1:
        raise ConfigError(f"seeds={count} must be >= 1 (runs per sweep point)")
    return count, start, ",".join(p for p in pairs if p.partition("=")[0] != "seeds")


NAME_MAX = 255  # bytes in a file name on Linux and macOS file systems


def _name(keys: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in keys.items()).replace("/", "_")


def expand(config_file: str, base_arg: str = "", grid=()) -> list[Run]:
    """The runs of `config_file`'s sweep(add, arg) (or sweep(add)) with `base_arg` under
    every run, or with `grid` (--grid flags, "KEY=V1,V2") the runs of their cartesian
    product instead.

    `seeds=N` in `base_arg` (any config file) runs every point N times, with train seeds
    seed, seed + 1, ... (seed from the arg, default 0) and `seed=K` in the run names; in a
    file with no sweep() and no `grid`, the arg's own config is the one point (`seeds=1`:
    its one run). A run's
    arg has its relative paths made absolute (`absolute_paths`), so its command runs the
    same from any directory of any host."""
    module = load_config_module(config_file)
    defaults = getattr(module, "DEFAULTS", {})
    points = grid_points(grid, base_arg) if grid else None
    named: dict = {}  # the keys that name a point whose own keys are none
    check_given_once(split_values(base_arg))  # before runs merge their keys into it
    seeds_given = "seeds" in arg_pairs(base_arg)
    count, start, base_arg = _seeds(base_arg)
    if points is None and not hasattr(module, "sweep"):
        if not seeds_given:
            raise ConfigError(f"{config_file} defines no sweep(add, arg) function: give the "
                              "runs with --grid=KEY=V1,V2, or seeds=N in the arg for N seeds "
                              "of the config as the arg gives it")
        points = [{}]  # the arg's own config, its seeds the runs, named by its encoding
        named = {"encoding": module.get_config(base_arg).encoding.name}
    given = arg_pairs(base_arg)
    runs: list[Run] = []

    added: list[dict] = []  # each add()'s keys, as the file's sweep gave them

    def add(**keys):
        added.append(keys)
        for seed in range(start, start + count):
            point = {**keys, "seed": seed} if count > 1 else keys
            name = _name({**(keys or named), **point})
            if any(r.name == name for r in runs):
                raise ConfigError(f"sweep adds run {name!r} twice")
            if len(name.encode()) > NAME_MAX:  # before any run trains, not after one did
                raise ConfigError(
                    f"run {name[:60]}... is named by its values in {len(name.encode())} bytes, "
                    f"more than a folder name holds ({NAME_MAX}): give shorter values (a "
                    "layer pattern repeats an entry with *N: rope*3+none)")
            runs.append(Run(name, absolute_paths(_merge_arg(base_arg, point), defaults),
                            seed if count > 1 else None, _name(keys or named)))

    if points is None:
        call_sweep(module, add, base_arg)
        _check_kept(config_file, module, given, added)
    for point in points or ():
        add(**point)
    if not runs:  # a sweep() whose filter (encodings=...) the arg left nothing of
        raise ConfigError(f"{config_file}'s sweep plans no run for the arg {base_arg!r}: give "
                          "values its sweep() has points for (see its docstring)")
    # A typo in any run is reported before any work starts; each run's config is kept, so
    # planning calls get_config once per run.
    planned, checked = [], set()
    for run in runs:
        try:
            planned.append(dataclasses.replace(run, config=module.get_config(run.arg)))
            _check_once(planned[-1].config, checked)
        except ConfigError as e:
            raise (_grid_error(grid, run, e) if grid else e if points
                   else _sweep_error(config_file, module, base_arg, run, e, runs)) from None
    _check_distinct(planned, (f"{' '.join(f'--grid={text}' for text in grid)} gives" if grid
                              else f"{config_file}'s sweep() adds"),
                    ("drop one of the values that are one value" if grid
                     else "add only one of them"))
    return planned


def _sweep_error(config_file: str, module, base_arg: str, run: Run,
                 error: ConfigError, runs: list[Run]) -> ConfigError:
    """`error` of one run of the file's own sweep, saying which run and study it came from:
    an arg key fit for some of a study's runs fails in another (theta=500 in study=main's
    encoding=none run), which the user never named; the runs it fits, where they are
    named by their encodings, are then a --grid to sweep them alone."""
    given = arg_pairs(base_arg)
    study = given.get("study") or getattr(module, "DEFAULTS", {}).get("study")
    where = f"{Path(config_file).name}'s sweep" + (
        f" (study={study}{'' if 'study' in given else ', its default'})" if study else "")
    fits = [other.point.removeprefix("encoding=") for other in runs
            if other.seed in (None, runs[0].seed) and _configures(module, other.arg)]
    hint = ""
    if fits and all(other.point.startswith("encoding=") and "," not in other.point
                    for other in runs):
        seeds = sum(other.point == runs[0].point for other in runs)
        arg = ",".join([*(p for p in split_values(base_arg) if p.partition("=")[0] != "study"),
                        *([f"seeds={seeds}"] if seeds > 1 else [])])
        hint = (f"; {', '.join(fits)} of its runs take it: --config={config_file}:{arg} "
                f"--grid=encoding={','.join(fits)} sweeps those alone")
    return ConfigError(f"run {run.name} of {where}: {error}{hint}")


def _configures(module, arg: str) -> bool:
    """Whether a run of `arg` passes what planning checks: the config file's get_config,
    then what train refuses (`_check_once`), where a run the hint named failed before."""
    try:
        _check_once(module.get_config(arg), set())
    except ConfigError:
        return False
    return True


def _check_once(config, checked: set[str]) -> None:
    """What `posjax train` refuses of `config` before it writes anything
    (trainer.check_config: a hyperparameter out of range, a rate, a model its sizes cannot
    build), once per config of the sweep's seeds (`checked`: those done), so the sweep
    refuses it as it plans, not when that run's turn comes."""
    from posjax.experiment import Experiment  # noqa: PLC0415 - jax: only where a plan is checked
    from posjax.train.trainer import check_config  # noqa: PLC0415

    seedless = ml_collections.ConfigDict(config.to_dict())
    seedless.train.seed = 0
    key = seedless.to_json(sort_keys=True)
    if key not in checked:
        experiment = Experiment.from_config(config)
        experiment.abstract()  # the model its sizes build (train builds it for real)
        check_config(experiment)
        checked.add(key)


def _check_distinct(runs: list[Run], source: str, fix: str) -> None:
    """Two runs of one config (grid values that are one value, theta=1e4 and theta=10000;
    a sweep() adding a point and its defaults) would train it twice under two names: a
    one-line ConfigError, "SOURCE runs A and B the same config: FIX"."""
    seen: dict[str, str] = {}
    for run in runs:
        other = seen.setdefault(run.config.to_json(sort_keys=True), run.name)
        if other != run.name:
            raise ConfigError(f"{source} runs {other} and {run.name} the same config: {fix}")


def _configs_given(runs: list[Run], overrides) -> list[ml_collections.ConfigDict]:
    """Each run's config with every `--config.a.b=v` of `overrides` applied."""
    if not overrides:
        return [run.config for run in runs]
    return [overridden(run.config.copy_and_resolve_references(), overrides, run.arg)
            for run in runs]


def check_files(runs: list[Run], grid=(), overrides=()) -> None:
    """The files the runs' data are built from, with the `overrides`, exist and hold text (a
    posjax-built dataset's builder config finds them, e.g. local_text's glob), once per
    data config: refused before a sweep on this machine starts, not by each run as it
    starts."""
    found = set()
    for run, config in zip(runs, _configs_given(runs, overrides), strict=True):
        key = config.data.to_json(sort_keys=True)
        if key in found:
            continue
        try:
            data.kind_of(config.data).builder_config()
        except ConfigError as e:
            raise (_grid_error(grid, run, e) if grid else e) from None
        found.add(key)


def commands(config_file: str, run: Run, sweepdir: Path, overrides=(),
             extrapolate: bool = True, seeds: list[Run] = (),
             seed_steps: str | None = "vmap", imports=()) -> tuple[tuple[str, ...], ...]:
    """The command line that trains and then (`extrapolate`) evaluates one run, or the
    `seeds` of one point together (`group`, stepped as `seed_steps` says), importing the
    user's files `imports` (posjax train --import) first, with absolute paths, so it works
    from any directory of any host that mounts the sweep directory."""
    workdir, arg = str(run_dir(sweepdir, run.name)), run.arg
    if seeds:
        workdir = str(run_dir(sweepdir, _seed_template(run)))
        way = () if seed_steps == "vmap" else (f"--seed_steps={seed_steps}",)
        overrides = (f"--seeds={','.join(str(r.seed) for r in seeds)}", *way, *overrides)
        # --seeds gives each run its train.seed, which it refuses beside the arg's seed=K
        arg = ",".join(pair for pair in split_values(arg) if not pair.startswith("seed="))
    return (("posjax", "train", *(f"--import={Path(path).resolve()}" for path in imports),
             f"--config={Path(config_file).resolve()}:{arg}",
             f"--workdir={workdir}", *overrides, *["--extrapolate"] * extrapolate),)


def _seed_template(run: Run) -> str:
    """The run's name with its seed as posjax train --seeds' {seed} field."""
    return re.sub(rf"(^|,)seed={run.seed}(?=,|$)", r"\1seed={seed}", run.name)


def group(config_file: str, runs: list[Run]) -> dict[str, list[Run]]:
    """{job name: its runs}: the seeds of each point (runs whose configs differ only in
    train.seed; the job is named by the point, seed=K dropped) as one job, every other
    run alone."""
    groups, config = {}, _configs(config_file)
    for run in runs:
        key = run.point if run.seed is not None else run.name
        groups.setdefault(key, []).append(run)
    for key, members in list(groups.items()):
        first = config(members[0])
        for run in members[1:]:
            expected = first.copy_and_resolve_references()
            expected.train.seed = run.seed
            if config(run).to_json() != expected.to_json():
                del groups[key]
                groups.update({r.name: [r] for r in members})
                break
    return groups


def _configs(config_file: str):
    """run -> its config: the one `expand` kept, else get_config of the file, loaded once."""
    module = []

    def config(run: Run) -> ml_collections.ConfigDict:
        if run.config is not None:
            return run.config
        module[:] = module or [load_config_module(config_file)]
        return module[0].get_config(run.arg)

    return config


def run_dir(sweepdir: Path, name: str) -> Path:
    return Path(sweepdir).resolve() / "runs" / name


def finished(workdir: Path, extrapolate: bool = True) -> bool:
    """Whether the run in `workdir` completed its commands, wherever they ran (and still has
    its config.json: without it no command can read the run)."""
    trained = ((workdir / "config.json").exists()
               and "final_step" in fileio.read_stages(workdir / "stages.json", {}))
    evaluated = (workdir / "extrapolation.json").exists() or any(workdir.glob("retrieval_*.json"))
    return trained and (not extrapolate or evaluated)


def _summary(workdir: Path) -> dict:
    result = fileio.read_json(workdir / "extrapolation.json", {})
    recorded = fileio.read_stages(workdir / "stages.json", {})
    stages = recorded.get("stages", [])
    summary = {"ppl": {str(r["length"]): r["ppl"] for r in result.get("lengths", []) if "ppl" in r}}
    if stages:
        summary["final_loss"] = stages[-1]["final_loss"]
    seconds = recorded.get("seconds")
    if seconds:  # where the run's process spent its time (posjax.train.trainer._finish)
        summary["seconds"] = seconds
    return summary


def _latest_step(workdir: Path) -> int | None:
    """The newest checkpoint step in a run directory (orbax's numbered folders), or None."""
    return max((int(p.name) for p in (workdir / "checkpoints").glob("*") if p.name.isdigit()),
               default=None)


def resume_lines(state: SweepState, runs: list[Run],
                 groups: Mapping[str, list[Run]] | None = None) -> list[str]:
    """What a sweep takes up: a line per run it resumes from a checkpoint or finishes (its
    training done, its scoring not), then how many runs are done, resumed, finished, in use
    by another process (`_register`) and to start (a new sweep: how many it starts). The
    unfinished seeds of a group (`_groups`) resume together from the lowest step they all
    reached (posjax.train.trainer's `_restore`): a seed ahead of it says so."""
    counts = dict.fromkeys(("done", "resumed", "finished", "running elsewhere"), 0)
    lines, together = [], {}  # a group's unfinished seeds -> the step they resume from
    for members in (groups or {}).values():
        unfinished = [run for run in members if state.runs.get(run.name, {}).get("status")
                      not in ("done", "running")]
        if len(unfinished) > 1:
            lowest = min(_latest_step(run_dir(state.sweepdir, run.name)) or 0
                         for run in unfinished)
            together.update(dict.fromkeys((run.name for run in unfinished), lowest))
    for run in runs:
        status = state.runs.get(run.name, {}).get("status")
        if status in ("done", "running"):
            counts["done" if status == "done" else "running elsewhere"] += 1
            continue
        step = _latest_step(run_dir(state.sweepdir, run.name))
        if step is not None and together.get(run.name, step) < step:
            lowest = together[run.name]
            counts["resumed"] += bool(lowest)  # from step 0 it is one to start
            lines.append(f"posjax sweep: {run.name} reached step {step}, and the seeds it "
                         f"trains with step {lowest}: " + (f"resuming it with them from step "
                         f"{lowest}" if lowest else "training it again with them from step 0"))
        elif step is not None and run.config is not None and step >= sum(
                steps for *_, steps in run.config.train.stages):
            counts["finished"] += 1
            lines.append(f"posjax sweep: {run.name} trained all its {step} steps: finishing it")
        elif step is not None:
            counts["resumed"] += 1
            lines.append(f"posjax sweep: resuming {run.name} from step {step}")
    rest = len(runs) - sum(counts.values())
    if not any(counts.values()) and not lines:
        return [f"posjax sweep: {rest} run{'s' * (rest != 1)} to start"]
    done = counts.pop("done")
    shown = [f"{done} run{'s' * (done != 1)} done",
             *(f"{n} {what}" for what, n in counts.items() if n or what == "resumed")]
    return [*lines, f"posjax sweep: {', '.join(shown)}, {rest} to start"]


# The statuses of a run that ended: the sweep's bar counts these.
FINISHED = ("done", "failed")


def _plan(config_file: str, base_arg: str, grid=()) -> dict:
    """A command's plan as sweep.json records it."""
    return {"config": str(Path(config_file).resolve()), "arg": base_arg,
            **({"grid": list(grid)} if grid else {})}


def _plans(data: dict) -> list[dict]:
    """The plans of every command that added runs to a sweep (sweep.json's `data`)."""
    return [{k: plan[k] for k in ("config", "arg", "grid") if k in plan}
            for plan in (data, *data.get("later_plans", ()))]


# What a sweep's own sweep.json holds (a study's collected copy may hold "runs" alone).
SWEEP_KEYS = ("config", "arg", "runs")


class SweepState:
    """sweep.json: each run's arg, command, status and result summary, rewritten atomically
    on every change (from any executor's reporting thread).

    Statuses: pending -> running -> done | failed | interrupted. A re-run of the sweep turns
    every run that is not done back to pending, after taking as done the runs whose
    directories show they finished elsewhere (commands from --print_commands)."""

    def __init__(self, sweepdir: Path, config_file: str, base_arg: str, extrapolate: bool):
        self.path = Path(sweepdir) / "sweep.json"
        self.sweepdir = Path(sweepdir).resolve()
        self.extrapolate = extrapolate
        self._lock = threading.Lock()
        self.data = fileio.read_sweep_json(self.path, SWEEP_KEYS) or {
            "config": str(Path(config_file).resolve()), "arg": base_arg, "runs": {}}
        self.data["extrapolate"] = extrapolate

    @property
    def runs(self) -> dict[str, dict]:
        return self.data["runs"]

    def update(self, name: str, **fields) -> None:
        with self._lock:
            self.runs.setdefault(name, {}).update(fields)
            fileio.write_json(self.path, self.data)

    def report(self, names: list[str], outcome: Outcome | None) -> None:
        """An executor's news of the job of runs `names` (one, or a point's seeds trained
        together): it started (None) or ended with `outcome`. A run is done when its
        directory shows it finished, whatever its job reported (a seed of a group whose
        other seed failed; a run stopped by Ctrl-C as its process exited); a seed that
        diverged alone failed with the error its stages.json records; a group's seconds are
        split evenly between its runs, so the runs' seconds add up to the sweep's time."""
        for name in names:
            if outcome is None:
                self.update(name, status="running", error=None)
                continue
            workdir = run_dir(self.sweepdir, name)
            status, error = outcome.status, outcome.error
            if finished(workdir, self.extrapolate):
                status, error = "done", None
            elif len(names) > 1 and status == "failed":
                error = fileio.read_stages(workdir / "stages.json", {}).get("diverged") or error
            fields = {"status": status, "error": error}
            if outcome.seconds:
                fields["seconds"] = round(outcome.seconds / len(names), 3)
            if status == "done":
                fields["summary"] = _summary(workdir)
            self.update(name, **fields)

    def plan(self, config_file: str, base_arg: str, grid, runs: list[Run]) -> str | None:
        """Record the command's plan (config file, arg, --grid flags). sweep.json's own
        `config`, `arg` and `grid` are its first command's; a later command of another plan
        that adds runs beside them is listed under `later_plans` with the runs it adds, and
        the one line returned says so (None when it adds none)."""
        this = _plan(config_file, base_arg, grid)
        if not self.runs:
            self.data = {**{k: v for k, v in self.data.items() if k != "grid"}, **this}
            return None
        new = [run.name for run in runs if run.name not in self.runs]
        if this in _plans(self.data) or not new:
            return None
        self._check_new_configs(config_file, [run for run in runs if run.name in new])
        later = sum(len(plan["runs"]) for plan in self.data.get("later_plans", ()))
        self.data.setdefault("later_plans", []).append({**this, "runs": new})
        first = Path(self.data["config"]).name + (f":{self.data['arg']}" if self.data["arg"]
                                                 else "")
        first += "".join(f" --grid={flags}" for flags in self.data.get("grid", ()))
        return (f"posjax sweep: {self.sweepdir} holds {len(self.runs) - later} runs of {first}"
                f"{f' and {later} of later commands' if later else ''}; this command adds "
                f"{len(new)} beside them ({', '.join(new[:3])}"
                f"{', ...' if len(new) > 3 else ''}), and its table shows all")

    def _check_new_configs(self, config_file: str, new: list[Run]) -> None:
        """A run another plan adds that trains the config of a run the folder holds under
        another name (theta=100.0 beside theta=100) is one line: it would train it twice."""
        module = load_config_module(config_file)
        held = {}
        for name, entry in self.runs.items():
            try:
                held[module.get_config(entry["arg"]).to_json(sort_keys=True)] = name
            except (ConfigError, KeyError):  # a run the file no longer plans: not compared
                continue
        for run in new:
            twin = held.get(run.config.to_json(sort_keys=True))
            if twin and set(twin.split(",")) == set(run.name.split(",")):
                raise ConfigError(f"run {run.name} is run {twin}, which {self.sweepdir} holds, "
                                  "named with its keys in another order: give the --grid "
                                  "flags in the order of the command that made it")
            if twin:
                raise ConfigError(f"run {run.name} trains the config of run {twin}, which "
                                  f"{self.sweepdir} holds already: drop the value that "
                                  f"equals {twin}'s")

    def refresh(self) -> None:
        """Take runs whose directories show they finished as done. Their `seconds` become
        null: whatever this sweep timed (an interrupted attempt) is not what the run took.
        A run done without its evaluation (a sweep with --extrapolate=false) is pending again
        when this sweep evaluates: its command then scores the trained run; so is a done run
        whose folder or config.json is gone (its command then says what is missing). A run
        whose records do not read (a torn stages.json) is failed with the one line that says
        how to restore it; the others are taken up as ever."""
        for name, entry in self.runs.items():
            workdir = run_dir(self.sweepdir, name)
            try:
                done = finished(workdir, self.extrapolate)
            except ConfigError as damaged:  # a torn stages.json: this run's, not the sweep's
                self.update(name, status="failed", error=str(damaged))
                continue
            if entry.get("status") != "done" and done:
                self.update(name, status="done", error=None, seconds=None,
                            summary=_summary(workdir))
            elif entry.get("status") == "done" and not done and (
                    finished(workdir, False) or not (workdir / "config.json").exists()):
                self.update(name, status="pending")

    def check_config(self, config_file: str) -> None:
        """A sweep folder holds the runs of one config file: another one's runs of the same
        name would be taken for finished, and of another model kind ranked in one table."""
        recorded, given = Path(self.data["config"]), Path(config_file).resolve()
        if not self.runs or _same_file(recorded, given):
            return
        raise ConfigError(f"{self.sweepdir} holds runs of {recorded}, not of {given}: use a "
                          "new --workdir for this config file (posjax plot DIR1 DIR2 compares "
                          "the runs of both)")


def _same_file(recorded: Path, given: Path) -> bool:
    """Whether config file `given` is the `recorded` one: the same path, or the same name and
    bytes (the checkout moved or was cloned again), or the same name where the recorded
    file is gone."""
    if recorded == given:
        return True
    if recorded.name != given.name:
        return False
    return not recorded.is_file() or recorded.read_bytes() == given.read_bytes()


def _planned_alike(saved: str, arg: str, defaults: Callable[[], Mapping]) -> bool:
    """Whether sweep.json's `saved` arg is `arg` as an older posjax recorded it: before its
    relative paths were made absolute (resumed from the directory it started in), or with a
    value holding commas unquoted (`layer_pattern=rope(theta=1e4,window=32)+rope`);
    `defaults`: the config file's DEFAULTS, loaded when first needed."""
    def values(text: str) -> dict[str, str]:
        return {key: unquoted(value) for key, value in arg_pairs(text).items()}

    return values(absolute_paths(saved, defaults())) == values(arg)


def _register(state: SweepState, groups: dict[str, list[Run]], config_file, overrides,
              extrapolate, seed_steps: str | None,
              imports=()) -> tuple[list[Job], dict[str, list[str]]]:
    """Record every run (pending unless done); the jobs of the unfinished runs (a group's
    unfinished seeds in one job) and {job name: its runs' names}."""
    jobs, members = [], {}
    # the config file is loaded again only for a recorded arg that differs, and then once
    defaults = functools.cache(lambda: getattr(load_config_module(config_file), "DEFAULTS", {}))
    for run in itertools.chain.from_iterable(groups.values()):  # all, before any is recorded
        entry = state.runs.get(run.name, {})
        if (entry.get("arg") not in (None, run.arg)
                and not _planned_alike(entry["arg"], run.arg, defaults)):
            planned = (entry.get("status") == "pending"
                       and not run_dir(state.sweepdir, run.name).exists())
            raise ConfigError(
                f"{state.sweepdir} already holds run {run.name} with arg "
                f"{entry['arg']!r}" + (
                    ", planned (--print_commands) and never trained: delete "
                    f"{state.sweepdir / 'sweep.json'} to plan this sweep there instead, or use "
                    "a new --workdir" if planned else
                    ": use a new --workdir for a different sweep"))
        _check_recorded_config(state.sweepdir, run, overrides)
    for name, runs in groups.items():
        todo = [run for run in runs if state.runs.get(run.name, {}).get("status") != "done"]
        seeds = todo if len(runs) > 1 else []
        cmds = commands(config_file, (todo or runs)[0], state.sweepdir, overrides,
                        extrapolate, seeds, seed_steps, imports)
        busy = {run.name: lock.holder() for run in todo
                if (lock := RunLock(run_dir(state.sweepdir, run.name))).held()}
        for run in runs:
            status = "done" if run not in todo else "running" if run.name in busy else "pending"
            state.update(run.name, arg=run.arg, command=" && ".join(map(shlex.join, cmds)),
                         status=status, **({"error": f"in use by {busy[run.name]}"}
                                           if run.name in busy else {}))
        if busy:  # a job of an earlier sweep (SLURM, Ray) or a command run by hand
            print(f"posjax sweep: {', '.join(busy)} in use by {', '.join(set(busy.values()))}:"
                  " not started again; `posjax sweep --status` shows when it ends, and a "
                  "re-run then takes up what it left", file=sys.stderr)
        if todo and not busy:
            jobs.append(Job(name, str(run_dir(state.sweepdir, todo[0].name)), cmds))
            members[name] = [run.name for run in todo]
    return jobs, members


def _check_folder(sweepdir: Path) -> None:
    """A one-line ConfigError unless a sweep can write its files into `sweepdir`: a folder it
    can write that holds no lone run."""
    fileio.check_writable(sweepdir)
    if (sweepdir / "config.json").exists() and not (sweepdir / "sweep.json").exists():
        raise ConfigError(f"{sweepdir} holds a run (its config.json), not a sweep: give the "
                          "sweep a --workdir of its own")


def _check_recorded_config(sweepdir: Path, run: Run, overrides) -> None:
    """A run begun before (its config.json written) under other --config.* overrides is one
    line: its finished or resumed results would sit beside runs of the new config."""
    saved = read_config_json(run_dir(sweepdir, run.name))
    if saved is None:
        return
    changed = config_changes(saved, overridden(run.config.copy_and_resolve_references(),
                                               overrides, run.arg))
    if changed:
        raise ConfigError(
            f"{sweepdir} already holds run {run.name} trained with another config "
            f"({changes_text(changed)}): use a new --workdir for a different sweep")


def _environment(sweepdir: Path) -> dict[str, str]:
    """What every run's commands add to their environment."""
    # One persistent compilation cache for every run of the sweep (JAX reads these variables).
    # Runs of different encodings share only the ~40 small eager compiles of model and
    # optimizer set-up, each under JAX's default 1 s threshold, so every entry is cached; a
    # resumed run and `posjax extrapolate` after `posjax train` then compile almost nothing
    # (measured in experiments/bench/README.md).
    return {
        "JAX_COMPILATION_CACHE_DIR": os.environ.get("JAX_COMPILATION_CACHE_DIR",
                                                    str(sweepdir / ".jax_cache")),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": os.environ.get(
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0"),
    }


def _select(runs: list[Run], only: str | None) -> list[Run]:
    if only:
        chosen = [r for r in runs if fnmatch.fnmatch(r.name, only)]
        if not chosen:
            names = ", ".join(r.name for r in runs[:6]) + (", ..." if len(runs) > 6 else "")
            raise ConfigError(f"--only={only!r} matches no run of this sweep; its runs: "
                              f"{names} (a shell pattern: --only='*theta=100*')")
        runs = chosen
    return runs


def run_cli(config_spec: str, sweepdir: str | Path, *, only: str | None = None,
            print_commands: bool = False, overrides=(), extrapolate: bool = True,
            executor: str = "local", options: Options | None = None,
            seed_steps: str | None = None, runs: list[Run] | None = None, grid=(),
            imports=()) -> dict:
    """`posjax sweep`: record the runs in sweep.json, then print their commands or run every
    unfinished one on `executor` (seed_steps: a point's seeds as one job, `group`, stepped so,
    posjax train --seed_steps; None: each run alone). runs: `expand(config_spec)` when the
    caller has it already (get_config is then called once per run, by `expand` alone).
    grid: the --grid flags the runs came from (`expand`), recorded in sweep.json and named in
    a notice (`grid_notice`) once the plan holds. imports: the user's files every run's
    command imports first (--import). A re-run says which runs it resumes and how
    many are done (`resume_lines`, on stderr).
    KeyboardInterrupt: the runs in flight were stopped and recorded as interrupted, and the
    rest left pending. Overrides of fields that name files get relative paths made absolute
    (`absolute_override`), as the runs' args do (`expand`)."""
    config_file, _, base_arg = config_spec.partition(":")
    overrides = tuple(absolute_override(flag) for flag in overrides)
    runner = EXECUTORS.lookup(executor)(options or Options())
    if not print_commands:
        runner.check()
    every = expand(config_file, base_arg, grid) if runs is None else runs
    runs = _select(every, only)
    if runner.on_this_machine and not print_commands:  # elsewhere the files may be too
        check_files(runs, grid, overrides)
    sweepdir = Path(sweepdir).resolve()
    _check_folder(sweepdir)
    with RunLock(sweepdir, "sweep"):
        state = SweepState(sweepdir, config_file, base_arg, extrapolate)
        if imports:  # a re-run without --import imports them (`recorded_imports`)
            state.data["imports"] = [str(Path(path).resolve()) for path in imports]
        state.check_config(config_file)
        state.refresh()
        for line in filter(None, (grid and grid_notice(config_file, base_arg, grid, every),
                                  state.plan(config_file, base_arg, grid, runs))):
            print(line, file=sys.stderr)
        groups = _groups(config_file, runs, seed_steps)
        jobs, members = _register(state, groups, config_file, overrides, extrapolate,
                                  seed_steps, imports)
        for line in resume_lines(state, runs, groups):
            print(line, file=sys.stderr)
        if print_commands:
            for job in jobs:
                print(" && ".join(map(shlex.join, job.commands)))
            return state.data
        shown = not runs_show_their_bars(executor, min((options or Options()).parallel,
                                                       len(jobs)))
        _run_jobs(state, runner, jobs, members, runs, shown)
    return state.data


def _run_jobs(state: SweepState, runner, jobs, members: dict[str, list[str]],
              runs: list[Run], shown: bool) -> None:
    """Run `jobs` on `runner` under the sweep's bar of `runs`, recording each job's news in
    `state` (`members`: a job's runs); `shown`: the bar shows the runs in flight."""
    done = sum(state.runs[run.name]["status"] == "done" for run in runs)
    bar = tqdm(total=len(runs), initial=done, unit="run", desc="sweep")
    running: dict[str, None] = {}  # the jobs in flight, in the order they started

    def in_flight() -> list[Path]:
        return [run_dir(state.sweepdir, members[name][0]) for name in list(running)]

    def report(name, outcome):
        state.report(members[name], outcome)
        if outcome is None:
            running[name] = None
        else:  # an interrupted run is not finished: it resumes
            running.pop(name, None)
            if shown:  # a finished run's last polled row leaves the line with it
                bar.set_postfix_str(progress_line(in_flight()), refresh=False)
            bar.update(sum(state.runs[run]["status"] in FINISHED for run in members[name]))

    stop = threading.Event()
    if shown:
        threading.Thread(target=_show_progress, daemon=True,
                         args=(bar, stop, in_flight)).start()
    try:
        if jobs:
            runner.run(jobs, _environment(state.sweepdir), report)
    finally:
        stop.set()
        bar.close()


def recorded_imports(sweepdir: str | Path) -> list[str]:
    """The files of your own code a sweep in `sweepdir` was started with (--import, recorded
    in its sweep.json), which its re-run imports where it is given none; a one-line
    ConfigError for one that has moved."""
    saved = fileio.read_sweep_json(Path(sweepdir) / "sweep.json", SWEEP_KEYS) or {}
    paths = saved.get("imports", [])
    for path in paths:
        if not Path(path).is_file():
            raise ConfigError(f"{sweepdir} was started with --import={path}, which is no "
                              "longer there: put it back, or give where it is now with "
                              "--import=FILE")
    if paths:
        print(f"posjax sweep: importing {', '.join(paths)}, as this sweep was started with "
              "(--import)", file=sys.stderr)
    return paths


def unfinished_lines(runs: dict) -> list[str]:
    """A line for each run a sweep that was not itself stopped left unfinished (`runs`:
    sweep.json's): its error where it failed; where another process held it, which; where
    its own process alone was stopped, that the sweep's re-run resumes it."""
    lines = []
    for name, entry in runs.items():
        if entry["status"] == "failed":
            lines.append(f"failed: {name}: {entry['error']}")
        elif entry["status"] == "running":  # another process's (`_register`)
            lines.append(f"running: {name}: {entry.get('error') or 'still running'}, not by "
                         "this sweep: re-run the sweep once it ends")
        elif entry["status"] == "interrupted":
            lines.append(f"interrupted: {name}: its process was stopped while the sweep ran "
                         "on: re-run the sweep to resume it")
    return lines


def _groups(config_file: str, runs: list[Run], seed_steps: str | None) -> dict[str, list[Run]]:
    """The runs trained together: with seed_steps a point's seeds (`group`), saying so where
    every point has one seed (then each run trains alone), else each run by itself."""
    if seed_steps is None:
        return {run.name: [run] for run in runs}
    groups = group(config_file, runs)
    if all(len(members) == 1 for members in groups.values()):
        why = ("leaves one seed of each point to train (the others done, or left out by --only)"
               if any(run.seed is not None for run in runs) else
               "has one seed per point (seeds=N in the arg gives N)")
        print(f"posjax sweep: --vmap_seeds trains a point's seeds in one program, and this "
              f"sweep {why}: each run trains alone", file=sys.stderr)
    return groups


PROGRESS_EVERY_S = 5.0


def progress_line(workdirs: list[Path]) -> str:
    """The latest metrics row of each run in `workdirs` that has one, e.g. "encoding=rope,
    seed=0: step 300, loss 2.451, 7.3k tok/s" ("compiling" for a row with no timed step)."""
    parts = []
    for workdir in workdirs:
        rows = [row for row in fileio.read_jsonl(workdir / "metrics.jsonl") if "loss" in row]
        if not rows:
            continue
        row, speed = rows[-1], rows[-1].get("tokens_per_sec")
        parts.append(f"{workdir.name}: step {row['step']}, loss {row['loss']:.3f}, " + (
            "compiling" if speed is None else f"{speed / 1e3:.1f}k tok/s"))
    return " | ".join(parts)


def _show_progress(bar, stop: threading.Event, workdirs) -> None:
    """Every PROGRESS_EVERY_S until `stop`: the runs in flight (`workdirs()`) on `bar`."""
    while not stop.wait(PROGRESS_EVERY_S):
        bar.set_postfix_str(progress_line(workdirs()), refresh=True)


def status_cli(sweepdir: str | Path, spec: str | None = None, grid=()) -> dict:
    """`posjax sweep --status`: every run's status, taking runs finished elsewhere as done;
    first a line where `spec` (--config's FILE:ARG) or `grid` is not the sweep's plan."""
    if not Path(sweepdir).is_dir():
        raise missing_folder(sweepdir, "give the --workdir of a sweep (posjax sweep)")
    sweepdir = Path(sweepdir).resolve()
    saved = fileio.read_sweep_json(sweepdir / "sweep.json", SWEEP_KEYS)
    if saved is None:
        raise ConfigError(f"{sweepdir} has no sweep.json: start it with `posjax sweep`")
    if spec and _plan(*spec.partition(":")[::2], grid) not in _plans(saved):
        planned = " and of ".join(
            " ".join([f"--config={plan['config']}:{plan['arg']}",
                      *(f"--grid={text}" for text in plan.get("grid", []))])
            for plan in _plans(saved))
        print(f"posjax sweep: {sweepdir} holds the runs of {planned}, not of the command "
              "given: their statuses follow", file=sys.stderr)
    state = SweepState(sweepdir, saved["config"], saved["arg"], saved.get("extrapolate", True))
    state.refresh()
    driven = RunLock(sweepdir, "sweep").held()
    for name, entry in state.runs.items():
        loss = entry.get("summary", {}).get("final_loss")
        status = entry["status"]
        # a loss is a done run's; a run to redo shows why, not the loss it had before
        shown = (f"final_loss={loss:.4f}" if status == "done" and loss is not None
                 else entry.get("error") or "")
        # Recorded as running when submitted (SLURM's array tasks; Ray's runs are recorded
        # when they start), but with no config.json, which a run writes first: not started
        # yet. Else, where neither its sweep nor a process of its own holds it: the sweep was
        # killed (kill -9, a lost machine) before it could record the stop.
        started = (run_dir(sweepdir, name) / "config.json").is_file()
        if status == "running" and not RunLock(run_dir(sweepdir, name)).held():
            if not started:
                status, shown = (("running", "submitted, not started yet") if driven else
                                 ("pending", "submitted, never started: re-run the sweep"))
            elif not driven:
                status, shown = ("interrupted",
                                 "its process is gone: re-run the sweep to resume")
        print(f"{status:<12} {name}  {shown}".rstrip())
    for name in _not_started(saved, state.runs):
        shown = ("not in sweep.json, but its folder holds the run: re-run the sweep to take it "
                 "up" if (run_dir(sweepdir, name) / "config.json").is_file() else
                 "not started (--only left it out): re-run the sweep without --only")
        print(f"{'pending':<12} {name}  {shown}")
    return state.data


def _not_started(saved: dict, recorded: dict) -> list[str]:
    """The runs the sweep's plans hold that sweep.json does not (a sweep run with --only);
    none where a plan's config file no longer loads (its runs are listed as recorded)."""
    names = []
    for plan in _plans(saved):
        try:
            names += [run.name for run in expand(plan["config"], plan["arg"],
                                                 plan.get("grid", ()))]
        except ConfigError:
            return []
    return [name for name in dict.fromkeys(names) if name not in recorded]
