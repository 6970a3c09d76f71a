"""Evaluations while a run trains (big_vision's evaluators): `config.evals` entries, each a
registered evaluation scored on the parameters in memory every `every_steps` steps and at the
run's last step, its numbers logged with that step's metrics row (metrics.jsonl,
TensorBoard) as NAME/METRIC@LENGTH.

    config.evals.long = dict(type="text", every_steps=100, lengths=(256, 1024), max_tokens=4096)
    config.evals.passkey = dict(type="passkey", every_steps=200, trials=4)

Keys besides `type` and `every_steps` are the evaluation's options (`posjax list
evaluations`); what an entry leaves out takes the run's config.eval value. Nothing is
written to result files: `posjax extrapolate` (or `train --extrapolate`) scores the final
parameters.
"""

from __future__ import annotations

from pathlib import Path

from posjax.errors import ConfigError
from posjax.eval.evaluation import EVALUATIONS, evaluation_class
from posjax.eval.weights import InMemory
from posjax.experiment import Experiment, check_eval_option

# The keys of an entry that are not the evaluation's options.
ENTRY_KEYS = ("type", "every_steps")


class DuringTraining:
    """The `config.evals` entries of a run: when each is due and its numbers at a step."""

    def __init__(self, config):
        self.entries = {name: dict(entry) for name, entry in config.get("evals", {}).items()}

    def __bool__(self) -> bool:
        return bool(self.entries)

    def check(self, experiment: Experiment) -> None:
        """A one-line ConfigError for an entry that cannot run on this experiment: no type,
        an unknown one, one that scores other data, an option it does not take, or no
        positive every_steps. Called before training writes anything."""
        for name, entry in self.entries.items():
            where = f"config.evals.{name}"
            if not entry.get("type"):
                raise ConfigError(f"{where} has no type: give type=NAME, one of "
                                  f"{', '.join(sorted(EVALUATIONS))}")
            if not isinstance(entry.get("every_steps"), int) or entry["every_steps"] < 1:
                raise ConfigError(f"{where}.every_steps={entry.get('every_steps')!r}: give a "
                                  "whole number of steps >= 1")
            options = {k: v for k, v in entry.items() if k not in ENTRY_KEYS}
            evaluation_class(entry["type"], experiment.data.evaluation, options, "this run",
                             entry=where)
            for key, value in options.items():
                check_eval_option(f"{where}.{key}", key, value)
            if "max_tokens" in EVALUATIONS[entry["type"]].options:
                _check_budget(where, options, experiment.config.eval)
            EVALUATIONS[entry["type"]].check_before_training(
                experiment, {k: _option(v) for k, v in options.items()})

    def due(self, step: int, last_step: int) -> list[str]:
        """The entries due at `step`: every every_steps steps, and at the run's last step."""
        return [name for name, entry in self.entries.items()
                if step % entry["every_steps"] == 0 or step == last_step]

    def __call__(self, names: list[str], experiment: Experiment, workdir: Path, step: int,
                 params) -> dict[str, float]:
        """{NAME/METRIC@LENGTH: value} of the entries `names` on `params` at `step`."""
        out = {}
        for name in names:
            entry = self.entries[name]
            cls = EVALUATIONS[entry["type"]]
            evaluation = cls(experiment, workdir, InMemory(step, params), name=entry["type"])
            result = evaluation.run(**{k: _option(entry.get(k)) for k in cls.options})
            for row in result["lengths"]:
                for _, key, _ in cls.result_columns(result):
                    value = row.get(key)
                    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
                    if numeric and key != "trials":  # a count, not a score
                        out[f"{name}/{key}@{row['length']}"] = float(value)
        return out


def _check_budget(where: str, options: dict, run_eval) -> None:
    """An entry whose longest length does not fit in the tokens it scores (max_tokens, its
    own or the run's) is a one-line ConfigError in its own words: it failed when first due,
    naming a --max_tokens flag no one gave."""
    budget = options.get("max_tokens") or run_eval.max_tokens
    lengths = _option(options.get("lengths")) or list(run_eval.lengths)
    longest = max(lengths if isinstance(lengths, list) else [lengths], default=0)
    if longest > budget:
        raise ConfigError(f"{where} scores at most max_tokens={budget} tokens, fewer than its "
                          f"length {longest} needs: give {where}.max_tokens={longest} or "
                          "more, or lower its lengths")


def _option(value):
    """An entry's option as the evaluation's run takes it (tuples as lists; an empty one as
    None, the run's default)."""
    if isinstance(value, (tuple, list)):
        return list(value) or None
    return value
