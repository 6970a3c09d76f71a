"""Numbers the README quotes beyond the per-length ones (posjax.results.values):

    passkey:POINT:METRIC@LENGTH, ...   the hybrid trained on passkey (passkey/), as
                                       `retrieval_values` names them
    mqar:POINT:METRIC@LENGTH, ...      NoPE, RoPE (mqar/) and the hybrid (mqar_hybrid/)
                                       trained on MQAR in the same budget
"""

from pathlib import Path

from posjax.results.values import retrieval_values


def values(study: Path) -> dict[str, float]:
    return {**retrieval_values(study / "passkey" / "results", "passkey"),
            **retrieval_values(study / "mqar" / "results", "mqar"),
            **retrieval_values(study / "mqar_hybrid" / "results", "mqar")}
