"""The trainer: one run of a config in a work directory, resumable, in length stages.

`train(config, workdir)` resolves the config into an `Experiment`, restores the latest
checkpoint if there is one, and runs its stages — (seq_len, batch_size, steps) in order, as in
RoFormer's length schedule — writing metrics.jsonl, TensorBoard events, stages.json and orbax
checkpoints (periodic and at each stage end, with the data iterator's state). Running the same
command again continues where the last checkpoint left off, and cuts metrics.jsonl back to
that checkpoint's step, so a killed and resumed run leaves the files of an uninterrupted one.

A checkpoint is saved only while training is healthy: every step since the last one had a
finite loss, finite gradients and finite parameters, and the mean loss over the steps since
the last logged row is at most EXPLODED x ln(V), the loss of a uniform guess over the V
outputs (training starts near 1 x). A run that breaks either rule stops, and its last
checkpoint is a good one. While a process trains a run, the run directory is locked.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import jax
from tqdm.auto import tqdm

from posjax import io, provenance
from posjax.errors import ConfigError
from posjax.experiment import Experiment, Model, Stage, read_config_json
from posjax.models.layers import resolve_dtype
from posjax.runlock import RunLock, check_stop
from posjax.train import distributed, optim, sharding
from posjax.train.checkpoint import Checkpoints
from posjax.train.steps import NEVER, TrainState, accumulate, eval_step, finish, train_step

# Config keys that may change between an interrupted run and its resumption: they change how
# a run is observed or evaluated, not what it computes.
RESUMABLE_CHANGES = (
    "eval",
    "provenance",
    "train.log_every_steps",
    "train.checkpoint_every_steps",
    "train.eval_every_steps",
    "train.eval_batches",
    "data.data_dir",
)


# A loss this many times that of a uniform guess means training has exploded (the rule above).
EXPLODED = 3.0


class TrainingDiverged(RuntimeError):
    """The loss became NaN, infinite or exploded; the last good checkpoint is kept."""


def _flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    flat = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            flat.update(_flatten(v, key + "."))
        else:
            flat[key] = v
    return flat


def config_json(config) -> dict:
    """The resolved config as JSON-able data (tuples become lists)."""
    return json.loads(config.to_json_best_effort())


def has_checkpoint(workdir: Path) -> bool:
    """Whether the run has saved any training (a start that failed before has not)."""
    directory = workdir / "checkpoints"
    return directory.is_dir() and any(p.name.isdigit() for p in directory.iterdir())


def check_resume(workdir: Path, config, force: bool) -> None:
    """Refuse to continue a run whose config.json differs in anything that changes results."""
    saved = read_config_json(workdir) if has_checkpoint(workdir) else None
    if saved is None:
        return
    old, new = _flatten(saved), _flatten(config_json(config))
    for flat in (old, new):  # "auto" is the dtype it resolves to here
        flat["model.dtype"] = resolve_dtype(flat.get("model.dtype", "float32"))
    changed = sorted(
        k
        for k in old.keys() | new.keys()
        if old.get(k) != new.get(k) and not k.startswith(RESUMABLE_CHANGES)
    )
    if changed and not force:
        shown = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in changed[:4])
        raise ConfigError(
            f"{workdir} holds a run with a different config ({shown}"
            f"{', ...' if len(changed) > 4 else ''}): use a new --workdir, or --force to resume "
            "it with the new config"
        )


def evaluate(experiment: Experiment, model: Model, params, seq_len: int,
             num_batches: int) -> dict[str, float]:
    """Mean loss and accuracy on the validation data (`num_batches` windows of text)."""
    totals: dict[str, float] = {}
    for batch in experiment.validation_batches(seq_len, num_batches):
        sums = eval_step(params, model.rest, batch, graphdef=model.graphdef,
                         input_key=experiment.input_key)
        for k, v in sums.items():
            totals[k] = totals.get(k, 0.0) + float(v)
    return finish(totals) if totals else {}


class _Log:
    """metrics.jsonl, TensorBoard and the progress bar: process 0's; the other processes
    of a multi-process run keep a silent one."""

    def __init__(self, workdir: Path, start_step: int, total_steps: int, show: bool):
        self.bar = tqdm(total=total_steps, initial=start_step, unit="step", dynamic_ncols=True,
                        disable=not (show and distributed.is_primary()))
        self.tb = None
        if not distributed.is_primary():
            return
        self.path = workdir / "metrics.jsonl"
        # Rows past the restored step belong to work that is about to be redone, and a torn
        # last line to a killed write.
        text = self.path.read_text() if self.path.exists() else ""
        rows = [r for r in io.read_jsonl(self.path) if r.get("step", 0) <= start_step]
        if text != "".join(io.dumps(r) + "\n" for r in rows):
            io.write_jsonl(self.path, rows)
        # purge_step: TensorBoard hides the killed run's events past the restored step, the
        # same rows that metrics.jsonl just dropped.
        self.tb = io.summary_writer(workdir / "tensorboard", purge_step=start_step + 1)

    def write(self, row: dict) -> None:
        if self.tb is None:
            return
        with self.path.open("a") as f:
            f.write(io.dumps(row) + "\n")
        self.scalars(row, row["step"])
        speed = row["tokens_per_sec"]
        self.bar.set_postfix(loss=f"{row['loss']:.3f}", stage=row["stage"],
                             tok_s="compiling" if speed is None else f"{speed:.0f}")

    def scalars(self, values: dict, step: int) -> None:
        if self.tb is None:
            return
        for k, v in values.items():
            if isinstance(v, (int, float)) and k not in ("step", "stage"):
                self.tb.add_scalar(k, v, step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        self.bar.close()


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


@dataclasses.dataclass
class _Run:
    """The mutable side of one training run: state, files and the last good checkpoint."""

    experiment: Experiment
    workdir: Path
    model: Model
    tx: Any
    lr_at: Any
    mesh: Any
    state: TrainState
    rest: Any
    checkpoints: Checkpoints
    data_state: dict
    log: _Log
    summary: dict
    last_good: int | None
    step: int  # optimizer steps taken, kept on the host: reading state.step would sync
    # stage index -> seconds of this process's first step of it (compilation included)
    first_step_s: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def start(cls, experiment: Experiment, model: Model, workdir: Path, progress: bool) -> _Run:
        """Set up the optimizer and files, and restore the latest checkpoint, if any."""
        train = experiment.config.train
        tx = optim.optimizer(train, experiment.total_steps)
        mesh = sharding.make_mesh(train.mesh)
        state = experiment.initial_state(model.params, tx)
        state = jax.device_put(state, sharding.state_shardings(state, mesh,
                                                               train.sharding_rules))
        checkpoints = Checkpoints(workdir / "checkpoints")
        restored = checkpoints.restore_latest(state)
        last_good, state, data_state = restored or (None, state, {})
        return cls(
            experiment, workdir, model, tx,
            optim.schedule(train, experiment.total_steps), mesh, state,
            jax.device_put(model.rest, sharding.replicated(mesh)), checkpoints, data_state,
            _Log(workdir, int(state.step), experiment.total_steps, progress),
            io.read_json(workdir / "stages.json", {"stages": []}), last_good, int(state.step),
        )

    def iterator(self, stage: Stage):
        """The stage's batches, continuing from the checkpointed position when resuming it."""
        iterator = self.experiment.train_iterator(stage)
        if self.data_state.get("stage") == stage.index and self.last_good is not None:
            self.checkpoints.restore_iterator(self.last_good, iterator, self.data_state)
        return iterator

    def step_once(self, batch) -> dict:
        """One optimizer step; returns the batch's metric sums (on device)."""
        self.state, sums = train_step(
            self.state, self.rest, sharding.global_batch(batch, self.mesh),
            graphdef=self.model.graphdef, tx=self.tx, input_key=self.experiment.input_key,
            randomize_positions_to=int(self.experiment.config.train.randomize_positions),
        )
        self.step += 1
        return sums

    def check_healthy(self, host: dict) -> None:
        """Stop at the first step whose loss, gradients or parameters were nan/inf, or when
        the window's loss exploded (host: window sums on the host; the rule: module doc)."""
        limit, bad_step = EXPLODED * self.experiment.uniform_loss, int(host["diverged_at"])
        if bad_step != NEVER:
            what = f"loss, gradients or parameters became nan/inf at step {bad_step}"
        elif finish(host)["loss"] > limit:
            what = (f"the loss exploded to {finish(host)['loss']:.4g} by step {self.step} "
                    f"(above {EXPLODED:g} ln V = {limit:.3g})")
        else:
            return
        kept = ("no checkpoint had been saved" if self.last_good is None else
                f"the last good checkpoint (step {self.last_good}) is kept in "
                f"{self.workdir / 'checkpoints'}")
        raise TrainingDiverged(f"{what}; stopped, {kept}: lower train.learning_rate or raise "
                               "train.warmup_steps")

    def evaluate(self, seq_len: int) -> dict[str, float]:
        ev = evaluate(self.experiment, self.model, self.state.params, seq_len,
                      self.experiment.config.train.eval_batches)
        return {f"eval_{k}": v for k, v in ev.items()}

    def save(self, iterator, stage: Stage) -> None:
        self.checkpoints.save(self.step, self.state, {"stage": stage.index}, iterator)
        self.last_good = self.step

    def close(self) -> None:
        self.checkpoints.close()
        self.log.close()


def _row(run: _Run, window: _Window, stage: Stage) -> dict:
    """The metrics.jsonl row of the window that ends at the current step."""
    host = jax.device_get(window.sums)
    run.check_healthy(host)
    metrics = finish(host)
    elapsed, timed = time.perf_counter() - window.start, window.steps - window.untimed
    row = {
        "step": run.step,
        "stage": stage.index + 1,
        "seq_len": stage.seq_len,
        "loss": metrics["loss"],
        "acc": metrics["acc"],
        "lr": float(run.lr_at(run.step - 1)),
        "grad_norm": float(host["grad_norm"]) / window.steps,
        # None when the window is only the compiling first step: that is not a speed.
        "tokens_per_sec": timed * stage.seq_len * stage.batch_size / elapsed if timed else None,
    }
    if window.first_step_s is not None:
        row["first_step_s"] = window.first_step_s
    return row


def _finish_stage(run: _Run, stage: Stage, row: dict) -> None:
    """Record the stage's final metrics (evaluated now if the row was not) in stages.json."""
    evaluated = {k: v for k, v in row.items() if k.startswith("eval_")}
    if not evaluated and run.experiment.config.train.eval_batches:
        evaluated = run.evaluate(stage.seq_len)
        run.log.scalars(evaluated, run.step)
    entry = {
        "stage": stage.index + 1,
        "seq_len": stage.seq_len,
        "batch_size": stage.batch_size,
        "steps": stage.end - stage.begin,
        "final_loss": row["loss"],
        "final_acc": row["acc"],
        **evaluated,
        **({"first_step_s": run.first_step_s[stage.index]}
           if stage.index in run.first_step_s else {}),
    }
    run.summary["stages"] = [s for s in run.summary["stages"] if s["stage"] != entry["stage"]]
    run.summary["stages"].append(entry)
    if distributed.is_primary():
        io.write_json(run.workdir / "stages.json", run.summary)


def _train_stage(run: _Run, stage: Stage) -> None:
    """Run the remaining steps of `stage`, logging, evaluating and checkpointing on schedule."""
    train = run.experiment.config.train
    iterator = run.iterator(stage)
    window = _Window()
    for _ in range(max(run.step, stage.begin), stage.end):
        check_stop()
        window.add(run.step_once(next(iterator)))
        if stage.index not in run.first_step_s:
            window.restart_clock(run.state.step)
            run.first_step_s[stage.index] = window.first_step_s
            run.log.bar.write(f"stage {stage.index + 1}: first step (with compilation) "
                              f"{window.first_step_s:.1f} s; tokens/s is timed from step 2")
        done, stage_end = run.step, run.step == stage.end
        evaluate_now = bool(train.eval_every_steps) and (
            done % train.eval_every_steps == 0 or stage_end)
        if done % train.log_every_steps == 0 or stage_end or evaluate_now:
            row = _row(run, window, stage)
            if evaluate_now:
                row.update(run.evaluate(stage.seq_len))
            run.log.write(row)
            window = _Window()
            if stage_end:
                _finish_stage(run, stage, row)
        run.log.bar.update(1)
        if done % train.checkpoint_every_steps == 0 or stage_end:
            if window.steps:  # steps since the last logged row are not checked yet
                run.check_healthy(jax.device_get(window.sums))
            run.save(iterator, stage)


def train(config, workdir: str | Path, *, force: bool = False, progress: bool = True,
          cluster: distributed.Cluster = distributed.ONE_PROCESS) -> dict:
    """Train (or continue training) `config` in `workdir`; returns the stages summary.

    cluster: this process's place in a multi-process run (posjax.train.distributed)."""
    workdir = Path(workdir)
    # Before any use of the devices (validation counts them).
    distributed.initialize(cluster, auto=bool(config.train.distributed))
    experiment = Experiment.from_config(config)
    for stage in experiment.stages:
        experiment.check_memory(stage.seq_len, stage.batch_size)
    model = experiment.build()  # every model/encoding/attention check, before any write
    experiment.check_data()
    io.check_writable(workdir)
    with RunLock(workdir, process=jax.process_index()):
        check_resume(workdir, config, force)
        if distributed.is_primary():
            io.write_json(workdir / "config.json", {
                **config_json(config),
                "provenance": {**provenance.provenance(), "dtypes": {
                    "compute": resolve_dtype(config.model.dtype),
                    "params": config.model.param_dtype}}})
        run = _Run.start(experiment, model, workdir, progress)
        try:
            for stage in experiment.stages:
                if run.step < stage.end:
                    _train_stage(run, stage)
        except BaseException as error:
            # With a process gone, closing would wait for it in the checkpoint barrier.
            if not distributed.peer_failed(error):
                run.close()
            raise
        run.close()
        run.summary["final_step"] = experiment.total_steps
        if distributed.is_primary():
            io.write_json(workdir / "stages.json", run.summary)
            write_hparams(workdir, config, run.summary["stages"][-1])
    return run.summary


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
    with io.summary_writer(workdir / "tensorboard") as writer:
        writer.add_hparams(hparams(config), metrics, name="hparams")
