"""Sweeps: expand a config file's `sweep(add, arg)` into runs and run them, resumably.

Each `add(key=value, ...)` call becomes one run: its arg string is the sweep's base arg with
those keys overridden, its directory SWEEPDIR/runs/<name>, and its command line
`posjax train --config=FILE:ARG --workdir=...` followed by `posjax extrapolate`. `sweep.json`
records every run's arg, command, status (pending / running / done / failed + error) and result
summary; it is rewritten atomically after every change. Re-running the same sweep skips finished
runs and resumes interrupted ones from their checkpoints; a failed run does not stop the others.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib.util
import os
import shlex
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

from tqdm.auto import tqdm

from posjax import hostenv, io
from posjax.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Run:
    """One point of a sweep."""

    name: str  # directory name: the add() keys, e.g. "encoding=rope,theta=500"
    arg: str  # the full config arg string


def load_config_module(path: str) -> ModuleType:
    """Import a config file by path (as ml_collections' config flags do)."""
    if not Path(path).is_file():
        raise ConfigError(f"config file {path!r} not found: give a path like configs/lm.py")
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _merge_arg(base: str, keys: dict) -> str:
    parts = {}
    for pair in (p.strip() for p in base.split(",") if p.strip()):
        key, _, value = pair.partition("=")
        parts[key] = pair
    for key, value in keys.items():
        text = "+".join(map(str, value)) if isinstance(value, tuple) else str(value)
        parts[key] = f"{key}={text}"
    return ",".join(parts.values())


def expand(config_file: str, base_arg: str = "") -> list[Run]:
    """The runs of `config_file`'s sweep(add, arg) with `base_arg` under every run."""
    module = load_config_module(config_file)
    if not hasattr(module, "sweep"):
        raise ConfigError(f"{config_file} defines no sweep(add, arg) function")
    runs: list[Run] = []

    def add(**keys):
        name = ",".join(f"{k}={v}" for k, v in keys.items()).replace("/", "_")
        if any(r.name == name for r in runs):
            raise ConfigError(f"sweep adds run {name!r} twice")
        runs.append(Run(name, _merge_arg(base_arg, keys)))

    module.sweep(add, base_arg)
    for run in runs:  # a typo in any run is reported before any work starts
        module.get_config(run.arg)
    return runs


def commands(config_file: str, run: Run, sweepdir: Path, overrides=()) -> list[list[str]]:
    """The command lines that train and then evaluate one run."""
    workdir = sweepdir / "runs" / run.name
    train = ["posjax", "train", f"--config={config_file}:{run.arg}", f"--workdir={workdir}",
             *overrides]
    return [train, ["posjax", "extrapolate", f"--workdir={workdir}"]]


class _Index:
    """sweep.json, shared by the worker threads."""

    def __init__(self, path: Path, config_file: str, base_arg: str):
        self.path = path
        self.lock = threading.Lock()
        self.data = io.read_json(path, {"config": config_file, "arg": base_arg, "runs": {}})

    def update(self, name: str, **fields) -> None:
        with self.lock:
            self.data["runs"].setdefault(name, {}).update(fields)
            io.write_json(self.path, self.data)


def _summary(workdir: Path) -> dict:
    result = io.read_json(workdir / "extrapolation.json", {})
    stages = io.read_json(workdir / "stages.json", {}).get("stages", [])
    summary = {"ppl": {str(r["length"]): r["ppl"] for r in result.get("lengths", []) if "ppl" in r}}
    if stages:
        summary["final_loss"] = stages[-1]["final_loss"]
    return summary


def _execute(argv: list[str], log, env: dict, show: bool) -> tuple[int, str]:
    """Run `argv`, appending its output to `log` (and its stderr to ours when `show`);
    returns the exit code and the last line of stderr."""
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.PIPE, env=env)
    tail = b""
    for chunk in iter(lambda: proc.stderr.read1(65536), b""):
        log.write(chunk)
        tail = (tail + chunk)[-4096:]
        if show:
            sys.stderr.buffer.write(chunk)
            sys.stderr.flush()
    code = proc.wait()
    lines = [ln for ln in tail.decode(errors="replace").replace("\r", "\n").splitlines()
             if ln.strip()]
    return code, (lines[-1] if lines else f"exit code {code}")


def _run_one(config_file, run, sweepdir, overrides, extrapolate, index, env, show) -> bool:
    workdir = sweepdir / "runs" / run.name
    workdir.mkdir(parents=True, exist_ok=True)
    cmds = commands(config_file, run, sweepdir, overrides)[: 2 if extrapolate else 1]
    index.update(run.name, status="running")
    with open(workdir / "log.txt", "ab") as log:
        for cmd in cmds:
            log.write(f"$ {shlex.join(cmd)}\n".encode())
            log.flush()
            argv = [sys.executable, "-m", "posjax.cli", *cmd[1:]]
            if cmd[1] == "train" and not show:
                argv.append("--noprogress")
            code, error = _execute(argv, log, env, show)
            if code:
                index.update(run.name, status="failed", error=error)
                return False
    index.update(run.name, status="done", error=None, summary=_summary(workdir))
    return True


def run_cli(config_spec: str, sweepdir: str | Path, *, parallel: int = 1, only: str | None = None,
            print_commands: bool = False, overrides=(), extrapolate: bool = True) -> dict:
    """`posjax sweep`: expand, then print commands or run every unfinished run."""
    config_file, _, base_arg = config_spec.partition(":")
    sweepdir = Path(sweepdir)
    runs = expand(config_file, base_arg)
    if only:
        runs = [r for r in runs if fnmatch.fnmatch(r.name, only)]
        if not runs:
            raise ConfigError(f"--only={only!r} matches no run of this sweep")
    if print_commands:
        for run in runs:
            print(" && ".join(shlex.join(c) for c in commands(config_file, run, sweepdir,
                                                                overrides)))
        return {}
    sweepdir.mkdir(parents=True, exist_ok=True)
    index = _Index(sweepdir / "sweep.json", config_file, base_arg)
    for run in runs:
        entry = index.data["runs"].get(run.name, {})
        if entry.get("arg") not in (None, run.arg):
            raise ConfigError(
                f"{sweepdir} already holds run {run.name} with arg {entry['arg']!r}: use a new "
                "--workdir for a different sweep"
            )
        index.update(run.name, arg=run.arg, command=" && ".join(
            shlex.join(c) for c in commands(config_file, run, sweepdir, overrides)),
            status=entry.get("status", "pending") if entry.get("status") == "done" else "pending")
    todo = [r for r in runs if index.data["runs"][r.name]["status"] != "done"]
    env = dict(os.environ)
    # One persistent compilation cache for every run of the sweep (JAX reads these variables).
    # Runs of different encodings share only the ~40 small eager compiles of model and
    # optimizer set-up, each under JAX's default 1 s threshold, so every entry is cached; a
    # resumed run and `posjax extrapolate` after `posjax train` then compile almost nothing
    # (measured in experiments/bench/README.md).
    env.setdefault("JAX_COMPILATION_CACHE_DIR", str(sweepdir.absolute() / ".jax_cache"))
    env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    env = hostenv.with_huge_pages(env) or env
    bar = tqdm(total=len(runs), initial=len(runs) - len(todo), unit="run", desc="sweep")
    with ThreadPoolExecutor(max_workers=max(parallel, 1)) as pool:
        futures = [pool.submit(_run_one, config_file, r, sweepdir, overrides, extrapolate, index,
                               env, parallel <= 1) for r in todo]
        for future in futures:
            future.result()
            bar.update(1)
    bar.close()
    failed = {n: r["error"] for n, r in index.data["runs"].items() if r["status"] == "failed"}
    for name, error in failed.items():
        print(f"failed: {name}: {error}", file=sys.stderr)
    return index.data
