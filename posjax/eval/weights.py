"""Where the parameters an evaluation scores come from: a source.

    Checkpoint(experiment, workdir)   the latest checkpoint of a trained run, restored once
    InMemory(step, params)            what training just left in memory (nothing restored)
    posjax.pretrained.extrapolate.Snapshot(model, directory)   a Hugging Face snapshot

An evaluation takes one (`Evaluation(experiment, workdir, weights)`) and never asks where the
parameters were read: the source also names them in the result (`result_fields`), refuses a
length its model cannot attend over (`check_length`), and sets the matmul precision they are
scored at (`matmul_precision`).
"""

from __future__ import annotations

import abc
import dataclasses
import functools
from pathlib import Path
from typing import Any

from posjax.experiment import Experiment
from posjax.train.checkpoint import restore_params


class Weights(abc.ABC):
    """A source of parameters: `params`, the nnx.Param state of the experiment's model."""

    params: Any
    # jax.default_matmul_precision while scoring; None: the platform's default.
    matmul_precision: str | None = None
    # whose config the evaluation's settings not given as flags come from, in a message
    settings_of: str = "the run's"
    # config keys (prefixes) left out of the result's run_sha1: none for a trained run
    not_the_run: tuple[str, ...] = ()

    @abc.abstractmethod
    def result_fields(self, experiment: Experiment) -> dict:
        """The result's fields that say which parameters were scored."""

    def check_length(self, length: int) -> None:
        """A ConfigError where the model cannot attend over `length` tokens (by default it
        can: the encoding decides, `Evaluation.encoding_at`)."""
        del length


@dataclasses.dataclass(frozen=True)
class InMemory(Weights):
    """The parameters of training step `step`, already in memory."""

    step: int
    params: Any

    def result_fields(self, experiment: Experiment) -> dict:
        # "step" is the checkpoint scored, "total_steps" the run's budget: a run stopped early
        # is scored at its last checkpoint, and its result says so (`progress_line`).
        return {"step": self.step, "total_steps": experiment.total_steps}


class Checkpoint(Weights):
    """The latest checkpoint of `experiment`'s run in `workdir`, restored on first use."""

    def __init__(self, experiment: Experiment, workdir: str | Path):
        self.experiment, self.workdir = experiment, Path(workdir)

    @functools.cached_property
    def _restored(self) -> InMemory:
        return InMemory(*restore_params(self.experiment, self.workdir))

    @property
    def params(self) -> Any:
        return self._restored.params

    def result_fields(self, experiment: Experiment) -> dict:
        return self._restored.result_fields(experiment)
