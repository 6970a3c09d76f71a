"""The trainer: one run of a config in a work directory, resumable, in length stages.

`train(config, workdir)` trains one run; `train_seeds` several seeds of one config in one
process, as one vmapped program or the lone run's program stepped on each seed in turn
(`SEED_STEPS`). Both call `train_loop` (checks, files, the restored state), whose loop is
`_train_stages`; each reads top to bottom: read them first. A killed and resumed run leaves
the files of an uninterrupted one (metrics.jsonl is cut back to the restored checkpoint's
step; a checkpoint keeps the metrics window it falls in), a stop signal saves the step
reached, and a checkpoint is saved only while training is healthy (`check_healthy`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from tqdm.auto import tqdm

from posjax import attention, fileio, provenance, registry
from posjax.config import (
    changes_text,
    check_same_tokenizer,
    config_changes,
    config_json,
    read_config_json,
    tokenizer_record,
)
from posjax.errors import ConfigError, unknown
from posjax.experiment import Experiment, Model, Stage, device_memory
from posjax.models.layers import resolve_dtype
from posjax.models.transformer import layer_windows
from posjax.runlock import (
    Interrupted,
    RunLock,
    check_stop,
    noted_until_checked,
    nothing_to_save,
    written,
)
from posjax.train import distributed, finetune, optim, sharding
from posjax.train.checkpoint import Checkpoints, SaveClock, restore_params
from posjax.train.steps import (
    NEVER,
    TrainState,
    accumulate,
    compiled_step_bytes,
    eval_step,
    finish,
    initial_state,
    step_options,
    train_step,
    train_steps,
)

# What `posjax train --seeds` replaces in --workdir with each seed.
SEED_FIELD = "{seed}"

# How one process steps several seeds (posjax train --seed_steps). "vmap" (the default): one
# batched step of them all (`train_steps`), which fills an accelerator that one small model's
# step leaves mostly idle. "in_turn": the lone run's step on each seed after the other, so
# each seed computes what it would alone, bit for bit, where vmapped seeds drift from it by
# rounding; on a CPU about as fast as vmap on one core (0.97-1.05x its time by kind of CPU)
# and faster with more (`seed_threads`; experiments/bench/seed_steps_cpu).
SEED_STEPS = ("vmap", "in_turn")

# A loss this many times that of a uniform guess means training has exploded (the rule above).
EXPLODED = 3.0
# Where the formula's floor (Experiment.memory_floor) reaches this share of a device, XLA's
# compiled step decides whether a stage fits (compiling it from shapes costs what the first
# step's compile costs; below it, no step comes near the device's memory).
COMPILED_CHECK_SHARE = 0.5
# A stage's first step (compiled, then run) that takes longer than this says so: a long
# sequence can compile and run for minutes with the progress bar at 0.
SLOW_FIRST_STEP_S = 15.0


class Scorer(Protocol):
    """What scores a run once it is trained (posjax.eval.evaluation.evaluate_trained), called
    holding the run's lock; `scored` says whether the run's result is already written;
    `check` refuses, before training, what the scoring would refuse after it."""

    def __call__(self, experiment: Experiment, workdir: Path, step: int,
                 params: Any) -> object: ...

    def scored(self, experiment: Experiment, workdir: Path) -> bool: ...

    def check(self, experiment: Experiment) -> None: ...


class Evaluators(Protocol):
    """The run's config.evals, scored while it trains (posjax.eval.during.DuringTraining)."""

    def check(self, experiment: Experiment) -> None: ...

    def due(self, step: int, last_step: int) -> list[str]: ...

    def __call__(self, names: list[str], experiment: Experiment, workdir: Path, step: int,
                 params) -> dict[str, float]: ...


class TrainingDiverged(RuntimeError):
    """The loss became NaN, infinite or exploded; the last good checkpoint is kept."""


def has_checkpoint(workdir: Path) -> bool:
    """Whether the run has saved any training (a start that failed before has not)."""
    directory = workdir / "checkpoints"
    return directory.is_dir() and any(p.name.isdigit() for p in directory.iterdir())


def check_resume(workdir: Path, config, force: bool) -> bool:
    """Refuse to continue a run whose config.json differs in anything that changes results,
    or is gone (checkpoints of an unknown config); whether it differs (and so, with `force`,
    resumes with the new config)."""
    if not has_checkpoint(workdir):
        return False
    saved = read_config_json(workdir)
    if saved is None:
        shown = "no config.json to compare with"
        if not force:
            raise ConfigError(
                f"{workdir} holds a run's checkpoints but no config.json: what it trained with "
                "is unknown, and it would resume as this config: put its config.json back, "
                "use a new --workdir, or --force to resume it with this config")
    else:
        check_same_tokenizer(workdir, saved, config)
        changed = config_changes(saved, config)
        if not changed:
            return False
        shown = changes_text(changed)
        if not force:
            raise ConfigError(
                f"{workdir} holds a run with a different config ({shown}): use a new "
                "--workdir, or --force to resume it with the new config"
            )
    trained = max(int(p.name) for p in (workdir / "checkpoints").iterdir() if p.name.isdigit())
    if trained >= sum(int(stage[2]) for stage in config.train.stages):
        raise ConfigError(
            f"{workdir} has trained {trained} steps, and the new config ({shown}) trains none "
            "past them: --force would only relabel its weights with that config: use a new "
            "--workdir, or give the new config more steps")
    return True


def evaluate(experiment: Experiment, model: Model, params, seq_len: int,
             num_batches: int) -> dict[str, float]:
    """Mean loss and accuracy on the validation data (`num_batches` windows of text), its
    positions drawn as the run's evaluation draws them (`DataKind.prepare`: a task run of
    randomized positions scores on sorted draws, seeded by train.seed, not on 0..T-1)."""
    totals: dict[str, float] = {}
    key = jax.random.key(int(experiment.config.train.seed))
    for index, batch in enumerate(experiment.validation_batches(seq_len, num_batches)):
        batch = experiment.data.prepare(experiment.config, batch, jax.random.fold_in(key, index))
        sums = eval_step(params, model.rest, batch, graphdef=model.graphdef,
                         input_key=experiment.input_key)
        for k, v in sums.items():
            totals[k] = totals.get(k, 0.0) + float(v)
    return finish(totals) if totals else {}


def check_step_memory(experiment: Experiment, tx, stage: Stage) -> None:
    """A one-line ConfigError before any work where XLA's compiled train step of `stage`
    (steps.compiled_step_bytes) cannot fit one device; checked only where the formula's floor
    comes near the device's memory (COMPILED_CHECK_SHARE)."""
    have = device_memory()
    if experiment.memory_floor(stage.seq_len, stage.batch_size) < COMPILED_CHECK_SHARE * have:
        return
    need = compiled_step_bytes(experiment, tx, stage)
    if need > have:
        raise ConfigError(
            f"stage {stage.index + 1} (seq_len={stage.seq_len}, batch {stage.batch_size}): "
            f"XLA's compiled train step needs {need / 2**30:.2f} GiB, more than the "
            f"{have / 2**30:.2f} GiB of this {jax.devices()[0].platform.upper()}: lower the "
            "length or the batch size, or set model.attention=chunked")


def check_healthy(host: dict, *, uniform_loss: float, step: int, last_good: int | None,
                  workdir: Path) -> None:
    """TrainingDiverged at the first step whose loss, gradients or parameters were nan/inf,
    or when the window's loss exploded (host: one run's window sums on the host; the rule:
    module doc)."""
    limit, bad_step = EXPLODED * uniform_loss, int(host["diverged_at"])
    fix = "lower train.learning_rate or raise train.warmup_steps"
    if bad_step != NEVER:
        what = f"loss, gradients or parameters became nan/inf at step {bad_step}"
        if bad_step == 1:  # no update yet: no learning rate made its loss or gradients
            fix = ("step 1's loss and gradients come from the initial parameters, so look "
                   "first at the model's forward pass (an encoding's sites, model.dtype); if "
                   f"it is finite there, {fix}")
    elif finish(host)["loss"] > limit:
        what = (f"the loss exploded to {finish(host)['loss']:.4g} by step {step} "
                f"(above {EXPLODED:g} ln V = {limit:.3g})")
    else:
        return
    kept = ("no checkpoint had been saved" if last_good is None else
            f"the last good checkpoint (step {last_good}) is kept in "
            f"{workdir / 'checkpoints'}")
    raise TrainingDiverged(f"{what}; stopped, {kept}: {fix}")


class _Log:
    """metrics.jsonl, TensorBoard and the progress bar: process 0's; the other processes
    of a multi-process run keep a silent one."""

    def __init__(self, workdir: Path, start_step: int, total_steps: int, show: bool,
                 log_every: int = 1, row_owed: bool = False, shown_as: str = ""):
        """shown_as: the run's name, once before the bar's loss and tokens/s, where several
        seeds share the bar (their numbers are the first seed's)."""
        self.shown_as = shown_as
        # smoothing=0: the rate is the steps since the stage's compiled first step over the
        # time since (`compiled`), as tokens/s is; tqdm's moving average counted that step.
        self.bar = tqdm(total=total_steps, initial=start_step, unit="step", dynamic_ncols=True,
                        smoothing=0, disable=not (show and distributed.is_primary()))
        self.tb, self.primary, self.last_step = None, distributed.is_primary(), None
        if not self.primary:
            return
        self.path = workdir / "metrics.jsonl"
        # Rows past the restored step belong to work that is about to be redone, and a torn
        # last line to a killed write.
        text = self.path.read_text() if self.path.exists() else ""
        every = fileio.read_jsonl(self.path)
        rows = [r for r in every if r.get("step", 0) <= start_step]
        if start_step == 0 and len(every) > len(rows):  # stopped before its first save
            print(f"posjax train: {workdir} stopped before its first checkpoint: training "
                  f"again from step 0 ({len(every) - len(rows)} metrics rows of that attempt "
                  "dropped)", flush=True)
        if text != "".join(fileio.dumps(r) + "\n" for r in rows):
            fileio.write_jsonl(self.path, rows)
        self.logdir, self.start_step = workdir / "tensorboard", start_step
        # a run's folder holds its config.json from the start: one that loses it was deleted
        self.guarded = (workdir / "config.json").is_file()
        self.last_step = rows[-1].get("step") if rows else None
        _say_lost_rows(self.path, self.last_step or 0, start_step - row_owed, log_every)

    def write(self, row: dict) -> None:
        if not self.primary:
            return
        folder = self.path.parent
        if self.guarded and not (folder / "config.json").is_file():  # deleted or moved
            raise ConfigError(f"{folder} lost its config.json while the run trained (the "
                              "folder was deleted or moved): stopped, to write no more into "
                              "it; put the folder back and re-run the same command to resume, "
                              "or train again with a new --workdir")
        with self.path.open("a") as f:
            f.write(fileio.dumps(row) + "\n")
        self.scalars(row, row["step"])
        speed = "compiling" if row["tokens_per_sec"] is None else f"{row['tokens_per_sec']:.0f}"
        self.bar.set_postfix_str(f"{self.shown_as}{': ' if self.shown_as else ''}loss="
                                 f"{row['loss']:.3f}, stage={row['stage']}, tok_s={speed}")

    def scalars(self, values: dict, step: int) -> None:
        if not self.primary:
            return
        if self.tb is None:  # opened by the first scalar: a finished run's re-run adds no file
            # purge_step: TensorBoard hides the killed run's events past the restored step,
            # the same rows that metrics.jsonl just dropped.
            self.tb = fileio.summary_writer(self.logdir, purge_step=self.start_step + 1)
        for k, v in values.items():
            if isinstance(v, (int, float)) and k not in ("step", "stage"):
                self.tb.add_scalar(k, v, step)

    def compiled(self) -> None:
        """After a stage's first step, counted: start the bar's count and clock again here,
        so its rate and ETA are of this stage's steps from here, not of the compilation the
        first step waited for, nor of the earlier stages' time (a second stage's rate was its
        steps over the whole run's time)."""
        if not self.bar.disable:  # a disabled bar keeps no clock
            self.bar.initial = self.bar.n
            self.bar.start_t = self.bar._time()

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        self.bar.close()


def _say_lost_rows(path: Path, last_step: int, upto: int, log_every: int) -> None:
    """A warning line where the rows of `path` end before the last step of `log_every`'s
    schedule at or below `upto` (the step of the checkpoint the run resumes from, less one
    where that step's row is owed): the file was cut or deleted, and those steps are not
    trained again, so their rows are gone."""
    due = upto - upto % max(log_every, 1)
    if last_step < due:
        print(f"warning: {path} holds rows up to step {last_step}, short of step {due} that "
              f"the run's checkpoint passed: the rows of steps {last_step + 1} to {due} were "
              "cut from the file and are not written again", file=sys.stderr)


@dataclasses.dataclass
class _Window:
    """Metric sums of the steps since the last logged row."""

    sums: dict = dataclasses.field(default_factory=dict)
    steps: int = 0
    start: float = dataclasses.field(default_factory=time.perf_counter)
    # Steps before `start` (a process's first step of a stage, which compiles): counted in
    # the metrics, not in tokens/s.
    untimed: int = 0
    first_step_s: float | None = None

    def restart_clock(self, blocking) -> None:
        """After the stage's first step in this process: time it (compilation included) and
        time the window's speed from here."""
        jax.block_until_ready(blocking)
        now = time.perf_counter()
        self.first_step_s, self.start, self.untimed = now - self.start, now, self.steps

    def add(self, batch_sums: dict) -> None:
        self.sums = accumulate(self.sums, batch_sums)
        self.steps += 1

    @staticmethod
    def saved(host: dict, steps: int, row_due: bool) -> dict:
        """One seat's window (host: its sums, on the host) as a checkpoint's JSON keeps it:
        each sum exactly, with its dtype; row_due: the window ends at the checkpoint's step,
        whose row was not written (a stop during its evaluation)."""
        return {"steps": steps, "sums": {k: [np.asarray(v).item(), str(np.asarray(v).dtype)]
                                         for k, v in host.items()},
                **({"row_due": True} if row_due else {})}

    @classmethod
    def resumed(cls, program: _Program, seats: list[_Seat], stage: Stage) -> _Window:
        """The window the seats' restored checkpoints were saved in (the steps since their
        last row, `saved`), so that the next row sums the same steps as an uninterrupted
        run's; an empty one at a row, at a stage's start and for a checkpoint that kept none.
        Its steps are counted in the row, not in its tokens/s: they ran in another process."""
        saved = [seat.data_state.get("window") if seat.data_state.get("stage") == stage.index
                 and seat.last_good == program.step else None for seat in seats]
        if not all(saved) or (saved[0].get("row_due") and not _rows_due(program, seats, stage)):
            return cls()  # (a due row a resumed run wrote before it stopped: the window ended)
        sums = [{k: np.asarray(v, jnp.dtype(dtype)) for k, (v, dtype) in w["sums"].items()}
                for w in saved]
        if program.group:  # [N] per sum, as the program's step returns them
            sums = [{k: np.stack([seat_sums[k] for seat_sums in sums]) for k in sums[0]}]
        return cls(sums=sums[0], steps=saved[0]["steps"], untimed=saved[0]["steps"])


@dataclasses.dataclass
class _Seat:
    """One run of a program: its seed's Experiment and model, its directory and files, its
    data iterator and its last good checkpoint."""

    experiment: Experiment
    workdir: Path
    model: Model
    checkpoints: Checkpoints
    summary: dict  # stages.json
    log: _Log | None = None
    last_good: int | None = None
    data_state: dict = dataclasses.field(default_factory=dict)
    iterator: Any = None
    diverged: str | None = None  # why this seed stopped while its group trained on
    stage_model: Model | None = None  # the model the stage trains: `model`, or its encoding's
    # Finished (stages.json) before this process opened it: nothing to train, and its
    # record of where the training's time went is kept.
    finished_before: bool = False

    def open_stage(self, stage: Stage) -> None:
        """The stage's model and batches, continuing from the checkpointed position when
        resuming it."""
        self.stage_model = self.model if not stage.encoding else (
            self.experiment.evaluation_model(self.experiment.stage_encoding(stage)))
        self.iterator = self.experiment.train_iterator(stage)
        if self.data_state.get("stage") == stage.index and self.last_good is not None:
            self.checkpoints.restore_iterator(self.last_good, self.iterator, self.data_state)

    def evaluate(self, params, seq_len: int) -> dict[str, float]:
        ev = evaluate(self.experiment, self.stage_model or self.model, params, seq_len,
                      self.experiment.config.train.eval_batches)
        return {f"eval_{k}": v for k, v in ev.items()}

    def save(self, step: int, state: TrainState, stage: Stage, window: dict | None) -> None:
        """A checkpoint of `state` at `step`, with the data's position and the metrics
        window it is inside of (`_Window.saved`; None at a row)."""
        data = {"stage": stage.index, **({"window": window} if window else {}),
                **({"cpu_cores": provenance.allowed_cores()}
                   if jax.default_backend() == "cpu" else {})}
        self.checkpoints.save(step, state, data, self.iterator)
        self.last_good = step

    def write_summary(self) -> None:
        if distributed.is_primary():
            fileio.write_json(self.workdir / "stages.json", self.summary)

    def diverge(self, error: TrainingDiverged) -> None:
        """Stop this seed, not its group: recorded in its stages.json ("diverged")."""
        self.diverged = self.summary["diverged"] = str(error)
        self.write_summary()

    def close(self) -> None:
        """Finish the checkpoints in flight, then close the progress bar and logs, also when
        the checkpoints fail (a full disk): the error's line then starts a line of its own."""
        try:
            self.checkpoints.close()
        finally:
            if self.log is not None:
                self.log.close()


@dataclasses.dataclass
class _Program:
    """What the seats of a program share: the model's graph, the optimizer, the mesh, and
    the train state with the compiled step that advances it: `train_step` on one run's
    state; for N seeds (`group`, SEED_STEPS) `train_steps` on their states stacked on a
    leading axis ("vmap"), or `train_step` on each of their N states in turn ("in_turn")."""

    experiment: Experiment  # the first seat's: the seats differ only in train.seed
    graphdef: Any
    tx: Any
    lr_at: Any
    mesh: Any
    state: TrainState | list[TrainState]  # a list: one per seed, "in_turn"
    rest: Any
    step: int  # optimizer steps taken, kept on the host: reading state.step would sync
    group: str  # "" for a lone run, else how it steps its seeds: "vmap" or "in_turn"
    # "in_turn" on a CPU with cores to spare: threads stepping that many seeds at once
    pool: ThreadPoolExecutor | None = None
    # stage index -> seconds of this process's first step of it (compilation included)
    first_step_s: dict = dataclasses.field(default_factory=dict)
    # phase -> this process's wall seconds in it (`timed`; stages.json's "seconds")
    seconds: dict = dataclasses.field(default_factory=dict)

    @contextlib.contextmanager
    def timed(self, phase: str):
        """Add the wall seconds of the block to `seconds[phase]`."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - start

    def phases(self, loop_s: float) -> dict:
        """Where this process's time went, given the training loop's wall seconds: setup
        (models, checks, restoring), first_steps (each stage's first step, compilation
        included), steps (the other steps, with their logging), heldout_eval, checkpoints and
        evals (config.evals) as measured, each rounded to ms."""
        first = sum(self.first_step_s.values())
        measured = {k: v for k, v in self.seconds.items() if k != "setup"}
        return {k: round(v, 3) for k, v in {
            "setup": self.seconds.get("setup", 0.0), "first_steps": first,
            "steps": max(loop_s - first - sum(measured.values()), 0.0), **measured}.items()}

    def enter(self, seats: list[_Seat]) -> None:
        """Step the model of the stage the seats opened (its encoding's graph and rest)."""
        models = [seat.stage_model for seat in seats]
        self.graphdef = models[0].graphdef
        self.rest = program_rest([model.rest for model in models], self.group, self.mesh)

    def advance(self, batches: list[dict], options: dict) -> dict:
        """One optimizer step of every seat on its batch (`options`: the stage's
        steps.step_options); the metric sums (on device; [N] per sum for N seeds)."""
        if self.group == "vmap":
            self.state, sums = train_steps(self.state, self.rest,
                                           stack_batches(batches, self.mesh), **options)
        elif self.group == "in_turn":
            placed = [sharding.global_batch(batch, self.mesh) for batch in batches]
            stepped = list((self.pool.map if self.pool else map)(
                functools.partial(train_step, **options), self.state, self.rest, placed))
            self.state = [state for state, _ in stepped]
            sums = stack_sums([sums for _, sums in stepped])
        else:
            self.state, sums = train_step(
                self.state, self.rest, sharding.global_batch(batches[0], self.mesh), **options)
        self.step += 1
        return sums

    def close(self) -> None:
        """Let the seed threads go (`seed_threads`), if there are any."""
        if self.pool is not None:
            self.pool.shutdown()

    def state_of(self, k: int) -> TrainState:
        """Seat k's train state."""
        if self.group == "vmap":
            return seed_slice(self.state, k)
        return self.state[k] if self.group == "in_turn" else self.state

    def params_of(self, k: int):
        """Seat k's parameters."""
        if self.group == "vmap":  # sliced alone: the optimizer state is not needed
            return seed_slice(self.state.params, k)
        return self.state_of(k).params

    def sums_of(self, host: dict, k: int) -> dict:
        """Seat k's window sums."""
        return {key: v[k] for key, v in host.items()} if self.group else host


def stack_batches(batches: list[dict], mesh) -> dict:
    """The seeds' host batches stacked on a leading seed axis and placed on `mesh` whole
    (replicated), as `train_steps` takes them."""
    stacked = {k: np.stack([b[k] for b in batches]) for k in batches[0]}
    return jax.device_put(stacked, sharding.replicated(mesh))


@jax.jit
def seed_slice(tree, k):
    """Seed k's pytree of seed-stacked `tree` (every leaf [N, ...] -> [...]), in one program:
    indexing leaf by leaf dispatches an op per leaf, which on a CPU cost a vmapped run's
    log rows and checkpoints more than the slicing itself."""
    return jax.tree.map(lambda x: x[k], tree)


def stack_seeds(trees: list) -> Any:
    """The seeds' pytrees (states, model rests) stacked on a new leading seed axis, as
    `train_steps` takes them."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


# The seeds' metric sums of one step stacked as `train_steps` returns them ([N] per sum), in
# one dispatch.
stack_sums = jax.jit(stack_seeds)


def program_rest(rests: list, group: str, mesh) -> Any:
    """The models' rests as the program's step takes them, replicated on `mesh`: the lone
    run's, the seeds' stacked ("vmap") or each seed's ("in_turn")."""
    if group == "in_turn":
        return [jax.device_put(rest, sharding.replicated(mesh)) for rest in rests]
    return jax.device_put(stack_seeds(rests) if group else rests[0], sharding.replicated(mesh))


def _restore(seats: list[_Seat], states: list[TrainState]) -> tuple[int, list[TrainState]]:
    """(step, states) to start from: each run's latest checkpoint, or for a group the newest
    step all its seats have (a kill between the seats' saves leaves some a checkpoint
    ahead); checkpoints past it are removed, as they are about to be redone."""
    restored = [seat.checkpoints.restore_latest(state) for seat, state in zip(
        seats, states, strict=True)]
    ahead = [(seat, found[0]) for seat, found in zip(seats, restored, strict=True) if found]
    # a seed new to the program (its folder never set up; not one a kill stopped before its
    # first save): from step 0 together, the trained seeds' checkpoints would go
    fresh = [seat for seat, found in zip(seats, restored, strict=True)
             if not found and not (seat.workdir / "config.json").is_file()]
    if ahead and fresh:
        (trained, at), new = ahead[0], fresh[0]
        raise ConfigError(
            f"{trained.workdir} has trained to step {at} and {new.workdir} not at all: the "
            f"seeds of one program start from one step, so {trained.workdir} would train "
            f"again from 0; train {new.workdir} alone (its seed alone in --seeds), then "
            "the others")
    step = min(r[0] if r else 0 for r in restored)
    for i, (seat, found) in enumerate(zip(seats, restored, strict=True)):
        if found and found[0] > step and step:
            if step not in seat.checkpoints.manager.all_steps():
                raise ConfigError(
                    f"{seat.workdir} has no checkpoint at step {step}, where the other seeds "
                    "of its program resume: train it alone (posjax train without --seeds)")
            found = (step, *seat.checkpoints.restore(states[i], step))
        if found and found[0] == step:
            seat.last_good, states[i], seat.data_state = found
            seat.checkpoints.check_processes(step, seat.data_state)
        for later in [s for s in seat.checkpoints.manager.all_steps() if s > step]:
            seat.checkpoints.manager.delete(later)
    return step, states


def _open(experiments: list[Experiment], models: list[Model], workdirs: list[Path], tx,
          progress: bool, group: str,
          restoring: list[bool]) -> tuple[_Program, list[_Seat]]:
    """Set up the files and the program's state on the optimizer `tx` (the one the memory
    check compiled with), restored from the latest checkpoint (`_restore`); config.json is
    written once that restore holds (a forced config its checkpoint cannot hold leaves the
    old one). `restoring[k]`: models[k] was built for its checkpoints to replace, not
    started from train.init_from; where none of them is restored after all (unreadable,
    set aside), it starts now as a fresh run does."""
    experiment = experiments[0]
    train = experiment.config.train
    mesh = sharding.make_mesh(train.mesh)

    def state_of(e: Experiment, m: Model) -> TrainState:
        state = initial_state(m.params, tx, e.config.train.seed)
        if group == "vmap":  # a stacked state stays whole on one device (or replicated)
            return state
        return jax.device_put(state, sharding.state_shardings(state, mesh,
                                                              train.sharding_rules))

    states = [state_of(e, m) for e, m in zip(experiments, models, strict=True)]
    seats = [_Seat(e, w, m, Checkpoints(w / "checkpoints"),
                   fileio.read_stages(w / "stages.json", {"stages": []}))
             for e, m, w in zip(experiments, models, workdirs, strict=True)]
    step, states = _restore(seats, states)
    for k, seat in enumerate(seats):
        if restoring[k] and seat.last_good is None:  # training again from step 0
            seat.model = models[k] = finetune.start_from(seat.experiment, seat.model)
            states[k] = state_of(seat.experiment, seat.model)
    forced, kept = "", []
    for e, w in zip(experiments, workdirs, strict=True):  # once the checkpoint holds its state
        if said := _keep_forced(e.config, w, step):
            forced = said
            kept.append(str(w / "forced.json"))
        if step and distributed.is_primary() and (line := e.code_changed_line(w, "trained on")):
            print(line, file=sys.stderr, flush=True)
        _write_config(e, w)
    if step and distributed.is_primary():
        done = " (training had finished)" if step >= experiment.total_steps else ""
        kept_in = f"; the old config.json is kept in {', '.join(kept)}" if kept else ""
        print(f"posjax train: resumed from step {step} of {experiment.total_steps}{done}"
              f"{_other_cores(seats[0].data_state)}{forced}{kept_in}", flush=True)
    for k, seat in enumerate(seats):
        seat.summary.pop("diverged", None)  # trained again from its last good checkpoint
        seat.finished_before = step >= experiment.total_steps and "final_step" in seat.summary
        # a row a stop during its evaluation left owed (`_rows_due`) is written first
        owed = bool(seat.data_state.get("window", {}).get("row_due"))
        seat.log = _Log(seat.workdir, step, experiment.total_steps, progress and k == 0,
                        experiment.config.train.log_every_steps, owed,
                        shown_as=(seat.workdir.name if len(seats) > 1 else ""))
    # A stacked state is placed as the step returns it (replicated on the mesh), so the
    # second step does not compile the program again for another input sharding.
    if group == "vmap":
        state = jax.device_put(stack_seeds(states), sharding.replicated(mesh))
    else:
        state = states if group else states[0]
    program = _Program(
        experiment, models[0].graphdef, tx, optim.schedule(train, experiment.total_steps),
        mesh, state, program_rest([m.rest for m in models], group, mesh), step, group,
        pool=seed_threads(group, len(models)))
    return program, seats


def _other_cores(data_state: dict) -> str:
    """Where a run resumes on a CPU with another number of cores than its checkpoint was
    trained on, the words that say so (XLA:CPU splits its work by its threads, so the
    numbers then agree to float32 rounding, not bit for bit); else nothing."""
    saved, now = data_state.get("cpu_cores"), provenance.allowed_cores()
    if saved is None or jax.default_backend() != "cpu" or saved == now:
        return ""
    return (f", on {now} CPU cores where it trained on {saved}: its "
            "numbers from here agree with an uninterrupted run's to float32 rounding, not bit "
            "for bit")


def seed_threads(group: str, seeds: int) -> ThreadPoolExecutor | None:
    """Threads that step seeds in turn at once on a CPU, one per core this process may use
    (at most one per seed): XLA:CPU runs each lone step on its calling thread, and a small
    model's step spreads over two cores worse than two steps side by side do
    (experiments/bench/seed_steps_cpu). None where there is one core, or not a CPU."""
    workers = min(seeds, provenance.allowed_cores())
    if group != "in_turn" or workers < 2 or jax.default_backend() != "cpu":
        return None
    return ThreadPoolExecutor(workers, thread_name_prefix="posjax-seed")


def _row(program: _Program, window: _Window, stage: Stage, host: dict, now: float) -> dict:
    """The metrics.jsonl row of the window that ends at the current step (host: one seat's
    window sums; now: when its steps ended, before any seat's evaluation)."""
    metrics = finish(host)
    elapsed, timed = now - window.start, window.steps - window.untimed
    row = {
        "step": program.step,
        "stage": stage.index + 1,
        "seq_len": stage.seq_len,
        "loss": metrics["loss"],
        "acc": metrics["acc"],
        "lr": float(program.lr_at(program.step - 1)),
        "grad_norm": float(host["grad_norm"]) / window.steps,
        # None when the window is only the compiling first step: that is not a speed.
        # A seed's speed in a program of several: its own tokens in the program's time.
        "tokens_per_sec": timed * stage.seq_len * stage.batch_size / elapsed if timed else None,
    }
    if window.first_step_s is not None:
        row["first_step_s"] = window.first_step_s
    return row


def _healthy(program: _Program, seats: list[_Seat], host: dict) -> list[tuple[int, _Seat]]:
    """(k, seat) of the seats whose window `host` is healthy (module doc's rule). One that is
    not stops: a lone run raises TrainingDiverged; a seed of a program of seeds is marked
    diverged while the others train on."""
    healthy = []
    for k, seat in enumerate(seats):
        if seat.diverged:
            continue
        try:
            check_healthy(program.sums_of(host, k), uniform_loss=seat.experiment.uniform_loss,
                          step=program.step, last_good=seat.last_good, workdir=seat.workdir)
        except TrainingDiverged as error:
            if not program.group:
                raise
            seat.diverge(error)
            continue
        healthy.append((k, seat))
    return healthy


def _finish_stage(program: _Program, seat: _Seat, stage: Stage, row: dict, params) -> None:
    """Record the stage's final metrics (evaluated now if the row was not) in stages.json."""
    evaluated = {k: v for k, v in row.items() if k.startswith("eval_")}
    if not evaluated and program.experiment.config.train.eval_batches:
        with program.timed("heldout_eval"):
            evaluated = seat.evaluate(params, stage.seq_len)
        seat.log.scalars(evaluated, program.step)
    entry = {
        "stage": stage.index + 1,
        "seq_len": stage.seq_len,
        "batch_size": stage.batch_size,
        "steps": stage.end - stage.begin,
        # where stages differ in encoding, each names its own ("" trains the model's)
        **({"encoding": stage.encoding or program.experiment.config.encoding.name}
           if any(program.experiment.config.train.get("stage_encodings") or ()) else {}),
        "final_loss": row["loss"],
        "final_acc": row["acc"],
        **evaluated,
        **({"first_step_s": first} if (first := _first_step_s(program, seat, stage)) is not None
           else {}),
    }
    seat.summary["stages"] = [s for s in seat.summary["stages"] if s["stage"] != entry["stage"]]
    seat.summary["stages"].append(entry)
    seat.write_summary()


def _first_step_s(program: _Program, seat: _Seat, stage: Stage) -> float | None:
    """The seconds of `stage`'s first step with its compilation, as the process that took it
    wrote it in its first metrics row of the stage (a process that resumed the stage later
    timed its own first step, not the stage's), else this process's."""
    return next((row["first_step_s"] for row in fileio.read_jsonl(seat.workdir / "metrics.jsonl")
                 if row.get("stage") == stage.index + 1 and "first_step_s" in row),
                program.first_step_s.get(stage.index))


def _log(program: _Program, seats: list[_Seat], window: _Window, stage: Stage,
         evals: Evaluators | None, only: list[_Seat] | None = None) -> None:
    """Each healthy seat's row (or `only` these seats') of the window that ends now, with
    the evaluations due (`_due`); at the stage's end, its stages.json entry. Every row is
    evaluated before any is written: a stop during an evaluation leaves none of this step."""
    host = jax.device_get(window.sums)
    # one end for every seed's speed: a later seed's is not slowed by the earlier ones' evals
    steps_ended = time.perf_counter()
    evaluate_now, due, _ = _due(program, stage, evals)
    ends, rows = program.step == stage.end, []
    for k, seat in _healthy(program, seats, host):
        if only is not None and not any(seat is other for other in only):
            continue
        row = _row(program, window, stage, program.sums_of(host, k), steps_ended)
        params = program.params_of(k) if evaluate_now or due or ends else None
        if evaluate_now:
            with program.timed("heldout_eval"):
                row.update(seat.evaluate(params, stage.seq_len))
        if due:
            with program.timed("evals"):
                row.update(evals(due, seat.experiment, seat.workdir, program.step, params))
        rows.append((seat, row, params))
    for seat, row, params in rows:
        seat.log.write(row)
        if ends:
            _finish_stage(program, seat, stage, row, params)


def _due(program: _Program, stage: Stage, evals: Evaluators | None
         ) -> tuple[bool, list[str], bool]:
    """(held-out evaluation, config.evals entries, a metrics row) due at the current step."""
    step, train = program.step, program.experiment.config.train
    stage_end = step == stage.end
    evaluate_now = bool(train.eval_every_steps) and (
        step % train.eval_every_steps == 0 or stage_end)
    due = evals.due(step, program.experiment.total_steps) if evals else []
    row = step % train.log_every_steps == 0 or stage_end or evaluate_now or bool(due)
    return evaluate_now, due, row


def _save(program: _Program, seats: list[_Seat], window: _Window, stage: Stage,
          row_due: bool = False) -> None:
    """A checkpoint of each healthy seat (the steps since the last row are checked first),
    timed as "checkpoints" from when the steps still queued are done: theirs is step time.
    row_due: the window ends at this step, whose row is still to be written (`_rows_due`).
    The save's seconds are left out of the window's tokens/s: they are no step's."""
    jax.block_until_ready(program.state)
    begun = time.perf_counter()
    with program.timed("checkpoints"):
        host = jax.device_get(window.sums) if window.steps else None
        if host is not None:
            healthy = _healthy(program, seats, host)
        else:
            healthy = [(k, seat) for k, seat in enumerate(seats) if not seat.diverged]
        for k, seat in healthy:
            seat.save(program.step, program.state_of(k), stage, None if host is None else (
                _Window.saved(program.sums_of(host, k), window.steps, row_due)))
    window.start += time.perf_counter() - begun


def _save_at_stop(program: _Program, seats: list[_Seat], window: _Window, stage: Stage,
                  row_due: bool = False) -> None:
    """A stop signal came between two steps (runlock.noted_until_checked), or during an
    evaluation of the step's row (`row_due`): a checkpoint of the step reached, unless it has
    one, so that the re-run loses no step. Not in a run of several processes: the save is
    collective, and each process sees the signal at a step of its own."""
    if jax.process_count() == 1 and program.step and any(
            seat.last_good != program.step for seat in seats if not seat.diverged):
        _save(program, seats, window, stage, row_due)


def _rows_due(program: _Program, seats: list[_Seat], stage: Stage) -> list[_Seat]:
    """The seats whose restored checkpoint a stop during the evaluation of its step's row
    saved (`_save_at_stop`), whose metrics.jsonl lacks that row: a resumed run writes it
    first, evaluated as the stopped run would have."""
    return [seat for seat in seats if not seat.diverged and seat.last_good == program.step
            and seat.data_state.get("stage") == stage.index
            and seat.data_state.get("window", {}).get("row_due")
            and seat.log.last_step != program.step]


@contextlib.contextmanager
def _watch_first_step(program: _Program, stage: Stage, seats: list[_Seat]):
    """Around a step. The first of a stage in this process says so on the progress bar if it
    takes over SLOW_FIRST_STEP_S; during the process's very first one nothing is worth saving
    yet, so a stop signal ends the process at once (runlock.nothing_to_save), in the line
    of a stopped run (`_interrupted`)."""
    bar = seats[0].log.bar
    if stage.index in program.first_step_s:
        yield
        return
    notice = threading.Timer(SLOW_FIRST_STEP_S, bar.write, [
        f"stage {stage.index + 1}: compiling the first step (seq_len {stage.seq_len}, batch "
        f"{stage.batch_size}) and running it takes over {SLOW_FIRST_STEP_S:.0f} s ..."])
    notice.daemon = True
    with (nothing_to_save(str(_interrupted(program, seats))) if not program.first_step_s
          else contextlib.nullcontext()):
        notice.start()
        try:
            yield
        finally:
            notice.cancel()


def _first_step_done(program: _Program, stage: Stage, window: _Window, log: _Log) -> None:
    """After this process's first step of `stage` (compiled, then run): time it, say so, and
    time the bar's rate and tokens/s from the next step."""
    window.restart_clock(program.state)
    program.first_step_s[stage.index] = window.first_step_s
    timed = ("it was the stage's last, so no rate is timed" if program.step >= stage.end
             else "the bar's rate and tokens/s are timed from the next step")
    log.bar.write(f"stage {stage.index + 1}: first step {window.first_step_s:.1f} s (with "
                  "the compilation of its program, where no earlier stage of its shape "
                  f"compiled it); {timed}")
    log.compiled()


def _close_after(error: BaseException, program: _Program, seats: list[_Seat]
                 ) -> Interrupted | None:
    """Close the seats (their checkpoints in flight finish) after `error` stopped the loop;
    for a stop signal, the exception that says where the re-run starts (`_interrupted`)."""
    # With a process gone, closing would wait for it in the checkpoint barrier.
    if not distributed.peer_failed(error):
        for seat in seats:
            seat.close()
    return _interrupted(program, seats) if isinstance(error, KeyboardInterrupt) else None


def _interrupted(program: _Program, seats: list[_Seat]) -> Interrupted:
    """A stopped run's line: the step it stopped at and where its re-run starts (its last
    checkpoint on disk, or step 0 where none was saved yet: the steps between are trained
    again)."""
    saved = [max((int(p.name) for p in seat.checkpoints.directory.glob("*")
                  if p.name.isdigit()), default=None) for seat in seats]
    if None in saved:
        return Interrupted(
            f"interrupted at step {program.step}, before its first checkpoint: the same "
            "command trains it again from step 0")
    if min(saved) >= program.experiment.total_steps:  # stopped after the last step was saved
        return Interrupted(f"interrupted after its last step, {program.step}, was saved: "
                           "re-run the same command to finish what comes after training")
    return Interrupted(f"interrupted at step {program.step}: re-run the same command "
                               f"to resume from its checkpoint at step {min(saved)}")


def _warn_of_main_entries(config) -> list[list[str]]:
    """A warning line naming the entries this run uses that a notebook or script registered
    (registry.from_main), which later commands on the run cannot import; returns them."""
    names = set(re.findall(registry.NAME, json.dumps(config_json(config))))
    if found := registry.from_main(sorted(names)):
        print(f"warning: {', '.join(map(registry.entry_text, found))} registered in __main__ "
              "(this notebook or script), which later commands on this run (posjax "
              "extrapolate, plot, sweep) cannot import: define it in a file that your config "
              "file imports (docs/extending.md)", file=sys.stderr)
    return found


def _keep_forced(config, workdir: Path, step: int) -> str:
    """Where --force resumes the run at `step` with a config that differs from its
    config.json: that config.json appended to WORKDIR/forced.json with the step and the
    changes (so no earlier config is lost), and the words that say what changed and where the
    learning rate jumps; else "". A re-run after an interrupt appends nothing twice."""
    saved = read_config_json(workdir) if step else None
    changed = config_changes(saved, config) if saved is not None else []
    if not changed:
        return ""
    rates = [float(optim.schedule(train, sum(int(s[2]) for s in train.stages))(step))
             for train in (ml_collections.ConfigDict(saved["train"]), config.train)]
    path = workdir / "forced.json"
    history = fileio.read_json(path) or []
    last = history[-1] if history else {}
    if distributed.is_primary() and (last.get("step"), last.get("changes")) != (step, changed):
        history.append({"step": step, "changes": changed,
                        "config": fileio.read_json(workdir / "config.json")})
        fileio.write_json(path, history)
    return (f" with --force's changed config ({changes_text(changed)}): the learning rate at "
            f"step {step} is {rates[1]:.3g} (the old schedule's: {rates[0]:.3g})")


def _write_config(experiment: Experiment, workdir: Path) -> None:
    """config.json: the run's config, the user's files it imports, and its provenance (the
    machine, the tokenizer, the dtypes and `code_sha1`, the user's code it trains with)."""
    config = experiment.config
    if distributed.is_primary():
        # the user's files that registered code (a config file's own encoding, ...): every
        # later command on the run imports them again (posjax.registry)
        imports = registry.user_files()
        from_main = _warn_of_main_entries(config)  # named when a later command lacks them
        fileio.write_json(workdir / "config.json", {
            **config_json(config),
            **({"imports": imports} if imports else {}),
            **({"from_main": from_main} if from_main else {}),
            "provenance": {**provenance.provenance(), **tokenizer_record(config), "dtypes": {
                "compute": resolve_dtype(config.model.dtype),
                "params": config.model.param_dtype},
                **({"code_sha1": code} if (code := experiment.code_sha1()) else {})}})


def _finish(program: _Program, seat: _Seat, k: int, evaluate: Scorer | None,
            loop_s: float, last: bool) -> None:
    """A trained seat's final stages.json and hparams, then (`evaluate`) its evaluation of
    the parameters in memory. stages.json's "seconds": where the process's time went
    (`_Program.phases`, shared by the seeds of a program), and "score", this seat's
    evaluation. A seat finished before this process opened it keeps its stages.json and
    hparams, and is scored only where its result is missing: a repeated command redoes
    nothing. `last`: no seat is scored after this one (a stop once its result is written
    leaves nothing to resume)."""
    if seat.diverged:
        return
    if not seat.finished_before:
        last = len(program.experiment.stages)
        if not any(entry.get("stage") == last for entry in seat.summary["stages"]):
            raise ConfigError(  # written when the stage ended, before its last checkpoint
                f"{seat.workdir / 'stages.json'} has no record of stage {last}, which its "
                f"checkpoint at step {program.step} finished (the file was deleted or edited): "
                "restore it from a copy, or train the run again in a new --workdir")
        seat.summary["final_step"] = program.experiment.total_steps
        seat.summary["seconds"] = program.phases(loop_s)
        seat.write_summary()
        if distributed.is_primary():
            write_hparams(seat.workdir, seat.experiment.config, seat.summary["stages"][-1])
    if evaluate is None:
        return
    if seat.finished_before and evaluate.scored(seat.experiment, seat.workdir):
        _say_scored_before(seat.workdir)
        return
    start = time.perf_counter()
    try:
        evaluate(seat.experiment, seat.workdir, program.step, program.params_of(k))
    except KeyboardInterrupt as stop:  # training is done: what the re-run does is score
        if isinstance(stop, Interrupted):
            raise
        if evaluate.scored(seat.experiment, seat.workdir):  # stopped after the write
            raise Interrupted(_nothing_left([seat.workdir], scored=True) if last else (
                f"interrupted after scoring {seat.workdir}: re-run the same command to "
                "score the runs of the other seeds")) from None
        raise Interrupted(f"interrupted while scoring {seat.workdir}, whose training had "
                          "finished: nothing of its evaluation was written; re-run the same "
                          "command to score it") from None
    except ConfigError as e:  # the training is kept: only its scoring needs another go
        raise ConfigError(f"{seat.workdir} finished training (its checkpoint at step "
                          f"{program.step} is saved), then scoring it failed: {e}; score it "
                          f"with `posjax extrapolate --workdir={seat.workdir}` and the flags "
                          "that fix that") from e
    seat.summary.setdefault("seconds", {})["score"] = round(time.perf_counter() - start, 3)
    seat.write_summary()


def _nothing_left(workdirs: list[Path], scored: bool) -> str:
    """The line of a stop after every run of the command trained (and was scored)."""
    return (f"interrupted after training finished{' and scored' * scored}: nothing is left "
            f"to resume; results in {' '.join(map(str, workdirs))}")


def _say_scored_before(workdir: Path) -> None:
    """The line a repeated --extrapolate prints for a run it does not score again."""
    if distributed.is_primary():
        print(f"posjax train: {workdir} was scored when it finished; posjax extrapolate "
              f"--workdir={workdir} scores it again", flush=True)


def train_loop(configs: list, workdirs: list[Path], *, force: bool, progress: bool,
               group: str, evaluate: Scorer | None,
               evals: Evaluators | None = None) -> list[dict]:
    """Train `configs` in their `workdirs`, continuing from their latest checkpoints; their
    stages summaries (stages.json).

    Two modes, one loop. A lone run: one config, `group` "", `steps.train_step` on its
    state, sharded over the mesh. Several seeds of one config in one process: the configs
    differ only in train.seed, each seed with its own initialisation and data order in every
    stage (`Experiment.train_iterator`), and `group` says how they step (SEED_STEPS): "vmap",
    `steps.train_steps` (jax.vmap of the same step over a leading seed axis of the state and
    the batches), so seed k's losses are seed k's alone up to rounding; "in_turn",
    `steps.train_step` on each seed's own state, so they are seed k's alone bit for bit.
    Each run is a seat (`_Seat`): its own directory, data iterator, metrics and checkpoints,
    written as a lone run writes them; a seed that diverges stops alone ("diverged" in its
    stages.json) while the others train on. A lone run is a program of one seat.

    evaluate: scores each seat's final parameters; evals: config.evals, scored on schedule
    while training, their numbers in that step's metrics row.
    """
    # -- Resolve and check everything before anything is written.
    started = time.perf_counter()
    experiments = [Experiment.from_config(config) for config in configs]
    experiment, train = experiments[0], configs[0].train
    sharding.check(configs[0], [stage.batch_size for stage in experiment.stages])
    check_config(experiment)
    tx = optim.optimizer(train, experiment.total_steps)
    for stage in experiment.stages:
        experiment.check_memory(stage.seq_len, stage.batch_size)  # a formula's floor
        check_step_memory(experiment, tx, stage)  # XLA's compiled step, where that is close
    # A fresh run with train.init_from starts from that run's parameters; a resumed one
    # restores its own (or, where none of its checkpoints reads, starts so then: _open).
    restoring = [has_checkpoint(w) for w in workdirs]
    models = [e.build() if r else finetune.start_from(e, e.build())
              for e, r in zip(experiments, restoring, strict=True)]
    experiment.check_data()
    if evals:
        evals.check(experiment)
    if evaluate is not None:
        evaluate.check(experiment)
    for workdir in workdirs:
        fileio.check_writable(workdir, inside=("checkpoints", "tensorboard", "metrics.jsonl"))
        check_run_folder(workdir)
    with contextlib.ExitStack() as locks:
        # -- Lock each run directory; refuse a resume whose config changed.
        for config, workdir in zip(configs, workdirs, strict=True):
            locks.enter_context(RunLock(workdir, process=jax.process_index()))
            check_resume(workdir, config, force)
        if jax.process_index() == 0:  # a run refused above prints its one line alone
            print(f"posjax train: {device_line(configs[0])}", *reference_lines(configs[0]),
                  *window_lines(experiments[0]), sep="\n", flush=True)
        # -- The optimizer, the mesh and the state, restored from the latest checkpoint,
        # and config.json.
        program, seats = _open(experiments, models, workdirs, tx, progress, group,
                               restoring)
        locks.callback(program.close)
        clock = SaveClock(train.checkpoint_every_minutes)  # checkpoints by wall time too
        loop_start = time.perf_counter()
        program.seconds["setup"] = loop_start - started
        try:
            _train_stages(program, seats, clock, evals)
        except BaseException as error:
            stopped = _close_after(error, program, seats)
            if stopped:
                raise stopped from None
            raise
        # -- Finished (the last checkpoints written): each seat's stages.json and hparams,
        # then its evaluation.
        with program.timed("checkpoints"):
            for seat in seats:
                seat.close()
        loop_s = time.perf_counter() - loop_start
        for k, seat in enumerate(seats):
            _finish(program, seat, k, evaluate, loop_s, last=k == len(seats) - 1)
        if not any(seat.diverged for seat in seats):  # a stop from here on: nothing to redo
            written(_nothing_left(workdirs, scored=evaluate is not None))
    return [seat.summary for seat in seats]


def _train_stages(program: _Program, seats: list[_Seat], clock: SaveClock,
                  evals: Evaluators | None) -> None:
    """Train the seats through the stages still to train, from `program.step`: the loop the
    module doc describes. A stop signal is acted on between two steps (check_stop), where
    a checkpoint of the step reached is saved first (`_save_at_stop`)."""
    experiment, train = program.experiment, program.experiment.config.train
    with noted_until_checked():
        for stage in experiment.stages:
            if program.step > stage.end or (program.step == stage.end
                                            and not _rows_due(program, seats, stage)):
                continue
            # -- A stage: each seat's model and batches, and the step options, built
            # once (a stage of train.stage_encodings steps that encoding's model).
            for seat in seats:
                seat.open_stage(stage)
            program.enter(seats)
            options = step_options(experiment, program.graphdef, program.tx, stage)
            window = _Window.resumed(program, seats, stage)
            if due_rows := _rows_due(program, seats, stage):  # its stop's evaluation
                _log(program, seats, window, stage, evals, only=due_rows)
                window = _Window()
            while program.step < stage.end and not all(seat.diverged for seat in seats):
                try:
                    check_stop()
                except KeyboardInterrupt:  # between two steps: the last one is whole
                    _save_at_stop(program, seats, window, stage)
                    raise
                # -- One optimizer step of every seat.
                with _watch_first_step(program, stage, seats):
                    window.add(program.advance([next(s.iterator) for s in seats], options))
                    for seat in seats:
                        seat.log.bar.update(1)
                    if stage.index not in program.first_step_s:
                        _first_step_done(program, stage, window, seats[0].log)
                step, stage_end = program.step, program.step == stage.end
                # -- On schedule: a metrics row per seat, with the held-out evaluation
                # and config.evals' entries when due; at a stage's end, its
                # stages.json entry.
                if _due(program, stage, evals)[2]:
                    try:
                        _log(program, seats, window, stage, evals)
                    except KeyboardInterrupt:  # in an evaluation: no row of this step yet
                        _save_at_stop(program, seats, window, stage, row_due=True)
                        raise
                    window = _Window()
                    for seat in seats:  # a checkpoint that failed in its thread stops us here
                        seat.checkpoints.check()
                # -- On schedule (steps, or minutes since the last save): a checkpoint
                # of each healthy seat.
                if step % train.checkpoint_every_steps == 0 or stage_end or clock.due():
                    _save(program, seats, window, stage)
                    clock.saved()
        check_stop()  # one noted during the last step (its checkpoint is saved)


def device_line(config) -> str:
    """Where a run computes: the devices JAX sees and the activations' dtype there; on a
    CPU kept to some of the machine's cores (a sweep's share, hostenv.pin_to_cpus), how many;
    and a kernel that runs interpreted here (flash_bias off a GPU)."""
    devices = jax.devices()
    kinds = ", ".join(sorted({d.device_kind for d in devices}))
    line = (f"on {len(devices)} x {kinds} ({devices[0].platform}), activations "
            f"{resolve_dtype(config.model.dtype)}")
    if devices[0].platform == "cpu":
        allowed, total = provenance.allowed_cores(), os.cpu_count()
        if allowed < total:
            line += f", {allowed} of {total} CPU cores"
    if attention.interpreted_here(config.model.attention):
        line += f", attention {config.model.attention}: {attention.INTERPRETED}"
    return line


def reference_lines(config) -> list[str]:
    """The run's stages, each beside the stage of the schedule it scales down
    (train.reference, train.reference_stages); none when the config names no reference."""
    if not config.train.get("reference"):
        return []
    ours, theirs = ([" x ".join(map(str, s)) for s in stages] for stages in (
        config.train.stages, config.train.reference_stages))
    width = max(map(len, ours))
    lines = [f"posjax train: the stages (seq_len x batch x steps), in brackets those of "
             f"{config.train.reference}:"]
    for i in range(max(len(ours), len(theirs))):
        mine, paper = (s[i] if i < len(s) else "-" for s in (ours, theirs))
        lines.append(f"  {i + 1}: {mine:<{width}}  ({paper})")
    shares = [longest_share(s) for s in (config.train.stages, config.train.reference_stages)]
    lines.append(f"  tokens in the longest rows' stages: {shares[0]:.1%} here, {shares[1]:.1%} "
                 "there")
    return lines


def window_lines(experiment: Experiment) -> list[str]:
    """A line where a layer's sliding window is no shorter than the longest training rows:
    that layer trains as a global one (arch=gemma3's window of 1024 at seq_len 128), and
    slides only where an evaluation is longer than its window."""
    longest = max(stage.seq_len for stage in experiment.stages)
    unused = sorted({w for w in layer_windows(experiment.model_config) if w >= longest})
    if not unused:
        return []
    return [f"posjax train: a sliding window of {unused[0]} tokens (model.window, or a "
            f"layer_pattern entry's) is not shorter than the longest training rows ({longest}):"
            f" its layers train as global ones and slide only in evaluations past it (window=W "
            "in configs/lm.py's arg fits it to the rows: arch=gemma3,window=32)"]


def longest_share(stages) -> float:
    """The share of a schedule's tokens (seq_len x batch x steps per stage) spent in the
    stages at its longest length: what rounding steps to a floor can shift."""
    longest = max(n for n, _, _ in stages)
    return (sum(n * b * s for n, b, s in stages if n == longest)
            / sum(n * b * s for n, b, s in stages))


def check_config(experiment: Experiment) -> None:
    """What `train` refuses of a run's config before it writes anything, less what reads its
    data, memory or folder, and the model it builds: the optimizer's settings, the stages'
    encodings and the positions drawn. A sweep checks every run so as it plans
    (posjax.launch.sweep)."""
    optim.check(experiment.config.train, experiment.total_steps)
    experiment.check_stage_encodings()
    experiment.check_positions_read()


# What marks a folder as a checkout or a Python package, which no run is trained into.
_NOT_RUN_FOLDERS = {".git": "a checkout", "pyproject.toml": "a checkout",
                    "__init__.py": "a Python package"}


def check_run_folder(workdir: Path) -> None:
    """A one-line ConfigError where `workdir` is a folder of other things than a run: a
    sweep's (its sweep.json), or, for a new run (no config.json yet), one holding runs
    (folders with a config.json: a sweep's runs/, a plot's copies), a checkout or a package.
    A run trained there would mix its files with theirs (the plot of that folder failed)."""
    if (workdir / "sweep.json").exists():
        raise ConfigError(f"{workdir} is a sweep's folder (its sweep.json; its runs are in "
                          f"{workdir / 'runs'}): give the run a --workdir of its own")
    if not workdir.is_dir() or (workdir / "config.json").exists():
        return
    runs = sorted(p.name for p in workdir.iterdir() if (p / "config.json").is_file())
    if runs:
        raise ConfigError(f"{workdir} holds runs ({', '.join(runs[:3])}"
                          f"{', ...' if len(runs) > 3 else ''}), not a run of its own: give "
                          f"the run a --workdir of its own, e.g. {workdir / 'NAME'}")
    marker = next((name for name in _NOT_RUN_FOLDERS if (workdir / name).exists()), None)
    if marker:
        raise ConfigError(f"{workdir} is {_NOT_RUN_FOLDERS[marker]} (its {marker}), not a "
                          "run's folder: give the run a --workdir of its own, e.g. runs/NAME")


def train(config, workdir: str | Path, *, force: bool = False, progress: bool = True,
          cluster: distributed.Cluster = distributed.ONE_PROCESS,
          evaluate: Scorer | None = None, evals: Evaluators | None = None) -> dict:
    """Train (or continue training) `config` in `workdir`; returns the stages summary.
    evaluate: then score the parameters in memory with it (`posjax train --extrapolate`
    passes posjax.eval.evaluation.evaluate_trained); evals: config.evals while it trains
    (`posjax train` passes posjax.eval.during.DuringTraining).

    cluster: this process's place in a multi-process run (posjax.train.distributed)."""
    # Before any use of the devices (validation counts them).
    distributed.initialize(cluster, auto=bool(config.train.distributed))
    return train_loop([config], [Path(workdir)], force=force, progress=progress,
                      group="", evaluate=evaluate, evals=evals)[0]


def check_seed_steps(name: str) -> None:
    """A ConfigError naming the valid ways where `name` is not one of SEED_STEPS."""
    if name not in SEED_STEPS:
        raise unknown("--seed_steps way", name, SEED_STEPS)


def seeds_per_program(experiment: Experiment, count: int) -> int:
    """How many of `count` seeds one program trains: all, or as many as one device's memory
    holds by `memory_floor` of the largest stage (the rest go in later programs)."""
    need = max(experiment.memory_floor(s.seq_len, s.batch_size) for s in experiment.stages)
    return max(1, min(count, device_memory() // need))


def run_dir(workdir: str, seed: int) -> Path:
    """Seed `seed`'s run directory: `workdir` with {seed} replaced."""
    return Path(workdir.replace(SEED_FIELD, str(seed)))


def train_seeds(config, workdir: str, seeds, *, force: bool = False, progress: bool = True,
                evaluate: Scorer | None = None, evals: Evaluators | None = None,
                seed_steps: str = "vmap") -> dict[Path, dict]:
    """Train `config` with each train.seed in `seeds` in this process, seed k in
    `run_dir(workdir, k)`, which ends as a lone run of seed k would leave it. seed_steps
    (SEED_STEPS): one vmapped program (in chunks of `seeds_per_program`), or the lone run's
    program on each seed in turn. A seed already finished, or recorded as diverged, is not
    trained again (train a diverged one alone to retry it). {run directory: stages summary}."""
    check_seed_steps(seed_steps)
    if SEED_FIELD not in workdir:
        raise ConfigError(f"--workdir={workdir} has no {SEED_FIELD}, which --seeds fills to "
                          f"name each seed's run directory: e.g. --workdir='runs/rope,seed="
                          f"{SEED_FIELD}' (posjax plot averages folders named NAME,seed=K)")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds={','.join(map(str, seeds))} names a seed twice: give each "
                          "once")
    if jax.process_count() > 1:
        raise ConfigError("--seeds trains in one process: run a multi-process run alone")
    summaries = {run_dir(workdir, seed): fileio.read_stages(
        run_dir(workdir, seed) / "stages.json", {}) for seed in seeds}
    finished = [seed for seed in seeds if "final_step" in summaries[run_dir(workdir, seed)]]
    # A finished seed's config is checked as a lone run's re-run checks it: a change is
    # refused, or with --force trains the seed on (`check_resume`).
    forced = {seed for seed in finished
              if check_resume(run_dir(workdir, seed), _with_seed(config, seed), force)}
    pending = [seed for seed in seeds if seed in forced or not {"final_step", "diverged"} & set(
        summaries[run_dir(workdir, seed)])]
    # Seeds finished before this command (a diverged one is reported as an error later).
    before = [run_dir(workdir, seed) for seed in finished if seed not in forced]
    for path in before:
        print(f"posjax train: {path}: training had finished", flush=True)
    chunk = (seeds_per_program(Experiment.from_config(config), len(pending) or 1)
             if seed_steps == "vmap" else len(pending) or 1)
    for i in range(0, len(pending), chunk):
        part = pending[i:i + chunk]
        configs = [_with_seed(config, seed) for seed in part]
        trained = train_loop(configs, [run_dir(workdir, seed) for seed in part],
                              force=force, progress=progress, group=seed_steps,
                              evaluate=evaluate, evals=evals)
        summaries.update(zip([run_dir(workdir, seed) for seed in part], trained, strict=True))
    if evaluate is not None:  # a seed trained before: scored where that did not happen
        for path in before:
            experiment = Experiment.from_workdir(path)
            if evaluate.scored(experiment, path):
                _say_scored_before(path)
                continue
            with RunLock(path, process=jax.process_index()):
                evaluate(experiment, path, *restore_params(experiment, path))
    return summaries


def _with_seed(config, seed: int):
    copy = config.copy_and_resolve_references()
    copy.train.seed = seed
    return copy


def hparams(config) -> dict:
    """What tells runs of a sweep apart, for TensorBoard's HParams view: the encoding and its
    hyperparameters, the training length, budget and seed, the model's size."""
    values = {f"encoding.{k}": v for k, v in config.encoding.to_dict().items()}
    values.update({
        "train_len": max(s[0] for s in config.train.stages),
        "steps": sum(s[2] for s in config.train.stages),
        "learning_rate": config.train.learning_rate, "seed": config.train.seed,
        "d_model": config.model.d_model, "num_layers": config.model.num_layers,
        "attention": config.model.attention,
    })
    return {k: v if isinstance(v, (int, float, str, bool)) else str(v)
            for k, v in values.items()}


def write_hparams(workdir: Path, config, last_stage: dict) -> None:
    """The run's hparams and final metrics into its TensorBoard folder (once per finish)."""
    metrics = {f"final/{k}": v for k, v in last_stage.items()
               if k in ("final_loss", "final_acc", "eval_loss", "eval_acc")}
    with fileio.summary_writer(workdir / "tensorboard") as writer:
        writer.add_hparams(hparams(config), metrics, name="hparams")
