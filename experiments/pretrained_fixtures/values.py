"""The tiny fixtures' numbers, from the raw results of commands.sh (results/FAMILY/NAME.json,
one `posjax extrapolate --pretrained` each): `FAMILY:NAME:METRIC@LENGTH` for every number of
every row (NAME: the file's name, e.g. none, yarn-4, longrope), and the tables `llama` (every
method on the Llama fixture) and `families` (no method and yarn:4 on each family)."""

from __future__ import annotations

import json
from pathlib import Path

LENGTHS = (32, 64, 128)


def _results(study: Path) -> dict[tuple[str, str], dict]:
    """(family, name) -> the result, "none" first within a family, then by name."""
    paths = sorted((Path(study) / "results").glob("*/*.json"),
                   key=lambda p: (p.parent.name, p.stem != "none", p.stem))
    return {(p.parent.name, p.stem): json.loads(p.read_text()) for p in paths}


def values(study: Path) -> dict[str, float]:
    out = {}
    for (family, name), result in _results(study).items():
        for row in result["lengths"]:
            for key, value in row.items():
                if key != "length" and isinstance(value, (int, float)):
                    out[f"{family}:{name}:{key}@{row['length']}"] = value
    return out


def _method(result: dict) -> str:
    method = result["method"]
    if method.lstrip().startswith("{"):
        return f"{json.loads(method)['rope_type']} JSON block"
    return method + (f" ({result['protocol']}, stride {result['stride']})"
                     if result["protocol"] == "sliding" else "")


def _cells(result: dict) -> list[str]:
    rows = {row["length"]: row for row in result["lengths"]}
    return [f"{rows[n]['ppl']:.2f}" if "ppl" in rows[n] else "not scored (the row's error)"
            for n in LENGTHS]


def tables(study: Path) -> dict[str, str]:
    header = ["ppl @ " + str(n) for n in LENGTHS]
    llama = ["| --rope_scaling | " + " | ".join(header) + " |", "|---|---|---|---|"]
    families = ["| family | --rope_scaling | " + " | ".join(header) + " |", "|---|---|---|---|---|"]
    for (family, name), result in _results(study).items():
        if family == "llama":
            llama.append("| " + " | ".join([_method(result), *_cells(result)]) + " |")
        if name in ("none", "yarn-4"):
            families.append("| " + " | ".join([family, _method(result), *_cells(result)])
                            + " |")
    return {"llama": "\n".join(llama), "families": "\n".join(families)}
