"""Orbax checkpoints of the train state plus the data iterator's position.

Each checkpoint holds two items: `state` (the TrainState pytree) and `data` (JSON: the stage
index and the grain iterator state), so a re-run continues with exactly the next batch.
A checkpoint that cannot be read (a torn disk write, a truncated copy) is moved aside to
checkpoints.unreadable/ with one warning line, and the one before it is restored instead.
A Ctrl-C or SIGTERM during a save or close waits for orbax's bookkeeping to finish.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp

from posjax.runlock import deferred


class Checkpoints:
    """A thin layer over `ocp.CheckpointManager` for one run directory."""

    def __init__(self, directory: str | Path, max_to_keep: int = 3):
        self.directory = Path(directory).absolute()
        self.manager = ocp.CheckpointManager(
            Path(directory).absolute(),
            options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True),
            item_names=("state", "data"),
        )

    def save(self, step: int, state: Any, data_state: dict) -> None:
        """Save asynchronously; orbax renames the finished directory into place, so a kill
        mid-save leaves the previous checkpoint as the latest."""
        with deferred():
            self.manager.save(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(data_state)
                ),
            )

    def restore_latest(self, target: Any) -> tuple[int, Any, dict] | None:
        """(step, state, data state) of the newest readable checkpoint, None if none is."""
        for step in sorted(self.manager.all_steps(), reverse=True):
            try:
                return (step, *self.restore(target, step))
            except Exception as error:  # noqa: BLE001 (any failure to read means unreadable)
                self._set_aside(step, error)
        return None

    def _set_aside(self, step: int, error: Exception) -> None:
        aside = self.directory.with_name(self.directory.name + ".unreadable") / str(step)
        aside.parent.mkdir(exist_ok=True)
        shutil.rmtree(aside, ignore_errors=True)
        shutil.move(self.directory / str(step), aside)
        self.manager.reload()
        reason = (str(error).strip().splitlines() or [""])[0][:160]
        print(f"warning: checkpoint step {step} is unreadable ({type(error).__name__}: "
              f"{reason}); moved to {aside}, using the one before", file=sys.stderr)

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

    def close(self) -> None:
        with deferred():
            self.manager.wait_until_finished()
            self.manager.close()
