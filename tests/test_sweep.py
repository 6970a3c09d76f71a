"""End-to-end sweeps and extrapolation: `posjax sweep` (resumable, failures isolated),
`posjax extrapolate` (learned tables, rotary length extension) and `posjax plot`.

One sweep serves most tests: configs/lm.py's smoke study (rope, alibi) plus a run that cannot
be built (alibi with linear attention), first with --only on the rope run, then whole. Every
run reads a small slice of the stdlib corpus built once per session (conftest.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posjax import cli, io
from posjax.errors import ConfigError
from posjax.eval import evaluate
from posjax.train.steps import eval_token_losses

pytestmark = pytest.mark.slow

LM = str(Path(__file__).resolve().parents[1] / "configs" / "lm.py")
BASE = "smoke,seq_len=32,steps=4,eval_max_factor=2"  # evaluated at 32 and 64 tokens
RUNS = ("encoding=rope", "encoding=alibi", "encoding=alibi,attention=linear")


SWEEP_CONFIG = f'''
"""lm.py's smoke study plus a run that fails at train time."""
from posjax.sweep import load_config_module

_lm = load_config_module({LM!r})
get_config = _lm.get_config


def sweep(add, arg=""):
    _lm.sweep(add, arg)
    add(encoding="alibi", attention="linear")  # linear attention forms no score matrix
'''


@pytest.fixture(scope="module")
def swept(tmp_path_factory, data_flags):
    """(sweep dir, the rope run's metrics.jsonl mtime after its own sweep, exit codes)."""
    root = tmp_path_factory.mktemp("sweep")
    config = root / "sweep_config.py"
    config.write_text(SWEEP_CONFIG)
    sweepdir = root / "out"
    argv = ["sweep", f"--config={config}:{BASE},study=smoke", f"--workdir={sweepdir}",
            *data_flags]
    first = cli.main([*argv, "--only=encoding=rope"])
    mtime = (sweepdir / "runs" / "encoding=rope" / "metrics.jsonl").stat().st_mtime_ns
    index = io.read_json(sweepdir / "sweep.json")
    assert set(index["runs"]) == {"encoding=rope"}
    assert index["runs"]["encoding=rope"]["status"] == "done"
    whole = cli.main([*argv, "--parallel=2"])
    return sweepdir, mtime, (first, whole)


def test_sweep_runs_every_run_and_records_its_status(swept):
    sweepdir, _, (first, whole) = swept
    runs = io.read_json(sweepdir / "sweep.json")["runs"]
    assert set(runs) == set(RUNS)
    assert runs["encoding=rope"]["status"] == "done"
    assert runs["encoding=alibi"]["status"] == "done"
    assert runs["encoding=alibi"]["arg"] == f"{BASE},study=smoke,encoding=alibi"
    assert set(runs["encoding=alibi"]["summary"]["ppl"]) == {"32", "64"}
    assert first == 0 and whole == 1  # the sweep reports its failed run


def test_a_failed_run_records_its_error_and_does_not_stop_the_others(swept):
    sweepdir, _, _ = swept
    failed = io.read_json(sweepdir / "sweep.json")["runs"]["encoding=alibi,attention=linear"]
    assert failed["status"] == "failed"
    assert failed["error"].startswith("posjax train: error:")
    assert "alibi" in failed["error"] and "linear" in failed["error"]
    assert not (sweepdir / "runs" / "encoding=alibi,attention=linear" / "checkpoints").exists()


def test_a_resumed_sweep_does_not_redo_finished_runs(swept):
    sweepdir, mtime, _ = swept
    metrics = sweepdir / "runs" / "encoding=rope" / "metrics.jsonl"
    assert metrics.stat().st_mtime_ns == mtime
    log = (sweepdir / "runs" / "encoding=rope" / "log.txt").read_text()
    assert log.count("$ posjax train") == 1


def test_each_run_has_an_extrapolation_result_per_length(swept):
    sweepdir, _, _ = swept
    for name in RUNS[:2]:
        result = io.read_json(sweepdir / "runs" / name / "extrapolation.json")
        assert result["train_len"] == 32 and result["method"] == "none"
        rows = result["lengths"]
        assert [r["length"] for r in rows] == [32, 64]
        for row in rows:
            assert {"loss", "ppl", "acc", "bucket_loss"} <= set(row)
            assert row["ppl"] == pytest.approx(2.718281828 ** row["loss"], rel=1e-6)
            assert len(row["bucket_loss"]) == row["length"] // 32
            assert all(v is not None and v > 0 for v in row["bucket_loss"])


def test_plot_writes_the_picture_and_the_table(swept, capsys):
    sweepdir, _, _ = swept
    assert cli.main(["plot", str(sweepdir)]) == 0
    printed = capsys.readouterr().out.split()
    assert str(sweepdir / "extrapolation.png") in printed
    png = (sweepdir / "extrapolation.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    table = (sweepdir / "extrapolation.md").read_text()
    assert "| run | 32 | 64 |" in table
    assert "| rope |" in table and "| alibi |" in table


def test_print_commands_prints_one_command_per_run(tmp_path, capsys):
    sweepdir = tmp_path / "sweep"
    assert cli.main(["sweep", f"--config={LM}:smoke,study=main", f"--workdir={sweepdir}",
                     "--print_commands", "--config.train.seed=3"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 7  # lm.py's MAIN_ENCODINGS
    for line in lines:
        train, evaluate = line.split(" && ")
        assert train.startswith("posjax train --config=") and "--config.train.seed=3" in train
        assert evaluate.startswith("posjax extrapolate --workdir=")
    assert not sweepdir.exists()


@pytest.mark.parametrize(("extra", "message"), [
    (["--config=" + LM + ":smoke,study=smoke,seq_lne=3"], "did you mean 'seq_len'"),
    (["--config=" + LM + ":smoke,study=smoke", "--config.model.d_modle=3"],
     "did you mean 'd_model'"),
    (["--config=" + LM + ":smoke,study=smoke", "--only=encoding=nope"], "matches no run"),
])
def test_a_bad_sweep_fails_before_any_run(tmp_path, capsys, extra, message):
    sweepdir = tmp_path / "sweep"
    assert cli.main(["sweep", *extra, f"--workdir={sweepdir}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
    assert not sweepdir.exists()


# --- extrapolation options --------------------------------------------------------------


@pytest.fixture(scope="module")
def learned_run(tmp_path_factory, data_flags) -> Path:
    workdir = tmp_path_factory.mktemp("learned") / "run"
    assert cli.main(["train", f"--config={LM}:{BASE},encoding=learned", f"--workdir={workdir}",
                     "--noprogress", *data_flags]) == 0
    return workdir


def test_learned_table_beyond_its_length_is_an_error_row_without_an_extension(learned_run):
    result = evaluate(learned_run, learned_extension="")
    short, long = result["lengths"]
    assert short["length"] == 32 and "ppl" in short
    assert long["length"] == 64 and "ppl" not in long
    assert "defines 32 positions but evaluation needs 64" in long["error"]
    assert "learned_extension=hierarchical" in long["error"]


def test_learned_table_evaluates_beyond_its_length_with_hierarchical(learned_run, capsys):
    assert cli.main(["extrapolate", f"--workdir={learned_run}",
                     "--learned_extension=hierarchical"]) == 0
    result = io.read_json(learned_run / "extrapolation.json")
    assert [r["length"] for r in result["lengths"]] == [32, 64]
    assert all("ppl" in r for r in result["lengths"])
    assert result["learned_extension"] == "hierarchical"
    assert "| 64 |" in capsys.readouterr().out


def test_rope_scaling_on_a_non_rotary_run_is_a_config_error(swept, capsys):
    sweepdir, _, _ = swept
    alibi = sweepdir / "runs" / "encoding=alibi"
    with pytest.raises(ConfigError, match="applies to rotary encodings.*'alibi'"):
        evaluate(alibi, rope_scaling="ntk")
    assert cli.main(["extrapolate", f"--workdir={alibi}", "--rope_scaling=yarn"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not list(alibi.glob("extrapolation_*.json"))


def test_unknown_rope_scaling_method_is_a_config_error(swept):
    sweepdir, _, _ = swept
    with pytest.raises(ConfigError, match="unknown length-extension method 'ntx'.*'ntk'"):
        evaluate(sweepdir / "runs" / "encoding=rope", rope_scaling="ntx")


@pytest.mark.parametrize(("method", "name"), [("ntk", "extrapolation_ntk.json"),
                                              ("rerope:8", "extrapolation_rerope-8.json")])
def test_rope_scaling_methods_write_their_own_result(swept, method, name):
    sweepdir, _, _ = swept
    rope = sweepdir / "runs" / "encoding=rope"
    plain = (rope / "extrapolation.json").read_text()
    evaluate(rope, rope_scaling=method)
    result = json.loads((rope / name).read_text())
    assert result["method"] == method
    assert [r["length"] for r in result["lengths"]] == [32, 64]
    assert all("ppl" in r for r in result["lengths"])
    assert (rope / "extrapolation.json").read_text() == plain


# --- grouped evaluation lengths ---------------------------------------------------------

# Trained at 32: with group_factor 4 the rungs are 32 and 128, so 8, 16, 32 share rows of 32
# and 64, 128 rows of 128 (two compiled shapes instead of five).
GROUP_LENGTHS = (8, 16, 32, 64, 128)
GROUPED = {8: 32, 16: 32, 32: 32, 64: 128, 128: 128}


@pytest.mark.parametrize(("run", "method", "row_len", "programs"), [
    ("encoding=rope", "", GROUPED, 2),
    ("encoding=rope", "dynamic:4", GROUPED, 2),  # reads max(position) + 1 = L, not R
    ("learned", "", GROUPED, 2),  # a learned table, hierarchical past 32 (a second encoding)
    # ntk's factor is L / 32 past 32: 64 and 128 compile their own programs anyway, unpacked.
    ("encoding=rope", "ntk", {8: 32, 16: 32, 32: 32, 64: 64, 128: 128}, 3),
])
def test_grouped_lengths_score_the_same_with_fewer_programs(swept, learned_run, tmp_path,
                                                            run, method, row_len, programs):
    workdir = learned_run if run == "learned" else swept[0] / "runs" / run
    results, compiled = {}, {}
    for factor in (1, 4):
        eval_token_losses.clear_cache()
        results[factor] = evaluate(
            workdir, lengths=GROUP_LENGTHS, rope_scaling=method, group_factor=factor,
            output=tmp_path / f"group{factor}.json")
        compiled[factor] = eval_token_losses._cache_size()
    assert compiled == {1: len(GROUP_LENGTHS), 4: programs}
    alone, grouped = results[1]["lengths"], results[4]["lengths"]
    assert {r["length"]: r["row_len"] for r in alone} == {n: n for n in GROUP_LENGTHS}
    assert {r["length"]: r["row_len"] for r in grouped} == row_len
    for a, g in zip(alone, grouped, strict=True):
        assert g["length"] == a["length"] and g["tokens"] == a["tokens"]
        for key in ("loss", "ppl"):
            assert g[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6)
        assert g["bucket_loss"] == pytest.approx(a["bucket_loss"], rel=1e-5, abs=1e-6)
        # Float rounding may flip an argmax between near-equal logits: one token at most.
        assert g["acc"] == pytest.approx(a["acc"], abs=1.0 / a["tokens"])
