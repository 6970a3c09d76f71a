"""Evaluation: length-extrapolation runs, plots, and analysis of position encodings.

`evaluate(workdir, ...)` scores a trained run with the evaluation its data kind names (text
extrapolation by length, or task evaluation by problem size); `format_table(result)` prints
one. Importing this package registers the evaluations (`posjax list evaluations`).
"""

from posjax.eval import extrapolate, retrieval, tasks  # noqa: F401  (registers them)
from posjax.eval.evaluation import EVALUATIONS, Evaluation, evaluate, format_table

__all__ = ["EVALUATIONS", "Evaluation", "evaluate", "format_table"]
