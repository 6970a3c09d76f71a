"""Numbers the README quotes beyond the per-length ones (posjax.results.values):

    passkey:POINT:METRIC@LENGTH, ...   the hybrid trained on passkey (passkey/), as
                                       `retrieval_values` names them
"""

from pathlib import Path

from posjax.results.values import retrieval_values


def values(study: Path) -> dict[str, float]:
    return retrieval_values(study / "passkey" / "results", "passkey")
