"""The trainer: one run of a config in a work directory, resumable, in length stages.

`train(config, workdir)` builds the model and optimizer, restores the latest checkpoint if
there is one, and runs `config.train.stages` — (seq_len, batch_size, steps) in order, as in
RoFormer's length schedule — writing metrics.jsonl, TensorBoard events, stages.json and orbax
checkpoints (periodic and at each stage end, with the data iterator's state). Running the same
command again continues where the last checkpoint left off.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx
from tqdm.auto import tqdm

from posjax import data, encoders, io, models
from posjax.errors import ConfigError
from posjax.train import optim
from posjax.train.checkpoint import Checkpoints
from posjax.train.sharding import data_sharding, make_mesh, replicated
from posjax.train.steps import (
    INPUT_KEY,
    NEVER,
    TrainState,
    accumulate,
    eval_step,
    finish,
    train_step,
)

# Config keys that may change between an interrupted run and its resumption: they change how
# a run is observed or evaluated, not what it computes.
RESUMABLE_CHANGES = (
    "eval",
    "train.log_every_steps",
    "train.checkpoint_every_steps",
    "train.eval_every_steps",
    "train.eval_batches",
    "data.data_dir",
)


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


@dataclasses.dataclass
class Built:
    """A model, split for pure steps, with what was needed to build it."""

    encoding: encoders.Encoding
    graphdef: nnx.GraphDef
    params: Any
    rest: Any
    vocab_size: int


def build_encoding(config) -> encoders.Encoding:
    """The encoding named by `config.encoding` with its hyperparameters."""
    hparams = {k: v for k, v in config.encoding.to_dict().items() if k != "name"}
    return encoders.get(config.encoding.name, **hparams)


def max_train_len(config) -> int:
    return max(int(seq_len) for seq_len, _, _ in config.train.stages)


def build(config, encoding: encoders.Encoding | None = None, *,
          max_len: int | None = None) -> Built:
    """Construct the model of `config` (checks every model/encoding/attention combination)."""
    encoding = encoding or build_encoding(config)
    seq_len, batch_size, _ = config.train.stages[0]
    spec = data.batch_spec(config.data, seq_len, batch_size)
    model = models.build_model(
        {k: v for k, v in config.model.to_dict().items() if k != "kind"},
        encoding,
        kind=config.model.kind,
        vocab_size=spec.vocab_size,
        num_classes=spec.num_classes,
        patch_dim=spec.patch_dim,
        # Randomized positions reach M - 1, so tables must cover M positions.
        max_len=max_len or max(max_train_len(config), int(config.train.randomize_positions)),
        rngs=nnx.Rngs(params=config.train.seed, dropout=config.train.seed + 1),
    )
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    return Built(encoding, graphdef, params, rest, spec.vocab_size)


def initial_state(config, built: Built, tx, mesh) -> TrainState:
    """The state before step 0: the built parameters, fresh optimizer state and the run's
    rng (config.train.seed), replicated over `mesh`."""
    return jax.device_put(TrainState(
        step=jnp.zeros((), jnp.int32),
        params=built.params,
        opt_state=tx.init(built.params),
        rng=jax.random.key_data(jax.random.key(config.train.seed)),
    ), replicated(mesh))


def validate(config) -> None:
    """Fail before any work starts on a config that cannot run (one-line ConfigErrors)."""
    stages = config.train.stages
    if not stages:
        raise ConfigError("train.stages is empty: give at least one (seq_len, batch_size, steps)")
    for stage in stages:
        if len(stage) != 3 or any(int(x) < 1 for x in stage):
            raise ConfigError(
                f"train.stages entry {tuple(stage)} is not (seq_len, batch_size, steps) of "
                "positive integers"
            )
    for key in ("log_every_steps", "checkpoint_every_steps"):
        if int(config.train[key]) < 1:
            raise ConfigError(f"train.{key}={config.train[key]} must be a positive step count")
    if int(config.train.eval_every_steps) < 0:
        raise ConfigError(f"train.eval_every_steps={config.train.eval_every_steps} must be >= 0 "
                          "(0: evaluate at stage ends only)")
    devices = jax.device_count()
    for _, batch_size, _ in stages:
        if batch_size % devices:
            raise ConfigError(
                f"batch_size {batch_size} is not divisible by the {devices} devices: "
                f"use a multiple of {devices}"
            )
    if config.model.kind not in INPUT_KEY:
        raise ConfigError(
            f"unknown model.kind {config.model.kind!r}; valid: {', '.join(sorted(INPUT_KEY))}"
        )
    if config.train.randomize_positions and config.train.randomize_positions < max_train_len(
        config
    ):
        raise ConfigError(
            f"train.randomize_positions={config.train.randomize_positions} is below the longest "
            f"training length {max_train_len(config)}: draw positions from a larger range"
        )
    build_encoding(config)


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


def check_resume(workdir: Path, config, force: bool) -> None:
    """Refuse to continue a run whose config.json differs in anything that changes results."""
    saved = io.read_json(workdir / "config.json")
    if saved is None:
        return
    old, new = _flatten(saved), _flatten(config_json(config))
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


def load_config(workdir: str | Path) -> ml_collections.ConfigDict:
    """The config a run was trained with (stages come back as tuples)."""
    saved = io.read_json(Path(workdir) / "config.json")
    if saved is None:
        raise ConfigError(f"{workdir} has no config.json: is it a posjax run directory?")
    config = ml_collections.ConfigDict(saved)
    config.train.stages = tuple(tuple(s) for s in saved["train"]["stages"])
    config.eval.lengths = tuple(saved["eval"]["lengths"])
    return config


def _eval_batches(config, seq_len: int, num_batches: int):
    """Validation batches: windows of `seq_len` tokens for text, the validation split (all
    sizes) for algorithmic and grid tasks."""
    if data.dataset_kind(config.data) != "text":
        for _, _, batch in data.task_eval_batches(
            config.data, config.eval.batch_size, splits=(config.data.eval_split,)
        ):
            yield batch
        return
    yield from data.eval_windows(
        config.data, seq_len, batch_size=config.eval.batch_size,
        max_tokens=num_batches * config.eval.batch_size * seq_len,
        mlm=config.data.mlm if config.model.kind == "mlm" else None,
    )


def evaluate(config, built: Built, params, seq_len: int, num_batches: int) -> dict[str, float]:
    """Mean loss and accuracy on the validation data (`num_batches` windows of text)."""
    totals: dict[str, float] = {}
    for batch in _eval_batches(config, seq_len, num_batches):
        sums = eval_step(params, built.rest, batch, graphdef=built.graphdef,
                         input_key=INPUT_KEY[config.model.kind])
        for k, v in sums.items():
            totals[k] = totals.get(k, 0.0) + float(v)
    return finish(totals) if totals else {}


class _Log:
    """metrics.jsonl, TensorBoard and the progress bar."""

    def __init__(self, workdir: Path, start_step: int, total_steps: int, show: bool):
        from tensorboardX import SummaryWriter

        self.path = workdir / "metrics.jsonl"
        # Rows past the restored step belong to work that is about to be redone.
        rows = io.read_jsonl(self.path)
        if any(r.get("step", 0) > start_step for r in rows):
            io.write_jsonl(self.path, [r for r in rows if r.get("step", 0) <= start_step])
        # purge_step: TensorBoard hides the killed run's events past the restored step, the
        # same rows that metrics.jsonl just dropped.
        self.tb = SummaryWriter(str(workdir / "tensorboard"), purge_step=start_step + 1)
        self.bar = tqdm(total=total_steps, initial=start_step, disable=not show, unit="step",
                        dynamic_ncols=True)

    def write(self, row: dict) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        for k, v in row.items():
            if isinstance(v, (int, float)) and k not in ("step", "stage"):
                self.tb.add_scalar(k, v, row["step"])

    def close(self) -> None:
        self.tb.close()
        self.bar.close()


def _stage_bounds(stages) -> list[tuple[int, int]]:
    bounds, start = [], 0
    for _, _, steps in stages:
        bounds.append((start, start + int(steps)))
        start += int(steps)
    return bounds


def _check_finite(host: dict, workdir: Path, last_good: int | None) -> None:
    """Stop at the first step whose loss, gradients or parameters were nan/inf."""
    if int(host["diverged_at"]) != NEVER:
        kept = ("no checkpoint had been saved" if last_good is None else
                f"the last good checkpoint (step {last_good}) is kept in "
                f"{workdir / 'checkpoints'}")
        raise TrainingDiverged(
            f"loss, gradients or parameters became nan/inf at step {int(host['diverged_at'])}; "
            f"stopped, {kept}: lower train.learning_rate or raise train.warmup_steps"
        )


def train(config, workdir: str | Path, *, force: bool = False, progress: bool = True) -> dict:
    """Train (or continue training) `config` in `workdir`; returns the stages summary."""
    workdir = Path(workdir)
    if config.train.distributed:  # must precede any use of the devices (validate counts them)
        jax.distributed.initialize()
    validate(config)
    check_resume(workdir, config, force)
    built = build(config)
    workdir.mkdir(parents=True, exist_ok=True)
    io.write_json(workdir / "config.json", config_json(config))

    stages = [tuple(int(x) for x in s) for s in config.train.stages]
    bounds = _stage_bounds(stages)
    total_steps = bounds[-1][1]
    tx = optim.optimizer(config.train, total_steps)
    lr_at = optim.schedule(config.train, total_steps)
    mesh = make_mesh()
    state = initial_state(config, built, tx, mesh)
    rest = jax.device_put(built.rest, replicated(mesh))

    checkpoints = Checkpoints(workdir / "checkpoints")
    data_state: dict = {}
    if checkpoints.latest_step() is not None:
        state, data_state = checkpoints.restore(state)
    start = int(state.step)
    summary = io.read_json(workdir / "stages.json", {"stages": []})
    log = _Log(workdir, start, total_steps, progress)
    input_key = INPUT_KEY[config.model.kind]
    last_good = checkpoints.latest_step()
    try:
        for index, ((seq_len, batch_size, _), (begin, end)) in enumerate(
            zip(stages, bounds, strict=True)
        ):
            if start >= end:
                continue
            iterator = data.train_iterator(
                config.data, seq_len, batch_size, seed=config.train.seed + index,
                mlm=config.data.mlm if config.model.kind == "mlm" else None,
            )
            if data_state.get("stage") == index and data_state.get("iterator"):
                iterator.set_state(data_state["iterator"])
            sums: dict[str, jax.Array] = {}
            window_start, window_steps = time.perf_counter(), 0
            for step in range(max(start, begin), end):
                batch = jax.device_put(next(iterator), data_sharding(mesh))
                state, batch_sums = train_step(
                    state, rest, batch, graphdef=built.graphdef, tx=tx, input_key=input_key,
                    randomize_positions_to=int(config.train.randomize_positions),
                )
                sums = accumulate(sums, batch_sums)
                window_steps += 1
                done = step + 1
                stage_end = done == end
                evaluate_now = bool(config.train.eval_every_steps) and (
                    done % config.train.eval_every_steps == 0 or stage_end)
                if done % config.train.log_every_steps == 0 or stage_end or evaluate_now:
                    host = jax.device_get(sums)
                    _check_finite(host, workdir, last_good)
                    elapsed = time.perf_counter() - window_start
                    metrics = finish(host)
                    row = {
                        "step": done,
                        "stage": index + 1,
                        "seq_len": seq_len,
                        "loss": metrics["loss"],
                        "acc": metrics["acc"],
                        "lr": float(lr_at(done - 1)),
                        "grad_norm": float(host["grad_norm"]) / window_steps,
                        "tokens_per_sec": window_steps * seq_len * batch_size / elapsed,
                    }
                    if evaluate_now:
                        ev = evaluate(config, built, state.params, seq_len,
                                      config.train.eval_batches)
                        row.update({f"eval_{k}": v for k, v in ev.items()})
                    log.write(row)
                    log.bar.set_postfix(loss=f"{row['loss']:.3f}",
                                        tok_s=f"{row['tokens_per_sec']:.0f}", stage=index + 1)
                    sums, window_start, window_steps = {}, time.perf_counter(), 0
                    if stage_end:
                        summary["stages"] = [s for s in summary["stages"]
                                             if s["stage"] != index + 1]
                        summary["stages"].append(_stage_summary(
                            config, built, state, index, stages[index], row))
                        io.write_json(workdir / "stages.json", summary)
                log.bar.update(1)
                if done % config.train.checkpoint_every_steps == 0 or stage_end:
                    if sums:  # steps since the last logged row are not checked yet
                        _check_finite(jax.device_get(sums), workdir, last_good)
                    checkpoints.save(done, state, {
                        "stage": index, "iterator": iterator.get_state()})
                    last_good = done
            start = end
    finally:
        checkpoints.close()
        log.close()
    summary["final_step"] = total_steps
    io.write_json(workdir / "stages.json", summary)
    return summary


def _stage_summary(config, built, state, index, stage, row) -> dict:
    seq_len, batch_size, steps = stage
    entry = {
        "stage": index + 1,
        "seq_len": seq_len,
        "batch_size": batch_size,
        "steps": steps,
        "final_loss": row["loss"],
        "final_acc": row["acc"],
    }
    evaluated = {k: v for k, v in row.items() if k.startswith("eval_")}
    if not evaluated and config.train.eval_batches:
        ev = evaluate(config, built, state.params, seq_len, config.train.eval_batches)
        evaluated = {f"eval_{k}": v for k, v in ev.items()}
    return {**entry, **evaluated}


def restore_params(workdir: str | Path, config, built: Built) -> Any:
    """The latest checkpoint's parameters of the run in `workdir`, shaped like `built.params`."""
    checkpoints = Checkpoints(Path(workdir) / "checkpoints")
    if checkpoints.latest_step() is None:
        raise ConfigError(f"{workdir} has no checkpoint: train it first with `posjax train`")
    tx = optim.optimizer(config.train, sum(int(s[2]) for s in config.train.stages))
    # Every leaf placed on this process's devices: the run may have been saved on others.
    target = initial_state(config, built, tx, make_mesh())
    try:
        state, _ = checkpoints.restore(target)
    finally:
        checkpoints.close()
    return state.params
