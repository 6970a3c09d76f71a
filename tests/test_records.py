"""The README's main-job table is recomputed from the raw results in experiments/main."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "main" / "results"


def _readme_rows() -> dict[str, list[str]]:
    """{encoding: the printed perplexities} of the README's main-job table."""
    text = (ROOT / "README.md").read_text()
    table = text[text.index("| encoding | 128 (train) |"):].split("\n\n")[0]
    rows = {}
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[re.sub(r" \(.*\)", "", cells[0])] = cells[1:]
    return rows


def test_readme_main_table_matches_the_raw_results():
    rows = _readme_rows()
    assert sorted(rows) == sorted(p.name.removeprefix("encoding=") for p in RESULTS.iterdir()
                                  if p.is_dir())
    for name, printed in rows.items():
        result = json.loads((RESULTS / f"encoding={name}" / "extrapolation.json").read_text())
        assert printed == [f"{r['ppl']:.2f}" for r in result["lengths"]], name
