"""Tables in the READMEs are recomputed from the raw results in experiments/ (the generated
tables of the studies and of the benchmarks are checked in tests/test_report.py)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_executors_table_matches_its_raw_results():
    """experiments/executors: the table in its README and in docs/sweeps.md is the one
    measure.py prints from results.json."""
    spec = importlib.util.spec_from_file_location(
        "measure", ROOT / "experiments" / "executors" / "measure.py")
    measure = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(measure)
    results = json.loads(measure.RESULTS.read_text())
    table = measure.table(results)
    assert table in (ROOT / "experiments" / "executors" / "README.md").read_text()
    assert table in (ROOT / "docs" / "sweeps.md").read_text()
    assert measure.same_losses(results)


def test_every_relative_link_of_the_readme_and_the_docs_pages_resolves():
    """The reference moved from the README to docs/: a link written relative to the wrong
    folder points nowhere."""
    broken = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []
