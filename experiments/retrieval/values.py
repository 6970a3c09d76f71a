"""Numbers the README quotes beyond what posjax.results.values names for text studies: those
of `posjax.results.values.retrieval_values` for each TASK (passkey, flipflop: the
sub-folders), e.g. passkey:rope:acc@2048, passkey:rope +yarn:acc@past, flipflop:none:train_acc.
"""

from pathlib import Path

from posjax.results.values import retrieval_values

TASKS = ("passkey", "flipflop")


def values(study: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    for task in TASKS:
        out.update(retrieval_values(study / task / "results", task))
    return out
