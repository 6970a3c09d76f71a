"""Scoring: evaluations of trained runs and pretrained snapshots, length-extension methods.

`evaluate(workdir, ...)` scores a trained run with the evaluation its data kind names (text
extrapolation by length, task evaluation by problem size, or a retrieval task given by name);
`format_table(result)` prints one. Every module of the package is imported here, so each
registers its evaluations (`posjax list evaluations`). Turning result files into pictures,
tables and README values is `posjax.results`.
"""

from posjax.eval.evaluation import EVALUATIONS, Evaluation, evaluate, format_table
from posjax.registry import import_package_modules

import_package_modules(__name__, __path__)

__all__ = ["EVALUATIONS", "Evaluation", "evaluate", "format_table"]
