"""Orbax checkpoints of the train state plus the data iterator's position.

Each checkpoint holds two items: `state` (the TrainState pytree) and `data` (JSON: the stage
index and the grain iterator state), so a re-run continues with exactly the next batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp


class Checkpoints:
    """A thin layer over `ocp.CheckpointManager` for one run directory."""

    def __init__(self, directory: str | Path, max_to_keep: int = 3):
        self.manager = ocp.CheckpointManager(
            Path(directory).absolute(),
            options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True),
            item_names=("state", "data"),
        )

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, state: Any, data_state: dict) -> None:
        """Save asynchronously; orbax renames the finished directory into place, so a kill
        mid-save leaves the previous checkpoint as the latest."""
        self.manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(data_state)
            ),
        )

    def restore(self, target: Any, step: int | None = None) -> tuple[Any, dict]:
        """(state shaped and sharded like `target`, data state) of `step` (default latest)."""
        step = self.latest_step() if step is None else step
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
        restored = self.manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract), data=ocp.args.JsonRestore()
            ),
        )
        return restored.state, restored.data

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()
