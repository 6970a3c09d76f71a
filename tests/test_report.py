"""`posjax report`: a study's plots and generated README tables from its raw results."""

from __future__ import annotations

import math
from pathlib import Path

from posjax import cli, io
from posjax.eval import report

ROOT = Path(__file__).resolve().parents[1]


def _study(root: Path) -> Path:
    """A collected study folder (results/sweep.json, results/<run>/extrapolation.json) with
    two seeds of two encodings, and a README whose generated table is stale."""
    study = root / "experiments" / "toy"
    runs = {}
    for point, per_seed in {"encoding=rope": [2.0, 2.2], "encoding=alibi": [2.5, 2.7]}.items():
        for seed, ppl in enumerate(per_seed):
            name = f"{point},seed={seed}"
            runs[name] = {"status": "done"}
            io.write_json(study / "results" / name / "extrapolation.json", {
                "evaluation": "text", "protocol": "nonoverlapping", "stride": None,
                "method": "none", "train_len": 32, "encoding": {"name": "x"},
                "lengths": [{"length": 32, "ppl": ppl, "loss": math.log(ppl),
                             "bucket_size": 32, "bucket_loss": [math.log(ppl)]}]})
    io.write_json(study / "results" / "sweep.json", {"runs": runs})
    (study / "README.md").write_text("# toy\n\n<!-- posjax:table experiments/toy -->\n| old |\n"
                                     "<!-- /posjax:table -->\n\nFindings.\n")
    return study


def test_report_regenerates_a_stale_table_and_check_then_passes(tmp_path, monkeypatch, capsys):
    study = _study(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert report.check(study / "README.md") == ["experiments/toy"]
    assert cli.main(["report", "experiments/toy", "--check"]) == 1
    assert "stale table: experiments/toy" in capsys.readouterr().err
    assert cli.main(["report", "experiments/toy"]) == 0
    text = (study / "README.md").read_text()
    assert "| rope | 2.100 [2.000, 2.200] |" in text and "| old |" not in text
    assert text.endswith("<!-- /posjax:table -->\n\nFindings.\n")
    assert (study / "extrapolation.png").exists()
    assert report.check(study / "README.md") == []


def test_every_generated_table_in_the_repository_matches_its_raw_results():
    for readme in [ROOT / "README.md", *sorted((ROOT / "experiments").glob("*/README.md"))]:
        assert report.check(readme, ROOT) == [], f"{readme}: run `posjax report` on them"
