"""`posjax report`: a study's plots and generated README tables from its raw results."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from posjax import fileio
from posjax.config import config_json, load_config_module
from posjax.errors import ConfigError
from posjax.launch import cli
from posjax.results import report, values

ROOT = Path(__file__).resolve().parents[1]


# What `report` draws for the toy study (`_study`).
PLOTS = ("extrapolation.png", "extrapolation.md", "position_loss.png")


def _missing_plots(study) -> list[str]:
    """`report --check`'s lines for the toy study before its plots are drawn."""
    return [f"{study}/{name}: missing (run `posjax report {study}`)" for name in PLOTS]


TOY = {"encoding=rope": {32: (2.0, 2.2)}, "encoding=alibi": {32: (2.5, 2.7)}}


def _study(root: Path, perplexities: dict = TOY) -> Path:
    """A collected study folder (results/sweep.json, results/<run>/extrapolation.json) with
    two seeds of each point ({point: {length: (seed 0's ppl, seed 1's)}}: two encodings at
    32 tokens by default), and a README whose generated table is stale."""
    study = root / "experiments" / "toy"
    runs = {}
    for point, lengths in perplexities.items():
        for seed in range(2):
            name = f"{point},seed={seed}"
            runs[name] = {"status": "done"}
            fileio.write_json(study / "results" / name / "extrapolation.json", {
                "evaluation": "text", "protocol": "nonoverlapping", "stride": None,
                "method": "none", "train_len": 32, "encoding": {"name": "x"},
                "lengths": [{"length": n, "ppl": ppl[seed], "loss": math.log(ppl[seed]),
                             "bucket_size": 32, "bucket_loss": [math.log(ppl[seed])] * (n // 32)}
                            for n, ppl in lengths.items()]})
    fileio.write_json(study / "results" / "sweep.json", {"runs": runs})
    (study / "README.md").write_text("# toy\n\n<!-- posjax:table experiments/toy -->\n| old |\n"
                                     "<!-- /posjax:table -->\n\nFindings.\n")
    return study


def test_report_regenerates_a_stale_table_and_check_then_passes(tmp_path, monkeypatch, capsys):
    study = _study(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert report.check(study / "README.md") == [
        f"{study / 'README.md'}: stale table experiments/toy "
        "(run `posjax report experiments/toy`)"]
    assert cli.main(["report", "experiments/toy", "--check"]) == 1
    assert "stale table experiments/toy" in capsys.readouterr().err
    assert cli.main(["report", "experiments/toy"]) == 0
    text = (study / "README.md").read_text()
    assert "| rope | 2.100 [2.000, 2.200] |" in text and "| old |" not in text
    assert text.endswith("<!-- /posjax:table -->\n\nFindings.\n")
    assert (study / "extrapolation.png").exists()
    assert report.check(study / "README.md") == []
    assert report.stale_plots(study) == []
    # A result edited after its pictures were drawn: --check names each plot it changes.
    edited = study / "results" / "encoding=rope,seed=0" / "extrapolation.json"
    fileio.write_json(edited, {**fileio.read_json(edited), "lengths": [
        {"length": 32, "ppl": 3.0, "loss": math.log(3.0), "bucket_size": 32,
         "bucket_loss": [math.log(3.0)]}]})
    stale = [f"{study / name}: stale, its raw results draw it otherwise (run `posjax report "
             f"{study}`)" for name in PLOTS]
    assert report.stale_plots(study) == stale
    capsys.readouterr()
    assert cli.main(["report", "experiments/toy", "--check"]) == 1
    err = capsys.readouterr().err
    assert "experiments/toy/extrapolation.png: stale" in err
    assert "experiments/toy/extrapolation.md: stale" in err


def test_check_of_several_studies_reads_each_page_once_and_names_what_is_stale(
        tmp_path, monkeypatch, capsys):
    """--check took one study folder: checking every study was a process each, each
    recomputing the values of every study the checkout's README quotes (3 minutes here)."""
    first = _study(tmp_path)
    second = first.parent / "toy2"
    shutil.copytree(first, second)
    (second / "README.md").write_text((second / "README.md").read_text().replace(
        "experiments/toy ", "experiments/toy2 "))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["report", "experiments/toy"]) == 0
    capsys.readouterr()
    assert cli.main(["report", "experiments/toy", "experiments/toy2", "--check"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert not any(line.startswith("experiments/toy/") for line in err), err
    assert "experiments/toy2/README.md: stale table experiments/toy2 (run `posjax report "\
           "experiments/toy2`)" in err
    assert cli.main(["report", "experiments/toy2"]) == 0
    capsys.readouterr()
    assert cli.main(["report", "experiments/toy", "experiments/toy2", "--check"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"experiments/{name}: every generated table, quoted number, claim and plot matches "
        "its raw results" for name in ("toy", "toy2")]


def test_quoted_numbers_are_recomputed_rounded_as_written_and_checked(tmp_path, monkeypatch):
    study = _study(tmp_path)
    monkeypatch.chdir(tmp_path)
    readme = study / "README.md"
    readme.write_text(
        "# toy\n\n## Findings\n\nRoPE scores <!-- v rope:ppl@32 -->2.1 [<!-- v "
        "rope:ppl@32:lo -->2.000, <!-- v rope:ppl@32:hi -->2.9] over <!-- v rope:seeds -->2 "
        "seeds; ALiBi <!-- v experiments/toy|alibi:ppl@32 -->260 % against the paper's "
        "<!-- p -->1.5.\n")
    problems = report.check(readme)
    # 2.1 is the mean 2.100 as written; 2.6 as a percentage is 260: only the bound is wrong
    assert problems == [f"{readme}: rope:ppl@32:hi is quoted as 2.9, its raw files give 2.2"]
    report.report(study)
    assert "<!-- v rope:ppl@32:hi -->2.2]" in readme.read_text()
    assert report.check(readme) == []


def test_a_claim_on_two_intervals_is_checked_at_each_length_it_names(tmp_path):
    """`<!-- c A < B -->`, `>` and `~` hold where the seeds' intervals are apart that way or
    overlap; `@*` claims it at every length both keys have, `@N..M` within those bounds; a
    number is itself."""
    study = _study(tmp_path, {"encoding=rope": {32: (2.0, 2.2), 64: (3.0, 3.2)},
                              "encoding=alibi": {32: (2.5, 2.7), 64: (2.6, 3.1)}})
    readme = study / "README.md"
    holding = ("RoPE is below ALiBi at 32 <!-- c rope:ppl@32 < alibi:ppl@32 -->, within noise "
               "at 64 <!-- c rope:ppl@64 ~ experiments/toy|alibi:ppl@64 -->, ALiBi above RoPE "
               "<!-- c alibi:ppl@..32 > rope:ppl@..32 --> from the start; a bound is its one "
               "value <!-- c rope:ppl@64:lo > alibi:ppl@32:hi -->, a number itself "
               "<!-- c rope:ppl@64.. ~ 3.1 --><!-- c alibi:ppl@* > 2.4 -->, a key without a "
               "range of lengths at each <!-- c alibi:ppl@* > rope:ppl@32 -->; `<!-- c "
               "rope:ppl@32 > alibi:ppl@32 -->` shows the syntax.")
    readme.write_text(f"## Findings\n\n{holding}\n")
    assert report.check(readme, tmp_path) == []
    readme.write_text("## Findings\n\nRoPE is below ALiBi at every length "
                      "<!-- c rope:ppl@* < alibi:ppl@* -->, at 64 too <!-- c rope:ppl@64.. < "
                      "alibi:ppl@64.. -->, within noise <!-- c rope:ppl@32 ~ alibi:ppl@32 -->, "
                      "above <!-- c rope:ppl@32 > alibi:ppl@32 -->.\n")
    assert report.check(readme, tmp_path) == [
        f"{readme}: the claim rope:ppl@* < alibi:ppl@* does not hold at 64: rope:ppl@64 spans "
        "[3, 3.2], alibi:ppl@64 [2.6, 3.1], overlapping: change the sentence and its claim to "
        "what the data say",
        f"{readme}: the claim rope:ppl@64.. < alibi:ppl@64.. does not hold: rope:ppl@64 spans "
        "[3, 3.2], alibi:ppl@64 [2.6, 3.1], overlapping: change the sentence and its claim to "
        "what the data say",
        f"{readme}: the claim rope:ppl@32 ~ alibi:ppl@32 does not hold: rope:ppl@32 spans "
        "[2, 2.2], alibi:ppl@32 [2.5, 2.7], apart: change the sentence and its claim to what "
        "the data say",
        f"{readme}: the claim rope:ppl@32 > alibi:ppl@32 does not hold: rope:ppl@32 spans "
        "[2, 2.2], alibi:ppl@32 [2.5, 2.7], apart the other way: change the sentence and its "
        "claim to what the data say"]


def test_a_claim_its_keys_cannot_give_is_one_line(tmp_path):
    study = _study(tmp_path)
    readme = study / "README.md"
    readme.write_text("## Findings\n\n<!-- c rope:ppl@* < alibi:ppl@32.. --> "
                      "<!-- c rope:ppl@128.. < alibi:ppl@128.. --> "
                      "<!-- c rope:ppl@64 < alibi:ppl@32 -->\n")
    assert report.check(readme, tmp_path) == [
        f"{readme}: the claim rope:ppl@* ... alibi:ppl@32.. ranges over different lengths in "
        "its keys: write the same @* or @N..M in both",
        f"{readme}: the claim rope:ppl@128.. ... alibi:ppl@128.. has no length both keys hold "
        "in its range: fix the keys or the range",
        f"{readme}: no number 'rope:ppl@64' in {study}; did you mean rope:ppl@32, "
        "rope:ppl@32:lo, rope:ppl@32:hi?"]


def test_ranking_words_without_a_claim_in_findings_are_reported_once_per_paragraph(tmp_path):
    """A ranking ("ranges apart", "within noise") in a findings paragraph, list item or
    table row needs a claim, or `<!-- unchecked: why -->`; outside findings, in a heading,
    in code or in a generated table it is prose."""
    readme = _study(tmp_path) / "README.md"
    readme.write_text(
        "# x\n\nRoPE is within noise of ALiBi.\n\n## Findings\n\n### Within noise\n\n"
        "RoPE and ALiBi are within noise\nof each other; the ranges are apart at 64.\n\n"
        "- xPos is below, ranges apart <!-- c rope:ppl@32 < alibi:ppl@32 -->.\n"
        "- a definition (\"apart\": the brackets do not overlap<!-- unchecked: a definition -->)\n"
        "- `within noise` and `<!-- c a < b -->` are code\n\n"
        "| claim | verdict |\n|---|---|\n| PaTH beats RoPE | not reproduced (within noise) |\n\n"
        "<!-- posjax:table experiments/x -->\nrank two runs only where their brackets do not "
        "overlap\n<!-- /posjax:table -->\n\n## Caveats\n\nranges overlap\n")
    assert values.unclaimed(readme.read_text()) == [
        "RoPE and ALiBi are within noise of each other; the ranges ar",
        "| PaTH beats RoPE | not reproduced (within noise) |"]
    readme.write_text(readme.read_text().split("<!-- posjax:table")[0])  # no such study
    assert report.check(readme, tmp_path) == [(

        f"{readme}: ranking words with no claim in a findings section: 'RoPE and ALiBi are "
        "within noise of each other; the ranges ar...' (mark it <!-- c A < B -->, > or ~, or "
        "say <!-- unchecked: why --> where the raw files hold no keys for it)"),
        f"{readme}: ranking words with no claim in a findings section: '| PaTH beats RoPE | not "
        "reproduced (within noise) |...' (mark it <!-- c A < B -->, > or ~, or say "
        "<!-- unchecked: why --> where the raw files hold no keys for it)"]


def test_report_refuses_a_contradicted_claim_writing_nothing(tmp_path, monkeypatch, capsys):
    """A new raw result that overturns a sentence's ranking stops `posjax report` before any
    plot or page is written, naming the claim, so the sentence is changed, not left; so does
    a ranking with no claim."""
    study = _study(tmp_path)
    monkeypatch.chdir(tmp_path)
    readme = study / "README.md"
    text = "# toy\n\n## Findings\n\nALiBi is below RoPE <!-- c alibi:ppl@32 < rope:ppl@32 -->.\n"
    readme.write_text(text)
    assert cli.main(["report", "experiments/toy"]) == 2
    assert capsys.readouterr().err == (
        "posjax report: error: experiments/toy/README.md: the claim alibi:ppl@32 < "
        "rope:ppl@32 does not hold: alibi:ppl@32 spans [2.5, 2.7], rope:ppl@32 [2, 2.2], apart "
        "the other way: change the sentence and its claim to what the data say; nothing was "
        "written\n")
    assert readme.read_text() == text and not any(study.glob("*.png"))
    text = "# toy\n\n## Findings\n\nALiBi and RoPE are within noise.\n"
    readme.write_text(text)
    assert cli.main(["report", "experiments/toy"]) == 2
    assert capsys.readouterr().err.startswith(
        "posjax report: error: experiments/toy/README.md: ranking words with no claim in a "
        "findings section: 'ALiBi and RoPE are within noise....'")
    assert readme.read_text() == text and not any(study.glob("*.png"))


def test_a_readme_in_a_folder_of_the_study_quotes_the_studys_numbers_and_is_checked(
        tmp_path, monkeypatch, capsys):
    """experiments/bench/seed_steps_cpu/README.md quoted the bench's numbers, but neither
    report nor --check read it: a wrong quote there passed."""
    study = _study(tmp_path)
    monkeypatch.chdir(tmp_path)
    report.report(study)
    raw = study / "raw" / "README.md"
    raw.parent.mkdir()
    raw.write_text("# raw files\n\nRoPE scores <!-- v rope:ppl@32 -->2.9 at 32.\n")
    assert cli.main(["report", "experiments/toy", "--check"]) == 1
    assert capsys.readouterr().err == (
        "experiments/toy/raw/README.md: rope:ppl@32 is quoted as 2.9, its raw files give 2.1\n")
    report.report(study)
    assert "<!-- v rope:ppl@32 -->2.1 at 32" in raw.read_text()
    assert cli.main(["report", "experiments/toy", "--check"]) == 0


def test_a_figure_in_findings_without_a_marker_is_reported(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\nSetup: lr 0.002, 95 % of tokens.\n\n## Findings\n\n"
                      "ALiBi wins by 1.34x and 84 % (`seq_len=0.5` is code).\n\n"
                      "## Caveats\n\nbatch noise 0.5\n")
    assert values.unmarked(readme.read_text()) == ["1.34x", "84 %"]
    assert [p.split("unmarked figure ")[1][:8] for p in report.check(readme, tmp_path)] == [
        "'1.34x' ", "'84 %' i"]


def test_report_refuses_a_figure_without_a_marker_writing_nothing(tmp_path, monkeypatch, capsys):
    """report wrote the plots and pages and exited 0 where report --check (and the suite)
    then failed on the same page."""
    study = _study(tmp_path)
    monkeypatch.chdir(tmp_path)
    readme = study / "README.md"
    readme.write_text(readme.read_text() + "\n## Findings\n\nAlso theta 5e5 is 3% better.\n")
    before = readme.read_text()
    assert cli.main(["report", "experiments/toy"]) == 2
    assert capsys.readouterr().err == (
        "posjax report: error: experiments/toy/README.md: unmarked figure '3%' in a findings "
        "section: quote it as <!-- v KEY --> (or <!-- p --> if published); nothing was "
        "written\n")
    assert readme.read_text() == before and not (study / "extrapolation.png").exists()


def test_markers_in_a_fenced_code_block_are_examples_left_as_written(tmp_path, monkeypatch):
    """A page showing how to write a table marker and a quote (docs/sweeps.md) named a study
    that does not exist: report failed on it, and would have rewritten the example."""
    study = _study(tmp_path)
    example = ("```markdown\n<!-- posjax:table experiments/mine -->\n<!-- /posjax:table -->\n"
               "\n## Findings\n\nrope reaches <!-- v rope:ppl@2048 -->0.00\n```\n")
    readme = study / "README.md"
    readme.write_text(readme.read_text() + "\n## Findings\n\nrope <!-- v rope:ppl@32 -->0.0\n\n"
                      + example)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["report", "experiments/toy"]) == 0
    text = readme.read_text()
    assert "rope <!-- v rope:ppl@32 -->2.1" in text and text.endswith(example)
    assert report.check(readme) == []


def test_a_benchmark_folder_names_its_tables_in_its_values_py(tmp_path, monkeypatch, capsys):
    """A folder without a sweep: values.py's tables(study) fill `#name` blocks, and report
    rewrites them (no plots); an unknown name is one line listing the tables it has."""
    bench = tmp_path / "experiments" / "bench"
    bench.mkdir(parents=True)
    (bench / "raw.json").write_text('{"ratio": [1.25, 1.5, 2.0]}')
    (bench / "values.py").write_text(
        "import json, statistics\n"
        "def values(study):\n"
        "    return {'ratio': statistics.median(json.loads((study / 'raw.json').read_text())"
        "['ratio'])}\n"
        "def tables(study):\n"
        "    return {'speed': f\"| ratio |\\n|---|\\n| {values(study)['ratio']:.2f} |\"}\n")
    readme = bench / "README.md"
    readme.write_text("# bench\n\n<!-- posjax:table experiments/bench#speed -->\n| old |\n"
                      "<!-- /posjax:table -->\n\n## Findings\n\nMedian <!-- v ratio -->1.5x.\n")
    monkeypatch.chdir(tmp_path)
    assert report.check(readme) == [f"{readme}: stale table experiments/bench#speed "
                                    "(run `posjax report experiments/bench`)"]  # which one
    assert cli.main(["report", "experiments/bench"]) == 0
    assert "| ratio |\n|---|\n| 1.50 |\n<!-- /posjax:table -->" in readme.read_text()
    assert report.check(readme) == []
    readme.write_text(readme.read_text().replace("#speed", "#sped"))
    with pytest.raises(ConfigError, match=r"has no table 'sped'; its values.py gives \['speed'\]"):
        report.check(readme)


def test_a_values_py_that_raises_is_one_line_naming_the_file(tmp_path, monkeypatch, capsys):
    bench = tmp_path / "experiments" / "bench"
    bench.mkdir(parents=True)
    (bench / "values.py").write_text(
        "import json\n"
        "def values(study):\n"
        "    return json.loads((study / 'raw.json').read_text())\n")
    (bench / "README.md").write_text("## Findings\n\nMedian <!-- v ratio -->1.5x.\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["report", "experiments/bench", "--check"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "values.py: values() failed with FileNotFoundError" in err and "raw.json" in err


def test_a_number_missing_with_a_folder_values_py_reads_absent_names_that_folder(tmp_path):
    """A study whose values.py also reads a folder beside it (READS), copied without that
    folder, said only "no number"; now the line names the folder to put beside it."""
    bench = tmp_path / "experiments" / "bench"
    bench.mkdir(parents=True)
    (bench / "values.py").write_text(
        "READS = ('../main/results',)\n"
        "def values(study):\n"
        "    main = study / READS[0] / 'ppl.txt'\n"
        "    out = {'ratio': 1.5}\n"
        "    if main.exists():\n"
        "        out['main_ppl'] = float(main.read_text())\n"
        "    return out\n")
    readme = bench / "README.md"
    readme.write_text("## Findings\n\n<!-- v ratio -->1.5x, <!-- v main_ppl -->9.2\n")
    assert report.check(readme, tmp_path) == [
        f"{readme}: no number 'main_ppl' in {bench}; its values.py also reads ../main/results, "
        "not there: put that folder beside the study"]
    (tmp_path / "experiments" / "main" / "results").mkdir(parents=True)
    (tmp_path / "experiments" / "main" / "results" / "ppl.txt").write_text("9.2")
    assert report.check(readme, tmp_path) == []


def test_an_unknown_quoted_name_is_one_line_naming_the_study(tmp_path, monkeypatch):
    study = _study(tmp_path)
    (study / "README.md").write_text("## Findings\n\n<!-- v rope:ppl@64 -->2.0\n"
                                     "<!-- v qwerty -->2.0\n")
    near, far = report.check(study / "README.md", tmp_path)
    assert near == (f"{study / 'README.md'}: no number 'rope:ppl@64' in {study}; did you mean "
                    "rope:ppl@32, rope:ppl@32:lo, rope:ppl@32:hi?")
    assert far.startswith(f"{study / 'README.md'}: no number 'qwerty' in {study}; it has e.g. ")


def test_a_study_outside_a_checkout_is_checked_whole_and_reported_whole_or_not_at_all(
        tmp_path, monkeypatch, capsys):
    """From another folder, `posjax report ABS/experiments/toy --check` said experiments/toy/
    results does not exist; --check stopped at the first key its study lacks; and a report
    failing on such a key had already redrawn the plots, leaving the folder half-updated."""
    study = _study(tmp_path / "outside")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    readme = study / "README.md"
    good = readme.read_text()
    readme.write_text(good + "\n## Findings\n\n<!-- v rope:ppl@64 -->2.0 and "
                      "<!-- v experiments/toy|alibi:pp@32 -->2.6\n")
    assert cli.main(["report", str(study), "--check"]) == 1
    err = capsys.readouterr().err
    assert "stale table experiments/toy" in err
    assert "no number 'rope:ppl@64'" in err and "no number 'alibi:pp@32'" in err
    before = readme.read_text()
    assert cli.main(["report", str(study)]) == 2
    assert "no number 'rope:ppl@64'" in capsys.readouterr().err
    assert readme.read_text() == before and not (study / "extrapolation.png").exists()
    readme.write_text(good)
    assert cli.main(["report", str(study)]) == 0
    assert (study / "extrapolation.png").exists()
    assert report.check(readme, report.checkout_root(study)) == []


def test_a_stale_number_or_table_in_a_docs_page_is_caught_and_regenerated(
        tmp_path, monkeypatch, capsys):
    """The reference in docs/ quotes results as the README does: `posjax report --check` on
    any study lists a docs page's stale table and wrong number, and `posjax report` fixes
    both."""
    _study(tmp_path)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "experiments" / "toy" / "README.md").write_text("# toy\n")
    page = tmp_path / "docs" / "performance.md"
    page.parent.mkdir()
    page.write_text("# Performance\n\n<!-- posjax:table experiments/toy -->\n| old |\n"
                    "<!-- /posjax:table -->\n\nRoPE: <!-- v experiments/toy|rope:ppl@32 -->2.5\n")
    assert report.pages("experiments/toy") == [Path("experiments/toy/README.md"),
                                               Path("docs/performance.md")]
    assert cli.main(["report", "experiments/toy", "--check"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        *_missing_plots("experiments/toy"),
        "docs/performance.md: stale table experiments/toy (run `posjax report experiments/toy`)",
        "docs/performance.md: experiments/toy|rope:ppl@32 is quoted as 2.5, its raw files give "
        "2.1"]
    assert cli.main(["report", "experiments/toy"]) == 0
    assert "docs/performance.md" in capsys.readouterr().out.splitlines()
    text = page.read_text()
    assert "| rope | 2.100 [2.000, 2.200] |" in text and "rope:ppl@32 -->2.1\n" in text
    capsys.readouterr()
    assert cli.main(["report", "experiments/toy", "--check"]) == 0
    assert capsys.readouterr().out.splitlines() == [  # one line, where it said nothing
        "experiments/toy: every generated table, quoted number, claim and plot matches its raw "
        "results"]


def test_check_draws_the_plots_of_a_studys_sub_studies_too(tmp_path):
    """experiments/encodings_2025/text_image's picture and table kept an older ranking, and
    the check, which drew the study's own results/ only, said every plot matched."""
    study = _study(tmp_path)
    sub = study / "sub"
    shutil.copytree(study / "results", sub / "results")
    for name in PLOTS:
        (study / name).unlink(missing_ok=True)
    assert report.stale_plots(study) == [
        *(f"{study / name}: missing (run `posjax report {study}`)" for name in PLOTS),
        *(f"{sub / name}: missing (run `posjax report {sub}`)" for name in PLOTS)]
    report.report(study, tmp_path)  # draws the sub-study's too
    assert report.stale_plots(study) == []
    assert all((sub / name).is_file() for name in PLOTS)


def test_every_generated_table_in_the_repository_matches_its_raw_results():
    cache: dict = {}  # each study's values once, for every page that quotes them
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
                 *sorted((ROOT / "experiments").glob("*/README.md"))]:
        assert report.check(page, ROOT, cache) == [], f"{page}: run `posjax report` on them"


def test_every_studys_plots_are_what_its_raw_results_draw():
    """Drawing is deterministic (matplotlib pinned, no dates in the files), so each study's
    committed pictures and plotted tables are compared byte for byte, and those of the
    sub-studies of a study with none of its own (experiments/retrieval/passkey)."""
    for study in sorted(p for p in (ROOT / "experiments").iterdir() if p.is_dir()):
        assert report.stale_plots(study) == [], study  # with its sub-studies'


def test_the_reference_in_docs_quotes_results_that_the_check_covers():
    """docs/ holds generated tables and quoted numbers, so the test above guards them."""
    quoted = [page.name for page in sorted((ROOT / "docs").glob("*.md"))
              if "<!-- posjax:table" in page.read_text() or "<!-- v " in page.read_text()]
    assert {"performance.md", "pretrained.md", "sweeps.md"} <= set(quoted)


def test_every_study_readme_has_a_findings_section_the_check_covers():
    for readme in sorted((ROOT / "experiments").glob("*/README.md")):
        assert "\n## Findings" in readme.read_text(), readme


def test_values_give_each_seeds_ratio_to_the_first_length_and_the_budget(tmp_path):
    study = tmp_path / "study"
    runs = {}
    for seed, (short, long) in enumerate(((2.0, 3.0), (4.0, 8.0))):
        name = f"encoding=rope,seed={seed}"
        runs[name] = {"status": "done", "seconds": 10.0 * (seed + 1)}
        fileio.write_json(study / "results" / name / "extrapolation.json", {
            "evaluation": "text", "protocol": "nonoverlapping", "method": "none",
            "train_len": 32, "lengths": [{"length": 32, "ppl": short},
                                         {"length": 64, "ppl": long}]})
    fileio.write_json(study / "results" / "sweep.json", {"runs": runs})
    found = values.study_values(study)
    assert found["rope:ppl@64/32"] == 1.75  # (1.5 + 2.0) / 2, not 5.5 / 3
    assert (found["rope:ppl@64/32:lo"], found["rope:ppl@64/32:hi"]) == (1.5, 2.0)
    assert found["rope:seeds"] == 2 and "setup:runs" not in found  # no config.json, no budget


@pytest.mark.parametrize("command", ["plot", "report"])
def test_a_truncated_result_file_is_one_line_naming_it(tmp_path, monkeypatch, one_error_line,
                                                       command):
    study = _study(tmp_path)
    damaged = study / "results" / "encoding=rope,seed=1" / "extrapolation.json"
    damaged.write_text(damaged.read_text()[:40])
    monkeypatch.chdir(tmp_path)
    target = {"plot": "experiments/toy/results", "report": "experiments/toy"}[command]
    assert cli.main([command, target]) == 2
    assert one_error_line() == (
        f"posjax {command}: error: experiments/toy/results/encoding=rope,seed=1/"
        "extrapolation.json is not valid JSON (Expecting value: line 3): "
        "it was damaged; restore it from a copy (git checkout, a backup), or delete it and "
        "re-run the command that wrote it")


@pytest.mark.parametrize("command", ["plot", "report", "check"])
def test_a_result_with_text_for_a_number_is_one_line_naming_it(tmp_path, monkeypatch,
                                                                 one_error_line, command):
    """`"ppl": "abc"`, edited by hand: plot's ValueError, report --check's TypeError."""
    study = _study(tmp_path)
    edited = study / "results" / "encoding=rope,seed=1" / "extrapolation.json"
    result = fileio.read_json(edited)
    result["lengths"][0]["ppl"] = "abc"
    fileio.write_json(edited, result)
    monkeypatch.chdir(tmp_path)
    argv = {"plot": ["plot", "experiments/toy/results"], "report": ["report", "experiments/toy"],
            "check": ["report", "experiments/toy", "--check"]}[command]
    assert cli.main(argv) == 2
    assert one_error_line() == (
        f"posjax {argv[0]}: error: experiments/toy/results/encoding=rope,seed=1/"
        "extrapolation.json is not a result posjax wrote (it holds evaluation, train_len, "
        "protocol, lengths, the last a list of rows by length, of numbers): restore it from a "
        "copy (git checkout, a backup), or delete it and re-run the command that wrote it")


def test_plot_names_the_runs_without_results_and_plots_the_rest(tmp_path, monkeypatch,
                                                                one_error_line):
    study = _study(tmp_path)
    (study / "results" / "encoding=alibi,seed=1" / "extrapolation.json").unlink()
    monkeypatch.chdir(tmp_path)
    assert cli.main(["plot", "experiments/toy/results", "--output=out"]) == 0
    assert one_error_line() == (
        "warning: 1 run(s) of experiments/toy/results have no extrapolation result and are "
        "left out of the plots and table: encoding=alibi,seed=1 (finish them: re-run the "
        "sweep's command, or posjax extrapolate --workdir=RUNDIR)")
    table = (tmp_path / "out" / "extrapolation.md").read_text()
    assert "| rope | 2.100 [2.000, 2.200] |" in table and "| alibi | 2.500 |" in table
    # runs trained one by one (no sweep.json): the train command resumes them
    shutil.copytree(study / "results", tmp_path / "runs")
    (tmp_path / "runs" / "sweep.json").unlink()
    fileio.write_json(tmp_path / "runs" / "encoding=alibi,seed=1" / "config.json", {})
    assert cli.main(["plot", "runs", "--output=out2"]) == 0
    assert one_error_line().endswith(
        "encoding=alibi,seed=1 (finish them: re-run the train command, which resumes, or "
        "posjax extrapolate --workdir=RUNDIR)")
    # a run whose folder is gone: the sweep trains it again, no extrapolate can score it
    shutil.rmtree(study / "results" / "encoding=alibi,seed=1")
    assert cli.main(["plot", "experiments/toy/results", "--output=out"]) == 0
    assert one_error_line() == (
        "warning: 1 run(s) that the sweep.json of experiments/toy/results lists have no folder "
        "and are left out of the plots and table: encoding=alibi,seed=1 (re-run the sweep to "
        "train them)")


def test_the_readme_picture_is_the_main_study_picture_as_report_draws_it():
    """docs/extrapolation.png (the README's picture) is experiments/main/extrapolation.png,
    which `posjax report experiments/main` redraws: plain-number ticks, not 2^7 and 4x10^1."""
    assert (ROOT / "docs" / "extrapolation.png").read_bytes() == (
        ROOT / "experiments" / "main" / "extrapolation.png").read_bytes()


def test_extrapolation_plot_ticks_read_as_plain_numbers(tmp_path, monkeypatch):
    study = _study(tmp_path)
    for path in (study / "results").glob("*/extrapolation.json"):
        result = fileio.read_json(path)
        result["lengths"] = [{**result["lengths"][0], "length": n, "ppl": ppl}
                             for n, ppl in ((128, 12.0), (256, 19.0), (512, 41.0))]
        fileio.write_json(path, result)
    figures = []
    monkeypatch.setattr(fileio, "save_figure", lambda fig, path, **kw: figures.append(fig) or path)
    report.plots.plot_sweep(study / "results", output=tmp_path)
    ax = figures[0].axes[0]
    figures[0].canvas.draw()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["128", "256", "512"]
    shown = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert shown and all(text.isdigit() for text in shown), shown
    assert not [t.get_text() for t in ax.get_xticklabels(minor=True) if t.get_text()]


def test_a_length_axis_leaves_blank_a_label_that_would_overlap_its_neighbour():
    """Lengths 128 and 129 beside 32..8192 on a log axis (every picture of lengths draws
    it): both labels were drawn, one over the other; every length keeps its tick, and the
    longest is labelled."""
    from matplotlib import pyplot as plt

    from posjax.results import glyphs
    lengths = [32, 64, 128, 129, 256, 512, 1024, 2048, 4096, 8192]
    fig, ax = plt.subplots(figsize=(6, 4))
    report.plots._plain_log_axes(ax, lengths)
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert [round(t) for t in ax.get_xticks()] == lengths
    assert labels == ["32", "64", "128", "", "256", "512", "1024", "2048", "4096", "8192"]
    assert glyphs._spaced([128, 129, 130, 256], 1.0, 0.1) == ["128", "", "", "256"]
    plt.close(fig)


def _hand_trained(root: Path, ppl: dict[str, float]) -> None:
    """Run folders trained one by one (`posjax train --workdir=ROOT/NAME`): a config.json
    (byte tokenizer) and an extrapolation.json each, no sweep.json."""
    for name, value in ppl.items():
        fileio.write_json(root / name / "config.json", {"data": {"tokenizer": "bytes"}})
        fileio.write_json(root / name / "extrapolation.json", {
            "evaluation": "text", "protocol": "nonoverlapping", "stride": None,
            "method": "none", "train_len": 32, "encoding": {"name": name.split(",")[0]},
            "lengths": [{"length": n, "ppl": value * n / 32, "loss": math.log(value),
                         "bucket_size": 32, "bucket_loss": [math.log(value)]}
                        for n in (32, 64)]})


@pytest.mark.parametrize("given", [["runs/rope", "runs/alibi"], ["runs"]])
def test_plot_compares_runs_trained_by_hand_as_a_sweep_is_compared(tmp_path, monkeypatch,
                                                                   capsys, given):
    _hand_trained(tmp_path / "runs", {"rope": 2.0, "alibi": 3.0})
    monkeypatch.chdir(tmp_path)
    assert cli.main(["plot", *given]) == 0
    written = capsys.readouterr().out.split()
    assert written == ["runs/extrapolation.png", "runs/extrapolation.md",
                       "runs/position_loss.png"]  # into the folder that holds the runs
    table = (tmp_path / "runs" / "extrapolation.md").read_text()
    # the table a sweep of these runs gets
    assert table == report.plots.results_table(report.plots.sweep_results(given))
    assert "| rope | 2.000 | 4.000 |" in table and "| alibi | 3.000 | 6.000 |" in table


def test_plot_draws_a_result_file_written_elsewhere_as_a_run_named_by_the_file(
        tmp_path, monkeypatch, capsys, one_error_line):
    """posjax extrapolate --output=FILE wrote results that no plot could draw: a folder of
    them has no run, and their names need not match extrapolation*.json."""
    _hand_trained(tmp_path / "runs", {"rope": 2.0, "alibi": 3.0})
    (tmp_path / "elsewhere").mkdir()
    shutil.move(tmp_path / "runs" / "rope" / "extrapolation.json",
                tmp_path / "elsewhere" / "rope_yarn.json")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["plot", "elsewhere/rope_yarn.json", "runs/alibi", "--output=cmp"]) == 0
    table = (tmp_path / "cmp" / "extrapolation.md").read_text()
    assert "| rope_yarn | 2.000 | 4.000 |" in table and "| alibi | 3.000 | 6.000 |" in table
    # a file in a run's folder is named by the run too
    shutil.copy(tmp_path / "elsewhere" / "rope_yarn.json", tmp_path / "runs" / "alibi" / "b.json")
    assert cli.main(["plot", "runs/alibi/b.json", "runs/alibi", "--output=cmp"]) == 0
    assert "| b,alibi | 2.000 | 4.000 |" in (tmp_path / "cmp" / "extrapolation.md").read_text()
    # one file alone: its plots go beside it
    capsys.readouterr()
    assert cli.main(["plot", "elsewhere/rope_yarn.json"]) == 0
    assert capsys.readouterr().out.split()[0] == "elsewhere/extrapolation.png"
    (tmp_path / "notes.txt").write_text("x")
    assert cli.main(["plot", "notes.txt"]) == 2
    assert one_error_line() == (
        "posjax plot: error: notes.txt is a file, not a folder nor a result file (.json, as "
        "posjax extrapolate writes): give a sweep or run directory, or a result file")


def test_report_of_run_folders_draws_their_plots_and_prints_their_table(tmp_path, monkeypatch,
                                                                        capsys, one_error_line):
    _hand_trained(tmp_path / "runs", {"rope": 2.0, "alibi": 3.0})
    monkeypatch.chdir(tmp_path)
    assert cli.main(["report", "runs/rope", "runs/alibi", "--output=cmp"]) == 0
    out = capsys.readouterr().out
    assert "| rope | 2.000 | 4.000 |" in out and "Perplexity per byte" in out
    assert (tmp_path / "cmp" / "extrapolation.png").stat().st_size > 0
    assert cli.main(["report", "runs", "--check"]) == 2
    assert one_error_line() == (
        "posjax report: error: --check takes study folders (experiments/NAME, with "
        "results/sweep.json or values.py), and runs is none: drop it, or drop --check to "
        "compare run folders")


def test_runs_of_two_sweeps_with_the_same_names_are_told_apart_by_their_sweep(tmp_path):
    for sweep in ("a", "b"):
        _hand_trained(tmp_path / sweep / "runs", {"encoding=rope": 2.0})
        fileio.write_json(tmp_path / sweep / "sweep.json", {"runs": {"encoding=rope": {}}})
    labels = [r["label"] for r in report.plots.load_results([tmp_path / "a", tmp_path / "b"])]
    assert labels == ["a/encoding=rope", "b/encoding=rope"]
    # a run given twice, in its sweep and by itself, is one run
    assert report.plots.runs_of([tmp_path / "a", tmp_path / "a" / "runs" / "encoding=rope"]) \
        == {"encoding=rope": tmp_path / "a" / "runs" / "encoding=rope"}


def test_a_lone_run_and_a_sweeps_seed_of_one_seed_are_two_points(tmp_path, monkeypatch, capsys):
    """A sweep's encoding=rope beside another's encoding=rope,seed=0 and ,seed=1 (6 steps
    against 12): "are the point 'rope' trained with the same seed 0 ... plot one of them"."""
    _hand_trained(tmp_path / "a" / "runs", {"encoding=rope": 2.0})
    _hand_trained(tmp_path / "b" / "runs", {"encoding=rope,seed=0": 3.0,
                                            "encoding=rope,seed=1": 3.2})
    for run, seed in (("a/runs/encoding=rope", 0), ("b/runs/encoding=rope,seed=0", 0),
                      ("b/runs/encoding=rope,seed=1", 1)):
        config = tmp_path / run / "config.json"
        fileio.write_json(config, {**fileio.read_json(config), "train": {"seed": seed}})
    for sweep in ("a", "b"):
        names = [p.name for p in (tmp_path / sweep / "runs").iterdir()]
        fileio.write_json(tmp_path / sweep / "sweep.json", {"runs": dict.fromkeys(names, {})})
    monkeypatch.chdir(tmp_path)
    assert cli.main(["plot", "a", "b", "--output=both"]) == 0
    table = (tmp_path / "both" / "extrapolation.md").read_text()
    assert "| a/encoding=rope | 2.000 | 4.000 |" in table
    assert "| b/encoding=rope | 3.100 [3.000, 3.200] |" in table
    # and two lone run folders of seed 0, one named as a sweep's seed
    assert cli.main(["plot", "a/runs/encoding=rope", "b/runs/encoding=rope,seed=0",
                     "--output=lone"]) == 0
    assert "| a/encoding=rope | 2.000 |" in (tmp_path / "lone" / "extrapolation.md").read_text()


def test_a_missing_folder_says_so_and_offers_the_nearest_run_folder(tmp_path, monkeypatch,
                                                                    one_error_line):
    _hand_trained(tmp_path / "runs", {"rope": 2.0, "alibi": 3.0})
    monkeypatch.chdir(tmp_path)
    assert cli.main(["plot", "runs/ropee"]) == 2
    assert one_error_line() == ("posjax plot: error: runs/ropee does not exist (did you "
                                       "mean runs/rope?): give a sweep or run directory")
    assert cli.main(["extrapolate", "--workdir=runs/ropee"]) == 2
    assert one_error_line() == (
        "posjax extrapolate: error: runs/ropee does not exist (did you mean runs/rope?): give "
        "the --workdir of a trained run (posjax train)")


def test_plot_and_table_name_the_unit_of_the_runs_tokenizer(tmp_path, monkeypatch):
    _hand_trained(tmp_path / "runs", {"rope": 2.0})
    figures = []
    monkeypatch.setattr(fileio, "save_figure", lambda fig, path, **kw: figures.append(fig) or path)
    report.plots.plot_sweep(tmp_path / "runs")
    assert figures[0].axes[0].get_ylabel() == "perplexity (per byte)"
    assert "Perplexity per byte" in (tmp_path / "runs" / "extrapolation.md").read_text()
    pretrained = fileio.read_json(tmp_path / "runs" / "rope" / "extrapolation.json")
    fileio.write_json(tmp_path / "runs" / "rope" / "extrapolation.json",
                  {**pretrained, "pretrained": "/snapshots/llama"})
    figures.clear()
    report.plots.plot_sweep(tmp_path / "runs")
    assert figures[0].axes[0].get_ylabel() == "perplexity (per token)"


def test_the_extrapolation_plot_title_is_centred_over_its_panels(tmp_path, monkeypatch):
    _hand_trained(tmp_path / "runs", {"rope": 2.0, "alibi": 3.0})
    figures = []
    monkeypatch.setattr(fileio, "save_figure", lambda fig, path, **kw: figures.append(fig) or path)
    report.plots.plot_sweep(tmp_path / "runs")
    figure = figures[0]
    left, right = figure.axes[0].get_position().x0, figure.axes[-1].get_position().x1
    title, = [t for t in figure.texts if t.get_text() == figure.get_suptitle()]
    assert title.get_position()[0] == pytest.approx((left + right) / 2)
    assert title.get_horizontalalignment() == "center"


def test_a_smoke_runs_plot_and_table_say_they_check_the_set_up_only(tmp_path, monkeypatch):
    """A smoke run's numbers (config train.smoke) mean nothing: its picture's title and its
    table say so, naming the smoke runs where others are not."""
    _hand_trained(tmp_path / "runs", {"rope": 2.0, "alibi": 3.0})
    titles = {}
    monkeypatch.setattr(fileio, "save_figure", lambda fig, path, **kw: titles.update(
        {Path(path).name: fig.get_suptitle()}) or path)
    table = tmp_path / "runs" / "extrapolation.md"
    report.plots.plot_sweep(tmp_path / "runs")
    assert "smoke" not in titles["extrapolation.png"] and "smoke" not in table.read_text()
    for name, note in (("rope", "smoke run (rope): "), ("alibi", "smoke run: ")):
        config = tmp_path / "runs" / name / "config.json"
        fileio.write_json(config, {**fileio.read_json(config), "train": {"smoke": True}})
        report.plots.plot_sweep(tmp_path / "runs")
        assert titles["extrapolation.png"].splitlines()[1] == (
            f"{note}checks the set-up, not a result")
        assert table.read_text().startswith(f"**{note}checks the set-up, not a result**\n")


def test_a_method_typed_over_two_lines_is_one_row_of_the_table(tmp_path):
    """A JSON --rope_scaling continued over two lines (docs/cli.md) is recorded with its
    newline; its row of the table and its label stay on one line."""
    _hand_trained(tmp_path / "runs", {"rope": 2.0})
    run = tmp_path / "runs" / "rope"
    result = fileio.read_json(run / "extrapolation.json")
    method = '{"rope_type": "yarn", "factor": 8,\n    "beta_fast": 16}'
    fileio.write_json(run / "extrapolation_yarn.json", {**result, "method": method})
    table = report.plots.results_table(report.plots.sweep_results([run]))
    row = [line for line in table.splitlines() if "yarn" in line]
    # labelled by its type and factor, with the hash of the block that names its file
    assert len(row) == 1 and row[0].startswith("| rope +yarn:8 (JSON block ")
    assert row[0].endswith(") | 2.000 | 4.000 |")


def test_one_seed_trained_twice_is_refused_not_counted_as_two(tmp_path, monkeypatch,
                                                              one_error_line):
    """runs/rope (README's two-minute start) beside runs/rope,seed=0 (a sweep's seeds) is
    one seed trained twice: plot says so in one line instead of a mean over "2 seeds"."""
    _hand_trained(tmp_path / "runs", {"rope": 2.0, "rope,seed=0": 2.0, "rope,seed=1": 2.5})
    for name, seed in (("rope", 0), ("rope,seed=0", 0), ("rope,seed=1", 1)):
        fileio.write_json(tmp_path / "runs" / name / "config.json",
                          {"data": {"tokenizer": "bytes"}, "train": {"seed": seed}})
    monkeypatch.chdir(tmp_path)
    assert cli.main(["plot", "runs"]) == 2
    assert one_error_line() == (
        "posjax plot: error: runs runs/rope and runs/rope,seed=0 are the point 'rope' trained "
        "with the "
        "same seed 0: they would count as two seeds; plot one of them")
    assert cli.main(["plot", "runs/rope,seed=0", "runs/rope,seed=1"]) == 0
    assert "over 2 seeds" in (tmp_path / "runs" / "extrapolation.md").read_text()


def test_a_study_missing_a_run_folder_is_named_by_check_and_not_reported(
        tmp_path, monkeypatch, capsys, one_error_line):
    """A run folder deleted from a study: --check named only the seed count it changed, and
    report wrote "2 per base" into the README where the other points still had 3."""
    study = _study(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["report", "experiments/toy"]) == 0
    readme = (study / "README.md").read_text()
    shutil.rmtree(study / "results" / "encoding=alibi,seed=1")
    capsys.readouterr()
    gone = ("experiments/toy/results/sweep.json lists 1 run(s) with no folder: "
            "encoding=alibi,seed=1 (restore them, e.g. with git checkout "
            "experiments/toy/results, or train them again with the study's sweep)")
    assert cli.main(["report", "experiments/toy", "--check"]) == 1
    assert capsys.readouterr().err.splitlines()[0] == gone
    assert cli.main(["report", "experiments/toy"]) == 2
    assert one_error_line() == f"posjax report: error: {gone}; nothing was written"
    assert (study / "README.md").read_text() == readme


def test_check_of_a_study_with_no_readme_and_its_fix_from_another_folder(tmp_path, monkeypatch,
                                                                        capsys, one_error_line):
    """--check of a study without a README passed, checking nothing of it; the fix of a
    stale table named a path that worked only from the study's parent folder."""
    study = _study(tmp_path / "checkout")
    (tmp_path / "checkout" / "pyproject.toml").write_text("[project]\nname = 'mine'\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["report", str(study), "--check"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        *_missing_plots(study),
        f"{study / 'README.md'}: stale table experiments/toy (run `posjax report {study}`)"]
    (study / "README.md").unlink()
    assert cli.main(["report", str(study), "--check"]) == 2
    assert one_error_line() == (
        f"posjax report: error: {study} has no README.md, which --check compares with its raw "
        f"results: write one, or draw its plots with posjax report {study}")


def test_report_of_a_folder_that_is_not_there_asks_for_a_study_or_runs(tmp_path, monkeypatch,
                                                                       one_error_line):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["report", "experiments/nope"]) == 2
    assert one_error_line() == (
        "posjax report: error: experiments/nope does not exist: give a study folder "
        "(experiments/NAME) or run folders")


def test_a_quote_in_scientific_notation_or_not_finite_is_refused_never_half_rewritten(
        tmp_path, monkeypatch, one_error_line):
    """`-->1.4054e2` was rewritten to `-->140.5425e2` (14054), and a values() NaN to
    `-->nan`, which no check read again: both passed `--check` from then on."""
    study = _study(tmp_path)
    monkeypatch.chdir(tmp_path)
    readme = study / "README.md"
    readme.write_text(readme.read_text() + "\n## Findings\n\nrope <!-- v rope:ppl@32 -->2.1e0\n")
    before = readme.read_text()
    assert report.check(readme) == [
        f"{readme}: stale table experiments/toy (run `posjax report experiments/toy`)",
        f"{readme}: rope:ppl@32 is quoted as 2.1e0: write it as a plain decimal (140.54, not "
        "1.4054e2), the digits it shows"]
    assert cli.main(["report", "experiments/toy"]) == 2
    assert "write it as a plain decimal" in one_error_line()
    assert readme.read_text() == before
    readme.write_text(before.replace("2.1e0", "nan"))
    assert report.check(readme)[1:] == [f"{readme}: rope:ppl@32 is quoted as nan, its raw files "
                                        "give 2"]

    (study / "values.py").write_text("def values(study):\n    return {'gain': float('nan'), "
                                     "'word': '3.4', 'none': None}\n")
    readme.write_text("## Findings\n\n<!-- v gain -->1.0, <!-- v word -->1.0, <!-- v none -->1\n")
    assert report.check(readme) == [
        f"{readme}: gain is nan in its study's values, not a finite number: fix the raw result "
        "or values() that gives it",
        f"{readme}: word is '3.4' (str) in its study's values, not a number: make values() give "
        "a float",
        f"{readme}: none is None (NoneType) in its study's values, not a number: make values() "
        "give a float"]
    assert cli.main(["report", "experiments/toy"]) == 2
    assert readme.read_text().startswith("## Findings\n\n<!-- v gain -->1.0")


def test_a_values_py_table_that_is_no_text_is_one_line(tmp_path, monkeypatch, one_error_line):
    bench = tmp_path / "experiments" / "bench"
    bench.mkdir(parents=True)
    (bench / "values.py").write_text("def values(study):\n    return {'x': 1.0}\n"
                                     "def tables(study):\n    return {'table': 3}\n")
    (bench / "README.md").write_text("<!-- posjax:table experiments/bench#table -->\n"
                                     "<!-- /posjax:table -->\n\n## Findings\n\nNone.\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["report", "experiments/bench", "--check"]) == 2
    assert one_error_line() == (
        "posjax report: error: experiments/bench/values.py: tables() gives 'table' as int, not "
        "Markdown text: make it a str")


def test_a_failed_run_is_no_part_of_a_studys_numbers_and_its_quote_says_it_failed(
        tmp_path, monkeypatch):
    """A sweep's failed runs (which keep a config.json) counted in setup:runs and wall_s, and
    a quote of a failed point said "did you mean" another point, as if it were a typo."""
    lm = load_config_module(str(ROOT / "configs" / "lm.py"))
    study = _study(tmp_path)
    index = fileio.read_json(study / "results" / "sweep.json")
    index["runs"]["encoding=kerple_log,seed=0"] = {"status": "failed", "error": "boom"}
    for name in index["runs"]:
        encoding, seed = (part.split("=")[1] for part in name.split(","))
        config = lm.get_config(f"smoke,encoding={encoding}")
        config.train.seed = int(seed)
        fileio.write_json(study / "results" / name / "config.json", config_json(config))
        index["runs"][name]["seconds"] = 1.0 if encoding == "kerple_log" else 10.0
    fileio.write_json(study / "results" / "sweep.json", index)
    got = values.study_values(study)
    assert (got["setup:runs"], got["setup:points"], got["setup:wall_s"]) == (4, 2, 10.0)
    readme = study / "README.md"
    readme.write_text("## Findings\n\n<!-- v kerple_log:ppl@32 -->2.0 <!-- v rope:pl@32 -->2.0\n")
    monkeypatch.chdir(tmp_path)
    near = report.check(readme)
    assert near[0] == (f"{readme}: no number 'kerple_log:ppl@32' in {study}: kerple_log "
                       "failed in its sweep (results/sweep.json keeps its error)")
    assert "did you mean rope:ppl@32" in near[1]  # a typo of a point that ran is still one


def test_a_table_marker_naming_its_study_by_another_path_names_the_checkout_root(
        tmp_path, monkeypatch, one_error_line):
    """`<!-- posjax:table toy -->` in experiments/toy, inside a checkout: "toy/results does
    not exist: give a sweep or run directory", with no word of where markers name from."""
    study = _study(tmp_path)
    (tmp_path / ".git").mkdir()
    (study / "README.md").write_text("# toy\n\n<!-- posjax:table toy -->\n| old |\n"
                                     "<!-- /posjax:table -->\n\nFindings.\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["report", "experiments/toy"]) == 2
    assert one_error_line() == (
        "posjax report: error: a marker <!-- posjax:table toy --> names toy, which does not "
        "exist: a marker names its study by its path from the checkout's root "
        f"({tmp_path.resolve()})")


def test_a_quote_of_a_study_that_is_not_there_names_the_page(tmp_path, monkeypatch):
    study = _study(tmp_path)
    readme = study / "README.md"
    readme.write_text("## Findings\n\n<!-- v experiments/nosuch|rope:ppl@32 -->2.0\n")
    monkeypatch.chdir(tmp_path)
    assert report.check(readme) == [
        f"{readme}: experiments/nosuch|rope:ppl@32 names the study experiments/nosuch, which "
        f"is not there ({Path('experiments/nosuch')}): fix the key's study"]


def test_collect_results_stopped_part_way_says_so_and_leaves_no_partial_file(tmp_path):
    """SIGTERM left `.extrapolation.png.XXXX.tmp` in the study (committed by `git add -A`),
    and Ctrl-C a traceback: now one line, exit 130, every file whole or absent."""
    sweep = tmp_path / "sweep"
    run = sweep / "runs" / "encoding=rope"
    run.mkdir(parents=True)
    fileio.write_json(sweep / "sweep.json", {"runs": {"encoding=rope": {"status": "done"}}})
    fifo = run / "config.json"
    os.mkfifo(fifo)  # collect blocks reading it: stopped there, mid-collection
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "collect_results.py"),
                             str(sweep), str(tmp_path / "study")], stderr=subprocess.PIPE,
                            text=True)
    opened = threading.Event()

    def writer():
        with open(fifo, "w"):  # returns once collect has opened the pipe to read it
            opened.set()
            proc.wait()
    threading.Thread(target=writer, daemon=True).start()
    assert opened.wait(60)
    # The kernel may hand a process's signal to a thread other than the main one, whose read
    # of the pipe it then does not interrupt (a CI run hung so): the signal is sent again, as
    # a scheduler or a second Ctrl-C does, until the process ends; later ones are ignored.
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(1)
    err = proc.stderr.read()
    assert proc.wait() == 128 + signal.SIGTERM
    assert err.splitlines() == [
        "collect_results.py: interrupted: re-run the same command to collect again"]
    left = [p.name for p in (tmp_path / "study").rglob("*") if p.is_file()]
    assert left == []


def _collect(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "collect_results.py"),
                           *map(str, args)], capture_output=True, text=True)


def test_collect_results_keeps_a_folder_it_did_not_write_and_refuses_what_is_no_sweep(
        tmp_path):
    """It removed every folder of DEST/results the sweep did not list (a user's notes
    too, and a user's own config.json), and a wrong SWEEPDIR or DEST was a traceback after
    results/ was made."""
    sweep = tmp_path / "sweep"
    run = sweep / "runs" / "encoding=rope"
    run.mkdir(parents=True)
    fileio.write_json(sweep / "sweep.json", {"runs": {"encoding=rope": {"status": "done"}}})
    fileio.write_json(run / "config.json", {})
    # an evaluation registered from the user's own code: its result was left behind, and
    # `posjax report` then removed the pictures plot had drawn of it
    fileio.write_json(run / "repetition_repetition.json", {"evaluation": "repetition"})
    (run / "checkpoints" / "1").mkdir(parents=True)
    study = tmp_path / "study"
    results = study / "results"
    notes, earlier, own = results / "my_notes", results / "encoding=alibi", results / "mine"
    for folder in (notes, earlier, own):
        folder.mkdir(parents=True)
    (notes / "notes.txt").write_text("mine")
    (earlier / "config.json").write_text("{}")  # an earlier collection's run: removed
    (own / "config.json").write_text("{}")  # named as the script's files, never collected
    fileio.write_json(results / "sweep.json", {"runs": {"encoding=alibi": {}, "my_notes": {}}})
    done = _collect(sweep, study)
    assert f"collect_results.py: kept {notes}, which the sweep does not list: it holds " \
           "notes.txt, which this script does not copy" in done.stderr.splitlines()
    assert f"collect_results.py: kept {own}, which the sweep does not list: no earlier " \
           "collection wrote it" in done.stderr.splitlines()
    assert (notes / "notes.txt").read_text() == "mine" and not earlier.exists()
    assert (own / "config.json").read_text() == "{}"
    assert sorted(p.name for p in (study / "results" / "encoding=rope").iterdir()) == [
        "config.json", "repetition_repetition.json"]
    (tmp_path / "file").write_text("")
    (tmp_path / "odd" / "results").mkdir(parents=True)
    (tmp_path / "odd" / "results" / "encoding=rope").write_text("")  # a file where a run goes
    for args, line in [
        ((run, tmp_path / "new"), f"{run} is no sweep (no sweep.json and runs/): give the "
                                  "--workdir of a posjax sweep"),
        ((tmp_path / "nowhere", tmp_path / "new"), f"{tmp_path / 'nowhere'} does not exist"),
        ((sweep, tmp_path / "file"), f"{tmp_path / 'file'} is a file, not a folder: move it, "
                                     "or give another DEST"),
        ((sweep, tmp_path / "odd"), f"{tmp_path / 'odd' / 'results' / 'encoding=rope'} is a "
                                    "file, not a folder: move it, or give another DEST")]:
        done = _collect(*args)
        assert done.returncode == 2
        assert done.stderr.startswith(f"collect_results.py: error: {line}"), done.stderr
        assert len(done.stderr.splitlines()) == 1, done.stderr
    assert not (tmp_path / "new").exists()


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
def test_collect_results_stopped_while_importing_names_itself_in_one_line(
        tmp_path, catches_signal):
    """Stopped during its imports it said "posjax collect_results.py: ...", where its other
    lines start "collect_results.py:"."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "collect_results.py"),
                             str(tmp_path / "sweep"), str(tmp_path / "study")],
                            stderr=subprocess.PIPE, text=True)
    try:
        while not catches_signal(proc.pid, signal.SIGTERM):  # stop_while_starting ran
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.002)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    assert err.splitlines() == [
        "collect_results.py: interrupted while starting, before any work: re-run the command"]


@pytest.mark.parametrize("text", ["{}", "[]", "null", '{"lengths": "abc"}',
                                  # a table of no rows, rc 0
                                  '{"evaluation": "text", "train_len": 32, "protocol": '
                                  '"nonoverlapping", "lengths": []}'])
def test_a_result_edited_into_another_shape_is_one_line_naming_it(tmp_path, monkeypatch,
                                                                  one_error_line, text):
    """Each was a traceback ending in KeyError: 'protocol', TypeError or AttributeError."""
    study = _study(tmp_path)
    (study / "results" / "encoding=rope,seed=1" / "extrapolation.json").write_text(text)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["plot", "experiments/toy/results", "--output=out"]) == 2
    assert one_error_line() == (
        "posjax plot: error: experiments/toy/results/encoding=rope,seed=1/extrapolation.json is "
        "not a result posjax wrote (it holds evaluation, train_len, protocol, lengths, the last "
        "a list of rows by length, of numbers): restore it from a copy (git checkout, a "
        "backup), or delete it and re-run the command that wrote it")


def test_a_plot_stopped_part_way_leaves_the_folder_as_the_last_whole_plot(tmp_path,
                                                                           monkeypatch):
    """A plot stopped after its first pictures left them new beside the older plot's others
    (and its record of them), each whole but the folder of two plots."""
    study = _study(tmp_path)
    out = tmp_path / "out"
    report.plots.plot_sweep(study / "results", output=out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (study / "results" / "encoding=alibi,seed=1" / "extrapolation.json").unlink()

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(report.plots, "plot_position_loss", stopped)
    with pytest.raises(KeyboardInterrupt):
        report.plots.plot_sweep(study / "results", output=out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing staged left


def test_a_report_stopped_once_its_plots_are_drawn_writes_its_pages_too(tmp_path,
                                                                        monkeypatch, capsys):
    """Ctrl-C after the plots were drawn left the README's table and quotes stale beside the
    new plots ("nothing written unless every page regenerates" broken)."""
    study = _study(tmp_path)
    monkeypatch.chdir(tmp_path)
    draw = report.plots.plot_sweep

    def drawn_then_stopped(*args, **kwargs):
        paths = draw(*args, **kwargs)
        signal.raise_signal(signal.SIGINT)  # before the README is written
        return paths

    monkeypatch.setattr(report.plots, "plot_sweep", drawn_then_stopped)
    assert cli.main(["report", "experiments/toy"]) == 130
    assert capsys.readouterr().err.strip() == (
        "posjax report: interrupted after every plot and page of experiments/toy was written")
    assert "| rope | 2.100 [2.000, 2.200] |" in (study / "README.md").read_text()
    monkeypatch.setattr(report.plots, "plot_sweep", draw)
    assert report.check(study / "README.md") == [] and report.stale_plots(study) == []


def test_check_with_output_is_refused_not_ignored(capsys):
    """`report experiments/theta --check --output=DIR` ignored --output, rc 0."""
    assert cli.main(["report", str(ROOT / "experiments" / "theta"), "--check",
                     "--output=elsewhere"]) == 2
    assert capsys.readouterr().err.strip() == (
        "posjax report: error: --output is not read with --check, which writes nothing: "
        "drop it")


def test_a_study_named_from_another_folder_points_to_the_checkouts(tmp_path, monkeypatch,
                                                                  capsys):
    """`posjax report experiments/theta --check` from outside the checkout said only that
    it does not exist, where `posjax list studies` knows where it is."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["report", "experiments/theta", "--check"]) == 2
    assert capsys.readouterr().err.strip() == (
        "posjax report: error: experiments/theta does not exist here (did you mean "
        f"{ROOT / 'experiments' / 'theta'}, the study in posjax's checkout?): give its path")


def test_a_copy_of_a_study_that_quotes_only_its_sub_studies_finds_its_root(tmp_path):
    """A copy of experiments/retrieval outside any checkout was refused: its markers name
    only experiments/retrieval/passkey and /flipflop, not the end of its own path."""
    study = tmp_path / "copy" / "experiments" / "retrieval"
    (study / "passkey").mkdir(parents=True)
    (study / "README.md").write_text("## Findings\n\n<!-- v experiments/retrieval/passkey|"
                                     "passkey:rope:acc@256 -->0.99\n")
    assert report.checkout_root(study) == tmp_path / "copy"


def test_a_bucket_cut_short_by_the_length_is_drawn_at_its_centre(tmp_path, monkeypatch):
    """A window of 100 tokens in buckets of 128 drew positions 0-99 at 64, not 49.5."""
    import matplotlib.axes

    _hand_trained(tmp_path / "runs", {"rope": 2.0})
    result = tmp_path / "runs" / "rope" / "extrapolation.json"
    fileio.write_json(result, {**fileio.read_json(result), "lengths": [
        {"length": 100, "ppl": 2.0, "loss": 0.7, "bucket_size": 128, "bucket_loss": [0.7]},
        {"length": 300, "ppl": 2.0, "loss": 0.7, "bucket_size": 128,
         "bucket_loss": [0.6, 0.7, 0.8]}]})
    drawn = []
    plot = matplotlib.axes.Axes.plot
    monkeypatch.setattr(matplotlib.axes.Axes, "plot",
                        lambda self, *a, **k: drawn.append(list(a[0])) or plot(self, *a, **k))
    report.plots.plot_position_loss(report.plots.load_results(tmp_path / "runs"),
                                    tmp_path / "position_loss.png")
    assert drawn[0] == [64.0, 192.0, 278.0]  # the last bucket holds positions 256-299
