"""Tables in the READMEs are recomputed from the raw results in experiments/."""

from __future__ import annotations

import importlib.util
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


def test_executors_table_matches_its_raw_results():
    """experiments/executors: the table in its README and in the project README is the one
    measure.py prints from results.json."""
    spec = importlib.util.spec_from_file_location(
        "measure", ROOT / "experiments" / "executors" / "measure.py")
    measure = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(measure)
    results = json.loads(measure.RESULTS.read_text())
    table = measure.table(results)
    assert table in (ROOT / "experiments" / "executors" / "README.md").read_text()
    assert table in (ROOT / "README.md").read_text()
    assert measure.same_losses(results)


def test_bench_training_table_is_the_median_of_the_quiet_runs_on_record():
    spec = importlib.util.spec_from_file_location(
        "quiet_runs", ROOT / "experiments" / "bench" / "quiet_runs.py")
    quiet_runs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quiet_runs)
    for readme in (ROOT / "experiments" / "bench" / "README.md", ROOT / "README.md"):
        assert quiet_runs.table() in readme.read_text(), readme
