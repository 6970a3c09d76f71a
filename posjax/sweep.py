"""Sweeps: expand a config file's `sweep(add, arg)` into runs and run them, resumably.

Each `add(key=value, ...)` call becomes one run: its arg string is the sweep's base arg with
those keys overridden, its directory SWEEPDIR/runs/<name>, and its command line
`posjax train --config=FILE:ARG --workdir=...` followed by `posjax extrapolate`. `sweep.json`
records every run's arg, command, status (pending / running / done / failed + error /
interrupted) and result summary; it is rewritten atomically after every change. Re-running the
same sweep skips finished runs and resumes the others from their checkpoints; a failed run
does not stop the others. The runs execute on an executor (posjax.executors: local, ray,
slurm); while a sweep runs, its directory is locked.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib.util
import os
import shlex
import sys
import threading
from pathlib import Path
from types import ModuleType

from tqdm.auto import tqdm

from posjax import io
from posjax.errors import ConfigError, raised
from posjax.executors import EXECUTORS, Job, Options, Outcome
from posjax.runlock import RunLock


@dataclasses.dataclass(frozen=True)
class Run:
    """One point of a sweep."""

    name: str  # directory name: the add() keys, e.g. "encoding=rope,theta=500"
    arg: str  # the full config arg string


def load_config_module(path: str) -> ModuleType:
    """Import a config file by path (as ml_collections' config flags do); it must define
    get_config(arg)."""
    if not Path(path).is_file():
        raise ConfigError(f"config file {path!r} not found: give a path like configs/lm.py")
    check_syntax(path)
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # a missing import or a bug at the file's top level
        raise ConfigError(f"config file {path}: loading it raised {raised(e)}; fix the "
                          "file") from e
    if not callable(getattr(module, "get_config", None)):
        raise ConfigError(f"config file {path} defines no get_config(arg): it must define "
                          "get_config(arg) returning the run's ml_collections.ConfigDict")
    return module


def check_syntax(path: str) -> None:
    """A config file that does not parse as Python is one line naming where."""
    try:
        compile(Path(path).read_text(), path, "exec")
    except SyntaxError as e:
        raise ConfigError(f"config file {path} has a syntax error at line {e.lineno}: "
                          f"{e.msg}; fix the file") from None


def _merge_arg(base: str, keys: dict) -> str:
    parts = {}
    for pair in (p.strip() for p in base.split(",") if p.strip()):
        key, _, value = pair.partition("=")
        parts[key] = pair
    for key, value in keys.items():
        text = "+".join(map(str, value)) if isinstance(value, tuple) else str(value)
        parts[key] = f"{key}={text}"
    return ",".join(parts.values())


def _seeds(base_arg: str) -> tuple[int, int, str]:
    """(seeds, first seed, the arg without `seeds=`): the sweep-level seeds axis."""
    pairs = [p.strip() for p in base_arg.split(",") if p.strip()]
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


def expand(config_file: str, base_arg: str = "") -> list[Run]:
    """The runs of `config_file`'s sweep(add, arg) with `base_arg` under every run.

    `seeds=N` in `base_arg` (any config file) runs every point N times, with train seeds
    seed, seed + 1, ... (seed from the arg, default 0) and `seed=K` in the run names."""
    module = load_config_module(config_file)
    if not hasattr(module, "sweep"):
        raise ConfigError(f"{config_file} defines no sweep(add, arg) function")
    count, start, base_arg = _seeds(base_arg)
    runs: list[Run] = []

    def add(**keys):
        for seed in range(start, start + count):
            point = {**keys, "seed": seed} if count > 1 else keys
            name = ",".join(f"{k}={v}" for k, v in point.items()).replace("/", "_")
            if any(r.name == name for r in runs):
                raise ConfigError(f"sweep adds run {name!r} twice")
            runs.append(Run(name, _merge_arg(base_arg, point)))

    module.sweep(add, base_arg)
    for run in runs:  # a typo in any run is reported before any work starts
        module.get_config(run.arg)
    return runs


def commands(config_file: str, run: Run, sweepdir: Path, overrides=(),
             extrapolate: bool = True) -> tuple[tuple[str, ...], ...]:
    """The command lines that train and then evaluate one run, with absolute paths, so they
    work from any directory of any host that mounts the sweep directory."""
    workdir = run_dir(sweepdir, run.name)
    train = ("posjax", "train", f"--config={Path(config_file).resolve()}:{run.arg}",
             f"--workdir={workdir}", *overrides)
    return (train, ("posjax", "extrapolate", f"--workdir={workdir}"))[: 2 if extrapolate else 1]


def run_dir(sweepdir: Path, name: str) -> Path:
    return Path(sweepdir).resolve() / "runs" / name


def finished(workdir: Path, extrapolate: bool = True) -> bool:
    """Whether the run in `workdir` completed its commands, wherever they ran."""
    trained = "final_step" in io.read_json(workdir / "stages.json", {})
    evaluated = (workdir / "extrapolation.json").exists() or any(workdir.glob("retrieval_*.json"))
    return trained and (not extrapolate or evaluated)


def _summary(workdir: Path) -> dict:
    result = io.read_json(workdir / "extrapolation.json", {})
    stages = io.read_json(workdir / "stages.json", {}).get("stages", [])
    summary = {"ppl": {str(r["length"]): r["ppl"] for r in result.get("lengths", []) if "ppl" in r}}
    if stages:
        summary["final_loss"] = stages[-1]["final_loss"]
    return summary


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
        self.data = io.read_json(self.path, None) or {
            "config": str(Path(config_file).resolve()), "arg": base_arg, "runs": {}}
        self.data["extrapolate"] = extrapolate

    @property
    def runs(self) -> dict[str, dict]:
        return self.data["runs"]

    def update(self, name: str, **fields) -> None:
        with self._lock:
            self.runs.setdefault(name, {}).update(fields)
            io.write_json(self.path, self.data)

    def report(self, name: str, outcome: Outcome | None) -> None:
        """An executor's news: `name` started (None) or ended with `outcome`."""
        if outcome is None:
            self.update(name, status="running", error=None)
            return
        fields = {"status": outcome.status, "error": outcome.error}
        if outcome.seconds:
            fields["seconds"] = round(outcome.seconds, 3)
        if outcome.status == "done":
            fields["summary"] = _summary(run_dir(self.sweepdir, name))
        self.update(name, **fields)

    def refresh(self) -> None:
        """Take runs whose directories show they finished as done. Their `seconds` become
        null: whatever this sweep timed (an interrupted attempt) is not what the run took."""
        for name, entry in self.runs.items():
            workdir = run_dir(self.sweepdir, name)
            if entry.get("status") != "done" and finished(workdir, self.extrapolate):
                self.update(name, status="done", error=None, seconds=None,
                            summary=_summary(workdir))


def _register(state: SweepState, runs, config_file, overrides, extrapolate) -> list[Job]:
    """Record every run (pending unless done) and return the jobs of the unfinished ones."""
    jobs = []
    for run in runs:
        entry = state.runs.get(run.name, {})
        if entry.get("arg") not in (None, run.arg):
            raise ConfigError(
                f"{state.sweepdir} already holds run {run.name} with arg {entry['arg']!r}: "
                "use a new --workdir for a different sweep"
            )
        cmds = commands(config_file, run, state.sweepdir, overrides, extrapolate)
        status = "done" if entry.get("status") == "done" else "pending"
        state.update(run.name, arg=run.arg, command=" && ".join(map(shlex.join, cmds)),
                     status=status)
        if status != "done":
            jobs.append(Job(run.name, str(run_dir(state.sweepdir, run.name)), cmds))
    return jobs


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


def _select(config_file: str, base_arg: str, only: str | None) -> list[Run]:
    runs = expand(config_file, base_arg)
    if only:
        runs = [r for r in runs if fnmatch.fnmatch(r.name, only)]
        if not runs:
            raise ConfigError(f"--only={only!r} matches no run of this sweep")
    return runs


def run_cli(config_spec: str, sweepdir: str | Path, *, only: str | None = None,
            print_commands: bool = False, overrides=(), extrapolate: bool = True,
            executor: str = "local", options: Options | None = None) -> dict:
    """`posjax sweep`: record the runs in sweep.json, then print their commands or run every
    unfinished one on `executor`. KeyboardInterrupt: the runs in flight were stopped and
    recorded as interrupted, and the rest left pending."""
    config_file, _, base_arg = config_spec.partition(":")
    runner = EXECUTORS.lookup(executor)(options or Options())
    if not print_commands:
        runner.check()
    runs = _select(config_file, base_arg, only)
    sweepdir = Path(sweepdir).resolve()
    io.check_writable(sweepdir)
    with RunLock(sweepdir, "sweep"):
        state = SweepState(sweepdir, config_file, base_arg, extrapolate)
        state.refresh()
        jobs = _register(state, runs, config_file, overrides, extrapolate)
        if print_commands:
            for job in jobs:
                print(" && ".join(map(shlex.join, job.commands)))
            return state.data
        bar = tqdm(total=len(runs), initial=len(runs) - len(jobs), unit="run", desc="sweep")

        def report(name, outcome):
            state.report(name, outcome)
            if outcome is not None:
                bar.update(1)

        try:
            if jobs:
                runner.run(jobs, _environment(sweepdir), report)
        finally:
            bar.close()
    for name, entry in state.runs.items():
        if entry["status"] == "failed":
            print(f"failed: {name}: {entry['error']}", file=sys.stderr)
    return state.data


def status_cli(sweepdir: str | Path) -> dict:
    """`posjax sweep --status`: every run's status, taking runs finished elsewhere as done."""
    sweepdir = Path(sweepdir).resolve()
    saved = io.read_json(sweepdir / "sweep.json")
    if saved is None:
        raise ConfigError(f"{sweepdir} has no sweep.json: start it with `posjax sweep`")
    state = SweepState(sweepdir, saved["config"], saved["arg"], saved.get("extrapolate", True))
    state.refresh()
    for name, entry in state.runs.items():
        loss = entry.get("summary", {}).get("final_loss")
        shown = f"final_loss={loss:.4f}" if loss is not None else entry.get("error") or ""
        print(f"{entry['status']:<12} {name}  {shown}".rstrip())
    return state.data
