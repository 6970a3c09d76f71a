"""Orbax checkpoints of the train state plus the data iterator's position.

Each checkpoint holds three items: `state` (the TrainState pytree, saved collectively by
every process, each writing its shards), `data` (JSON, written by process 0: the stage
index) and `iterator` (grain's own handler: one file per process, process_I-of-N.json, each
process's position in its data shards), so a re-run continues with exactly the next batch.
(Checkpoints from before the per-process files keep the one iterator state in `data`.)
A checkpoint that cannot be read (a torn disk write, a truncated copy) is moved aside to
checkpoints.unreadable/ with one warning line, and the one before it is restored instead. With
several processes, a checkpoint is used only if every process read it, and process 0 alone
moves it while the others wait.
A Ctrl-C, SIGTERM or SIGHUP during a save or close waits for orbax's bookkeeping to finish.
A save that fills the disk is an OSError(ENOSPC) naming the checkpoint folder; the torn save
is left as orbax's STEP.orbax-checkpoint-tmp folder, which a resume deletes unread.

`restore_params(experiment, workdir)` is what an evaluation reads: the latest checkpoint's
step and parameters, placed on this process's devices.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import grain
import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from posjax.errors import ConfigError
from posjax.experiment import Experiment
from posjax.runlock import deferred
from posjax.train import distributed, optim, sharding
from posjax.train.steps import initial_state

ITEMS = ("state", "data", "iterator")
# What stops a checkpoint's write for want of room: a full disk, a limit on a file's size
# (`ulimit -f`), a used-up quota. TensorStore reports each in its own words with the errno
# as os_error_code (ENOSPC as RESOURCE_EXHAUSTED, EFBIG as OUT_OF_RANGE); orbax passes its
# errors on as ValueErrors.
WRITE_LIMITS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


def write_limit(error: BaseException | None) -> int | None:
    """The errno of WRITE_LIMITS that `error`, or an error it was raised from, reports;
    None where it reports none."""
    while error is not None:
        if getattr(error, "errno", None) in WRITE_LIMITS:
            return error.errno
        text = str(error)
        for code in WRITE_LIMITS:
            if f"[os_error_code='{code}']" in text or os.strerror(code) in text:
                return code
        if "RESOURCE_EXHAUSTED: Error writing" in text:
            return errno.ENOSPC
        error = error.__cause__ or error.__context__
    return None


def _no_write_limit(record: logging.LogRecord) -> bool:
    # orbax logs each background save thread's failure with its traceback before raising it
    # again in the main thread, where a write limit becomes one line (Checkpoints.save, close).
    return not (record.exc_info and write_limit(record.exc_info[1])
                or write_limit(Exception(record.getMessage())))


def _not_missing_metadata(record: logging.LogRecord) -> bool:
    # a step folder without orbax's metadata (an empty or foreign folder named like a step):
    # restore_latest sets it aside with posjax's own warning line
    return "Metadata file does not exist" not in record.getMessage()


logging.getLogger("absl").addFilter(_no_write_limit)
logging.getLogger("absl").addFilter(_not_missing_metadata)


class _DrainingLoop(asyncio.SelectorEventLoop):
    """An event loop that, closed with tasks pending, cancels them and lets them finish
    first, as asyncio.run() does. orbax runs each save and restore in a fresh loop closed
    without that; when one array fails to read (a torn checkpoint) or write (a full disk),
    the other reads or writes were left pending, and their TensorStore callbacks on the
    closed loop and their coroutines' collection printed hundreds of lines of tracebacks."""

    def call_soon_threadsafe(self, callback, *args, context=None):
        """A read or write that TensorStore finishes after its save failed and the loop
        closed posts its result here: dropped, where asyncio raised RuntimeError into
        TensorStore's thread, which printed it as a traceback after the command's line."""
        try:
            return super().call_soon_threadsafe(callback, *args, context=context)
        except RuntimeError:
            if self.is_closed():
                return None
            raise

    def close(self) -> None:
        pending = asyncio.all_tasks(self)
        for task in pending:
            task.cancel()
        if pending:
            self.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        super().close()


class _DrainingPolicy(asyncio.DefaultEventLoopPolicy):
    """Every new event loop (orbax makes them in its save threads too) a _DrainingLoop."""

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return _DrainingLoop()


asyncio.set_event_loop_policy(_DrainingPolicy())


class Checkpoints:
    """A thin layer over `ocp.CheckpointManager` for one run directory."""

    def __init__(self, directory: str | Path, max_to_keep: int = 3):
        self.directory = Path(directory).absolute()
        self.manager = ocp.CheckpointManager(
            Path(directory).absolute(),
            # A torn save's STEP.orbax-checkpoint-tmp goes now, not in a warning on its step.
            options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True,
                                                 cleanup_tmp_directories=True),
            item_names=ITEMS,
        )

    def save(self, step: int, state: Any, data_state: dict, iterator=None) -> None:
        """Save asynchronously (the iterator's position is taken now); orbax renames the
        finished directory into place, so a kill mid-save leaves the previous checkpoint as
        the latest."""
        items = dict(state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(data_state))
        if iterator is not None:
            items["iterator"] = grain.checkpoint.CheckpointSave(iterator)
        with deferred(), self._write_limit_as_oserror():
            self.manager.save(step, args=ocp.args.Composite(**items))

    def check(self) -> None:
        """Raise now the error of an asynchronous save that failed (a file size limit, a
        failing disk), without waiting for one in flight: else it is raised at the next
        save, or at the end, after the training in between is lost with it."""
        with self._write_limit_as_oserror():
            self.manager.check_for_errors()

    @contextlib.contextmanager
    def _write_limit_as_oserror(self):
        """Within: orbax's error for a write limit (WRITE_LIMITS, from this save or the
        previous one still being written) becomes that OSError naming the checkpoint folder."""
        try:
            yield
        except Exception as error:
            code = write_limit(error)
            if code is None:
                raise
            raise OSError(code, os.strerror(code), str(self.directory)) from None

    def restore_latest(self, target: Any) -> tuple[int, Any, dict] | None:
        """(step, state, data state) of the newest readable checkpoint, None if none is."""
        for step in sorted(self.manager.all_steps(), reverse=True):
            try:
                restored, error = self.restore(target, step), None
            except Exception as failure:  # noqa: BLE001 (any failure to read means unreadable)
                restored, error = None, failure
                self._check_shaped_like(step, failure)
            if distributed.every_process(error is None):
                return (step, *restored)
            self._set_aside(step, error)
        return None

    def _check_shaped_like(self, step: int, failure: Exception) -> None:
        """A ConfigError where checkpoint `step` failed to restore (`failure`) but reads
        whole as it was saved: its state has another structure or shapes (a model or
        optimizer that --force changed), so setting it aside as unreadable would lose it."""
        try:
            self.manager.restore(step, args=ocp.args.Composite(
                state=ocp.args.StandardRestore(), data=ocp.args.JsonRestore()))
        except Exception:  # noqa: BLE001 (it does not read: unreadable, as the caller says)
            return
        what = str(failure).strip().splitlines()[0].split(". ")[0].rstrip(":.")  # a sentence
        raise ConfigError(
            f"checkpoint step {step} in {self.directory} is whole, but its training state is "
            f"shaped otherwise than this config's ({what}): a changed model or optimizer "
            "cannot resume it: use a new --workdir") from None

    def _set_aside(self, step: int, error: Exception | None) -> None:
        """Move checkpoint `step` out of the manager's sight (process 0, while the others
        wait); `error` is this process's, None if only another process failed to read it."""
        aside = self.directory.with_name(self.directory.name + ".unreadable") / str(step)
        if distributed.is_primary():
            aside.parent.mkdir(exist_ok=True)
            shutil.rmtree(aside, ignore_errors=True)
            shutil.move(self.directory / str(step), aside)
            # orbax's first line ends in "See full TensorStore details: <bound method ...>"
            first = (str(error).strip().splitlines() or [""])[0].split(" See full ")[0]
            reason = ("another process could not read it" if error is None else
                      f"{type(error).__name__}: {first[:160]}")
            print(f"warning: checkpoint step {step} is unreadable ({reason}); moved to "
                  f"{aside}, using the one before", file=sys.stderr)
        if jax.process_count() > 1:
            multihost_utils.sync_global_devices(f"posjax: checkpoint {step} set aside")
        self.manager.reload()

    def restore(self, target: Any, step: int) -> tuple[Any, dict]:
        """(state shaped and sharded like `target`, data state) of `step`."""
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
        restored = self.manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract), data=ocp.args.JsonRestore()
            ),
        )
        return restored.state, restored.data

    def check_processes(self, step: int, data_state: dict) -> None:
        """A one-line ConfigError where checkpoint `step` holds no data position of this
        process (saved by another process count): before the resume writes anything."""
        if "iterator" in data_state:  # a checkpoint from before the per-process files
            return
        saved = sorted(p.name for p in (self.directory / str(step) / "iterator").glob(
            "process_*.json"))
        if f"process_{jax.process_index()}-of-{jax.process_count()}.json" not in saved:
            raise ConfigError(
                f"checkpoint step {step} in {self.directory} holds the data positions of "
                f"{', '.join(saved) or 'no process'}, not of process {jax.process_index()} of "
                f"{jax.process_count()}: resume with the process count it was saved with")

    def restore_iterator(self, step: int, iterator, data_state: dict) -> None:
        """Move `iterator` (this process's, freshly built) to its position at `step`."""
        if "iterator" in data_state:  # a checkpoint from before the per-process files
            iterator.set_state(data_state["iterator"])
            return
        self.check_processes(step, data_state)
        self.manager.restore(step, args=ocp.args.Composite(
            iterator=grain.checkpoint.CheckpointRestore(iterator)))

    def close(self) -> None:
        with deferred(), self._write_limit_as_oserror():
            self.manager.wait_until_finished()
            self.manager.close()


class SaveClock:
    """Whether a checkpoint is due by wall time: `every_minutes` since the last save (or since
    training started), so an interrupted long run loses minutes, not a quarter of its steps.
    0 turns it off, as does a run of several processes: each would read its own clock, and
    they must all decide alike to save together (their step schedule still saves them)."""

    def __init__(self, every_minutes: float, clock=time.monotonic):
        self.seconds = 60.0 * float(every_minutes) if jax.process_count() == 1 else 0.0
        self.clock = clock
        self.last = clock()

    def due(self) -> bool:
        return self.seconds > 0 and self.clock() - self.last >= self.seconds

    def saved(self) -> None:
        self.last = self.clock()


def restore_params(experiment: Experiment, workdir: str | Path) -> tuple[int, Any]:
    """(step, parameters) of the latest readable checkpoint of `experiment`'s run in
    `workdir`, placed on this process's devices (the run may have been saved on others);
    step < `experiment.total_steps` when training stopped early. ConfigError: there is none,
    or its weights are not finite (the run diverged)."""
    checkpoints = Checkpoints(Path(workdir) / "checkpoints")
    try:
        tx = optim.optimizer(experiment.config.train, experiment.total_steps)
        placed = sharding.replicated(sharding.make_mesh())
        target = jax.tree.map(
            lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=placed),
            jax.eval_shape(lambda p: initial_state(p, tx, experiment.config.train.seed),
                           experiment.abstract().params))
        restored = checkpoints.restore_latest(target)
    finally:
        checkpoints.close()
    if restored is None:
        raise ConfigError(f"{workdir} has no checkpoint: train it first with `posjax train`")
    step, state, _ = restored
    if not all(bool(jnp.isfinite(leaf).all()) for leaf in jax.tree.leaves(state.params)):
        raise ConfigError(
            f"{workdir}: the weights of checkpoint step {step} are not finite (the run "
            "diverged): retrain it with a lower train.learning_rate"
        )
    return step, state.params
