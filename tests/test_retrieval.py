"""Retrieval tasks (posjax.data.retrieval) and their evaluation (posjax.eval.retrieval).

Generators: the key is where the depth says, the answer is determined by the input, the
distractors differ from it only in the answer, and a seed reproduces a trial. Scoring: a
model that copies the key scores 1, a uniform one scores chance. End to end: a smoke LM run
and a smoke run trained on passkey evaluated from the command line, with the JSON per
(length, depth) cell, its heatmap and `posjax plot`.
"""

from __future__ import annotations

import contextlib
import io as io_module
import json
import math
import os
import re
import shutil
import signal
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posjax import config as configlib
from posjax import data, fileio
from posjax.data import retrieval
from posjax.errors import ConfigError
from posjax.eval import EVALUATIONS
from posjax.eval import retrieval as scoring
from posjax.experiment import Experiment
from posjax.launch import cli
from posjax.results import heatmap, plots

ROOT = Path(__file__).resolve().parents[1]
CFG = data.default_data_config("retrieval")
BYTES = data.get_tokenizer(CFG)
HAYSTACK = BYTES.encode("def f(x):\n    return x + 1\n" * 40)


def _trial(name: str, seed: int, length: int, depth: float, **fields) -> retrieval.Trial:
    cfg = CFG.copy_and_resolve_references()
    cfg.update(fields)
    return retrieval.get_probe(name, cfg).trial(np.random.default_rng(seed), length, depth,
                                                BYTES, HAYSTACK)


def _text(tokens) -> str:
    return BYTES.decode(tokens)


def _check_common(trial: retrieval.Trial, length: int, candidates: int) -> None:
    assert trial.tokens.shape == (length,) and trial.tokens[0] == BYTES.bos_id
    assert trial.candidates.shape == (candidates, length)
    np.testing.assert_array_equal(trial.candidates[0], trial.tokens)
    for row in trial.candidates[1:]:  # only the answer differs, and it does differ
        np.testing.assert_array_equal(row[~trial.answer], trial.tokens[~trial.answer])
        assert not np.array_equal(row[trial.answer], trial.tokens[trial.answer])


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31), length=st.integers(110, 3000), depth=st.floats(0, 1),
       intro=st.booleans())
def test_passkey_key_sits_at_the_depth_and_is_the_answer(seed, length, depth, intro):
    if intro and length < 260:
        length += 150
    trial = _trial("passkey", seed, length, depth, passkey_intro=intro)
    _check_common(trial, length, 5)
    text = _text(trial.tokens)
    key = re.search(r"The pass key is (\d{5})\. Remember it\. \1 is the pass key\.", text)
    assert key and _text(trial.tokens[trial.answer]) == " " + key.group(1)
    assert text.endswith(f"What is the pass key? The pass key is {key.group(1)}")
    intro_len = len(retrieval.Passkey.INTRO) if intro else 0
    assert text.startswith(retrieval.Passkey.INTRO) == intro
    assert _text(trial.tokens[trial.key_start:]).startswith("\nThe pass key is")
    # depth counts the filler: round(depth * F) filler tokens before the key, F after intro
    needle = len(f"\nThe pass key is {key.group(1)}. Remember it. {key.group(1)} is the "
                 "pass key.\n")
    filler = length - 1 - intro_len - needle - len(retrieval.Passkey.QUESTION) - 6
    assert trial.key_start == 1 + intro_len + round(depth * filler)
    for row in trial.candidates[1:]:
        assert re.fullmatch(r" \d{5}", _text(row[trial.answer]))


def test_trials_reproduce_from_their_seed_and_differ_across_seeds():
    for name in retrieval.PROBES:
        a, b = _trial(name, 7, 300, 0.4), _trial(name, 7, 300, 0.4)
        np.testing.assert_array_equal(a.candidates, b.candidates)
        assert not np.array_equal(a.tokens, _trial(name, 8, 300, 0.4).tokens)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31), length=st.integers(240, 2000), depth=st.floats(0, 1))
def test_needle_is_in_the_haystack_at_the_depth(seed, length, depth):
    trial = _trial("needle", seed, length, depth)
    _check_common(trial, length, 5)
    text = _text(trial.tokens)
    needle = re.search(r"One of the special magic numbers for (\w+) is: (\d{7})\.", text)
    assert needle and _text(trial.tokens[trial.answer]) == " " + needle.group(2)
    assert f"What is the special magic number for {needle.group(1)} mentioned" in text
    assert _text(trial.tokens[trial.key_start:]).startswith(" One of the special")
    filler = length - 1 - len(needle.group(0)) - 2 - (len(text) - text.index("\nWhat"))
    assert trial.key_start == 1 + round(depth * filler)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31), length=st.integers(49, 3000), depth=st.floats(0, 1))
def test_mqar_answers_are_the_values_of_the_keys_asked_at_the_depth(seed, length, depth):
    trial = _trial("mqar", seed, length, depth)
    _check_common(trial, length, 5)
    text = _text(trial.tokens)
    pairs = re.findall(r"([a-z]{3}):(\d) ", text + " ")
    queries = int(CFG.mqar_queries)
    context, asked = dict(pairs[:-queries]), pairs[-queries:]
    assert len(context) == len(pairs) - queries  # keys are distinct
    assert all(context[k] == v for k, v in asked)
    assert _text(trial.tokens[trial.answer]) == "".join(v for _, v in asked)
    # the pairs asked are the block at the depth of the context
    first = round(depth * (len(context) - queries))
    assert {k for k, _ in asked} == {k for k, _ in pairs[first:first + queries]}
    assert _text(trial.tokens[trial.key_start:]).startswith(pairs[first][0] + ":")


def _last_writes(text: str) -> tuple[list[int], list[int]]:
    """(index of the last write, read bits expected) over the instructions of a flip-flop
    string: each read must give the last written bit."""
    ops = re.findall(r"([wir])([01])", text)
    last, last_write, reads = None, None, []
    for index, (op, bit) in enumerate(ops):
        if op == "w":
            last, last_write = bit, index
        elif op == "r":
            assert bit == last, "a read gives the last written bit"
            reads.append((index, bit))
    return last_write, reads


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31), length=st.integers(5, 3000), depth=st.floats(0, 1))
def test_flipflop_reads_give_the_last_write_which_sits_at_the_depth(seed, length, depth):
    trial = _trial("flipflop", seed, length, depth)
    _check_common(trial, length, 2)
    text = _text(trial.tokens).lstrip(" ")
    last_write, reads = _last_writes(text)
    pairs = len(text) // 2
    assert text[0] == "w" and text[-2] == "r"
    assert last_write == round(depth * (pairs - 2))
    scored = [bit for index, bit in reads if index > last_write]
    assert _text(trial.tokens[trial.answer]) == "".join(scored) and scored
    assert trial.key_start == 1 + (length - 1 - 2 * pairs) + 2 * last_write


def test_too_short_and_character_tasks_are_one_line():
    with pytest.raises(ConfigError, match="passkey needs at least .* tokens per trial.*to "
                       "train: train_min=N in configs/retrieval.py's arg, or "
                       "--config.data.train_lengths=MIN,MAX; to evaluate: --lengths"):
        _trial("passkey", 0, 60, 0.5)
    symbols = data.get_tokenizer(data.default_data_config("algorithmic"))
    probe = retrieval.get_probe("mqar", CFG)
    with pytest.raises(ConfigError, match="mqar is a character task: .* score passkey or "
                                          "needle instead"):
        probe.trial(np.random.default_rng(0), 100, 0.5, symbols)
    with pytest.raises(ConfigError, match="passkey is written in text, which this run's "):
        retrieval.get_probe("passkey", CFG).check_tokenizer(symbols)
    with pytest.raises(ConfigError, match="run's own text"):
        retrieval.get_probe("needle", CFG).trial(np.random.default_rng(0), 300, 0.5, BYTES)


# --- scoring -----------------------------------------------------------------------------


def _copier(trials):
    """A model that copies the key: at each answer target it predicts the true answer read
    from the context (here: the true row of the trial whose context the row holds)."""
    truth = {t.tokens[~t.answer].tobytes(): t.tokens for t in trials}

    def losses(batch):
        loss = np.full(batch["targets"].shape, 9.0)
        correct = np.zeros(batch["targets"].shape, bool)
        for i, (inputs, weights) in enumerate(zip(batch["inputs"], batch["weights"],
                                                  strict=True)):
            if not weights.any():
                continue
            full = np.append(inputs[:-1], batch["targets"][i][-2])
            answer = np.append(False, weights[:-1] > 0)
            tokens = truth[full[~answer].tobytes()]
            right = np.append(tokens[1:], 0) == batch["targets"][i]
            loss[i] = np.where(right, 0.0, 9.0)
            correct[i] = right
        return loss, correct

    return losses


def _uniform(batch):
    shape = batch["targets"].shape
    return np.full(shape, math.log(260.0), np.float32), np.zeros(shape, bool)


@pytest.mark.parametrize("name", sorted(retrieval.PROBES))
def test_a_copying_model_scores_one_and_a_uniform_one_chance(name):
    trials = [_trial(name, seed, 400, 0.5) for seed in range(6)]
    copied = scoring.score_trials(trials, _copier(trials), batch_size=4)
    assert copied["acc"] == copied["exact"] == copied["token_acc"] == 1.0
    uniform = scoring.score_trials(trials, _uniform, batch_size=3)
    candidates = len(trials[0].candidates)
    assert uniform["acc"] == pytest.approx(1 / candidates) == uniform["chance"]
    assert uniform["exact"] == 0.0 and uniform["trials"] == 6


def test_choice_scores_split_ties():
    loglik = np.array([[0.0, -1.0, -2.0], [-1.0, 0.0, -1.0], [0.0, 0.0, -3.0],
                       [1.0, 1.0, 1.0]])
    np.testing.assert_allclose(scoring.choice_scores(loglik), [1.0, 0.0, 0.5, 1 / 3])


def test_every_task_is_an_evaluation():
    assert set(retrieval.PROBES) <= set(EVALUATIONS)
    assert all(EVALUATIONS[name].options == ("lengths", "depths", "trials", "batch_size")
               for name in retrieval.PROBES)


# --- end to end -------------------------------------------------------------------------


def _train(argv: list[str]) -> None:
    assert cli.main(["train", *argv]) == 0


def _main(argv: list[str]) -> str:
    """posjax ARGV in this process, exit 0; its stdout."""
    out = io_module.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(argv) == 0
    return out.getvalue()


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory, data_flags) -> tuple[Path, dict[str, str]]:
    """A smoke causal LM on the stdlib corpus, trained at 64 tokens and evaluated on passkey,
    flipflop with YaRN and mqar (in one sweep folder, as `posjax sweep` leaves it); the run
    and what each evaluation printed."""
    sweepdir = tmp_path_factory.mktemp("retrieval")
    run = sweepdir / "runs" / "encoding=rope"
    _train([f"--config={ROOT / 'configs/lm.py'}:smoke,encoding=rope,seq_len=64",
            f"--workdir={run}", *data_flags])
    fileio.write_json(sweepdir / "sweep.json", {"runs": [run.name, "encoding=none"]})
    (sweepdir / "runs" / "encoding=none").mkdir()  # a run without results
    printed = {
        "passkey": _main(["extrapolate", f"--workdir={run}", "--eval=passkey",
                          "--lengths=128,256,512", "--depths=0,0.5,1", "--trials=2"]),
        # every length-extension method works with every evaluation: its own file
        "flipflop": _main(["extrapolate", f"--workdir={run}", "--eval=flipflop",
                           "--lengths=64,256", "--trials=2", "--rope_scaling=yarn"]),
        "mqar": _main(["extrapolate", f"--workdir={run}", "--eval=mqar", "--lengths=64,128",
                       "--trials=2", "--depths=0,1", "--batch_size=3"]),
        "needle": _main(["extrapolate", f"--workdir={run}", "--eval=needle", "--lengths=256",
                         "--trials=1", "--depths=0.5"]),
    }
    return run, printed


def test_extrapolate_eval_passkey_writes_cells_and_a_heatmap(lm_run):
    run, printed = lm_run
    result = fileio.read_json(run / "retrieval_passkey.json")
    assert (run / "retrieval_passkey.png").stat().st_size > 10_000
    assert result["evaluation"] == "passkey" and result["depths"] == [0.0, 0.5, 1.0]
    rows = {row["length"]: row for row in result["lengths"]}
    assert "needs at least" in rows[128]["error"]  # the paper's prompt is ~250 bytes
    for length in (256, 512):
        cells = rows[length]["cells"]
        assert [c["depth"] for c in cells] == [0.0, 0.5, 1.0]
        assert all(c["trials"] == 2 and 0 <= c["acc"] <= 1 for c in cells)
        assert rows[length]["acc"] == pytest.approx(np.mean([c["acc"] for c in cells]))
    assert "| depth | 256 | 512 |" in printed["passkey"]
    assert "chance 0.20" in printed["passkey"]
    # what it was scored on: its own prompts, not the run's text, which the needle's keys
    # are hidden in (the caption said "scored on stdlib_text" for both)
    assert result["data"] == {"dataset": "passkey's own inputs", "tokenizer": "bytes"}
    assert "scored on passkey's own inputs, bytes tokenizer" in printed["passkey"]
    needle = fileio.read_json(run / "retrieval_needle.json")["data"]
    assert (needle["dataset"], needle["split"]) == ("needle's keys in stdlib_text", "validation")
    assert result["smoke"] is True  # lm.py:smoke: the table and heatmap say what it checks
    assert printed["passkey"].startswith("**smoke run: checks the set-up, not a result**\n")
    flipflop = fileio.read_json(run / "retrieval_flipflop_yarn.json")
    assert flipflop["chance"] == 0.5 and flipflop["method"] == "yarn"
    assert (run / "retrieval_flipflop_yarn.png").exists()


def test_a_length_whose_depths_hardly_move_the_key_says_so(lm_run):
    """Passkey with its task line at 256 tokens leaves 2 filler tokens: its depths put the key
    within 2 tokens of each other, and the cells read as if depth had been varied."""
    run, printed = lm_run
    rows = {row["length"]: row for row in
            fileio.read_json(run / "retrieval_passkey.json")["lengths"]}
    tight, wide = ([c["key_at"] for c in rows[n]["cells"]] for n in (256, 512))
    assert tight == sorted(tight) and tight[-1] - tight[0] < 256 / 10
    assert wide[-1] - wide[0] > 512 / 10
    assert rows[256]["note"] == (
        f"length 256: the key starts at token {tight[0]} to {tight[-1]} over depths 0 to 1 "
        f"({len(set(tight))} positions for 3 depths), so depth hardly varies there: compare "
        "depths at longer lengths")
    assert "note" not in rows[512]
    assert f"\n\n{rows[256]['note']}\n" in printed["passkey"]  # under the cells' table
    fig, ax = plt.subplots()  # the heatmap stars that length
    heatmap.draw(ax, fileio.read_json(run / "retrieval_passkey.json"), title="")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["128", "256*", "512"]
    assert ax.get_xlabel().endswith("*: the key's depth hardly varies)")
    plt.close(fig)


@pytest.mark.parametrize(("positions", "noted"), [
    ([10, 40, 70], False),  # a span of 60 of 100 tokens, every depth its own position
    ([10, 12, 14], True),  # a span of 4 of 100
    ([10, 10, 70], True),  # two depths at one position
    ([10], False),  # one depth: nothing to compare
])
def test_depth_note_flags_spans_under_a_tenth_and_shared_positions(positions, noted):
    cells = [{"depth": i / 2, "key_at": p} for i, p in enumerate(positions)]
    assert (scoring.depth_note(100, cells) is not None) == noted


@pytest.fixture
def stop_while_writing(monkeypatch):
    """Every evaluation's write sends this process SIGTERM as it starts."""
    from posjax.eval import evaluation

    write = evaluation.Evaluation.write

    def stopped_while_writing(self, result, output=None):
        os.kill(os.getpid(), signal.SIGTERM)
        return write(self, result, output)

    monkeypatch.setattr(evaluation.Evaluation, "write", stopped_while_writing)


def test_a_stop_while_the_result_is_written_lands_after_its_heatmap_too(lm_run, tmp_path,
                                                                        stop_while_writing,
                                                                        capsys):
    """SIGTERM while a passkey result was written, or while its heatmap was drawn, left the
    file without its picture, and "interrupted after every length was scored and written"
    sent nobody to draw it: the file and its pictures are now written as one."""
    run = tmp_path / "run"
    shutil.copytree(lm_run[0], run)
    for written in run.glob("retrieval_*"):
        written.unlink()
    assert cli.main(["extrapolate", f"--workdir={run}", "--eval=passkey", "--lengths=256",
                     "--depths=0", "--trials=1", "--progress=false"]) == 128 + signal.SIGTERM
    assert capsys.readouterr().err.strip() == (
        "posjax extrapolate: interrupted after every length was scored and written: "
        f"{run / 'retrieval_passkey.json'}")
    assert fileio.read_json(run / "retrieval_passkey.json")["lengths"][0]["length"] == 256
    assert (run / "retrieval_passkey.png").stat().st_size > 10_000


@pytest.mark.parametrize("is_smoke", [True, False])
def test_one_runs_heatmap_says_when_it_only_checks_the_set_up(lm_run, tmp_path, monkeypatch,
                                                             is_smoke):
    from posjax.results import glyphs, heatmap

    run, _ = lm_run
    result = dict(fileio.read_json(run / "retrieval_passkey.json"), smoke=is_smoke)
    titles = []
    monkeypatch.setattr(glyphs, "save", lambda fig, path, **kw: titles.append(
        fig._suptitle and (fig._suptitle.get_text(), fig._suptitle.get_color())))
    heatmap.picture(result, tmp_path / "passkey.png")
    assert titles == [("smoke run: checks the set-up, not a result", "firebrick")
                      if is_smoke else None]


def test_the_curves_three_line_title_clears_its_axes(lm_run, tmp_path, monkeypatch):
    """A smoke run's curve of seeds: its title (the task, the seeds' bands, the smoke note)
    was drawn over the top of the axes."""
    from posjax.results import glyphs, heatmap

    run, _ = lm_run
    result = fileio.read_json(run / "retrieval_passkey.json")
    results = [dict(result, smoke=True, label="rope", train_seed=seed, folder=f"rope_{seed}")
               for seed in (0, 1)]
    overlaps = []

    def measured(fig, path, **kwargs):
        fig.canvas.draw()
        title = fig._suptitle.get_window_extent()
        axes = fig.axes[0].get_window_extent()
        overlaps.append((fig._suptitle.get_text().count("\n"), title.y0 - axes.y1))

    monkeypatch.setattr(glyphs, "save", measured)
    heatmap._curves(results, tmp_path / "curve.png")
    [(breaks, gap)] = overlaps
    assert breaks == 2 and gap >= 0


def test_eleven_encodings_on_one_curve_get_eleven_colours(lm_run, tmp_path, monkeypatch):
    """experiments/retrieval's passkey curve drew rope and cope in one blue: matplotlib's
    cycle has 10 colours."""
    from posjax.results import glyphs, heatmap

    run, _ = lm_run
    result = fileio.read_json(run / "retrieval_passkey.json")
    drawn = []
    monkeypatch.setattr(glyphs, "save", lambda fig, path, **kw: drawn.extend(
        line.get_color() for line in fig.axes[0].get_lines() if line.get_marker() == "o"))
    heatmap._curves([dict(result, label=f"encoding {i}") for i in range(11)],
                    tmp_path / "curve.png")
    assert len(drawn) == len({tuple(c) for c in drawn}) == 11


def test_default_lengths_leave_out_those_too_short_for_one_trial(lm_run, tmp_path):
    run, _ = lm_run  # trained at 64 tokens: evaluated at 64..1024, passkey needs ~250
    assert cli.main(["extrapolate", f"--workdir={run}", "--eval=passkey", "--trials=1",
                     "--depths=0", f"--output={tmp_path / 'passkey.json'}"]) == 0
    result = fileio.read_json(tmp_path / "passkey.json")
    assert [row["length"] for row in result["lengths"]] == [256, 512, 1024]
    assert all("error" not in row for row in result["lengths"])


def test_plot_of_a_sweep_draws_heatmaps_and_the_curve(lm_run, tmp_path, capsys):
    run, _ = lm_run
    assert cli.main(["plot", str(run.parent.parent), f"--output={tmp_path}"]) == 0
    assert "encoding=none" in capsys.readouterr().err  # named as missing, left out
    for name in ("retrieval_mqar_heatmaps.png", "retrieval_mqar_curve.png",
                 "retrieval_passkey_heatmaps.png", "retrieval_flipflop_yarn_curve.png"):
        assert (tmp_path / name).stat().st_size > 10_000, name
    table = (tmp_path / "retrieval.md").read_text()
    assert table.startswith("**smoke run: checks the set-up, not a result**\n")  # lm.py:smoke
    mqar = fileio.read_json(run / "retrieval_mqar.json")["lengths"]
    # a table per task, with its own lengths and chance (one table mixed them, its caption
    # listing every task's chance)
    assert "Task mqar:\n\n| run | 64 | 128 |\n" in table
    assert f"| mqar: rope | {mqar[0]['acc']:.2f} | {mqar[1]['acc']:.2f} |\n" in table
    assert table.count("Retrieval accuracy (") == table.count("Task ") > 1


def test_a_run_trained_on_passkey_is_scored_on_it(tmp_path, data_flags, capsys):
    run = tmp_path / "pk"
    _train([f"--config={ROOT / 'configs/retrieval.py'}:smoke,seq_len=128,train_min=110,"
            "text_mix=0.3", f"--workdir={run}", *data_flags])
    config = json.loads((run / "config.json").read_text())
    assert config["data"]["train_lengths"] == [110, 128] and config["data"]["text_mix"] == 0.3
    capsys.readouterr()
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=128,256",
                     "--trials=1"]) == 0
    result = fileio.read_json(run / "retrieval_passkey.json")
    assert [row["length"] for row in result["lengths"]] == [128, 256]
    assert result["train_len"] == 128
    from posjax.eval import evaluate

    with pytest.raises(ConfigError, match="--protocol does not apply"):
        evaluate(run, protocol="sliding")
    with pytest.raises(ConfigError, match="--eval=text scores a run's own data, and .* is "
                                          "scored by 'passkey': drop --eval, or give a "
                                          "retrieval task, one of flipflop, mqar, needle, "
                                          # (with any a test file of this process registers)
                                          r"passkey(, \w+)* \(a causal LM's; mqar and "
                                          "flipflop need a "
                                          r"tokenizer of characters\)"):
        evaluate(run, evaluation="text")
    with pytest.raises(ConfigError, match="unknown evaluation 'paskey'"):
        evaluate(run, evaluation="paskey")


def test_a_stop_while_train_extrapolate_writes_its_result_lands_after_its_heatmap(
        tmp_path, data_flags, capsys, stop_while_writing):
    """`posjax train --extrapolate` wrote a retrieval run's result, then drew its heatmap: a
    stop between the two ended with "nothing is left to resume" and no picture, which no
    re-run drew (the run counts as scored)."""
    run = tmp_path / "pk"
    assert cli.main(["train", f"--config={ROOT / 'configs/retrieval.py'}:smoke,seq_len=128,"
                     "train_min=110", f"--workdir={run}", "--extrapolate", "--progress=false",
                     "--config.eval.lengths=(128,)", *data_flags]) == 128 + signal.SIGTERM
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "posjax train: interrupted after training finished and scored: nothing is left to "
        f"resume; results in {run}")
    assert (run / "retrieval_passkey.png").stat().st_size > 10_000


def test_a_trained_runs_result_file_is_its_evaluations():
    from posjax.config import load_config_module
    from posjax.eval.evaluation import trained_result_path
    from posjax.experiment import Experiment

    for config, arg, name in [("retrieval.py", "smoke,task=passkey", "retrieval_passkey.json"),
                              ("retrieval.py", "smoke,task=flipflop", "retrieval_flipflop.json"),
                              ("lm.py", "smoke", "extrapolation.json")]:
        module = load_config_module(str(ROOT / "configs" / config))
        experiment = Experiment.from_config(module.get_config(arg))
        assert trained_result_path(experiment, "/run") == Path("/run") / name


def test_a_sweep_counts_a_run_with_a_retrieval_result_as_evaluated(tmp_path):
    from posjax.launch import sweep

    fileio.write_json(tmp_path / "stages.json", {"final_step": 6})
    fileio.write_json(tmp_path / "config.json", {})
    assert not sweep.finished(tmp_path)
    fileio.write_json(tmp_path / "retrieval_flipflop.json", {})
    assert sweep.finished(tmp_path)


def test_the_retrieval_config_trains_on_its_task_with_a_sweep_over_encodings():
    from posjax.config import load_config_module

    module = load_config_module(str(ROOT / "configs/retrieval.py"))
    config = module.get_config("smoke,task=mqar,seq_len=96")
    assert config.data.dataset == "retrieval" and config.data.task == "mqar"
    assert config.data.train_lengths == (48, 96)
    assert config.eval.lengths == (96, 192, 384, 768, 1536)  # 1x..16x
    points = []
    module.sweep(lambda **kw: points.append(kw), "encodings=rope+alibi")
    assert points == [{"encoding": "rope"}, {"encoding": "alibi"}]
    with pytest.raises(ConfigError,
                       match="unknown retrieval task 'passkee'.*did you mean 'passkey'"):
        module.get_config("task=passkee")


def test_a_retrieval_study_gets_its_table_from_its_raw_results(lm_run, tmp_path):
    from posjax.results import report

    lm_run, _ = lm_run
    results = tmp_path / "study" / "results"
    (results / lm_run.name).mkdir(parents=True)
    fileio.write_json(results / "sweep.json", {"runs": [lm_run.name]})
    for path in lm_run.glob("retrieval_*.json"):
        (results / lm_run.name / path.name).write_bytes(path.read_bytes())
    table = report.study_table(tmp_path / "study")
    # the results of a smoke run say so, though no config.json came with them
    note = "**smoke run: checks the set-up, not a result**\n\n"
    assert table.startswith(note + "Task ") and "| passkey: rope |" in table
    assert "Retrieval accuracy (the answer against its distractors" in table


@pytest.mark.parametrize("method", ["rerope:32", "self_extend:32", "sinks:4:60", "ntk+logn"])
def test_every_length_extension_method_applies_to_a_retrieval_evaluation(lm_run, tmp_path,
                                                                          method):
    from posjax.eval import evaluate

    run, _ = lm_run
    output = tmp_path / "out.json"
    result = evaluate(run, evaluation="flipflop", rope_scaling=method, lengths=[128],
                      depths=[0.0], trials=1, output=output)
    assert result["method"] == method and result["lengths"][0]["cells"][0]["trials"] == 1
    assert not output.with_suffix(".png").exists()  # scoring writes the result; reporting draws
    assert plots.draw_result(result, output) == [output.with_suffix(".png")]
    assert output.with_suffix(".png").stat().st_size > 10_000


def test_a_sweeps_heatmap_cell_is_the_mean_of_its_seeds_cells():
    from posjax.results import heatmap, seeds

    def result(seed, accs):
        return {"label": "rope", "run": f"encoding=rope,seed={seed}", "lengths": [
            {"length": 256, "acc": float(np.mean(accs)),
             "cells": [{"depth": d, "acc": a} for d, a in zip((0.0, 1.0), accs, strict=True)]},
            {"length": 512, "error": "too short"}]}

    (point,) = seeds.combine([result(0, (1.0, 0.2)), result(1, (0.5, 0.4))])
    mean = heatmap.seed_mean(point)
    assert mean["lengths"][0]["cells"] == [{"depth": 0.0, "acc": 0.75},
                                           {"depth": 1.0, "acc": pytest.approx(0.3)}]
    lengths, depths, values = heatmap.grid({**mean, "depths": [0.0, 1.0]})
    assert lengths == [256, 512] and np.isnan(values[:, 1]).all()  # an error row: n/a
    np.testing.assert_allclose(values[:, 0], [0.75, 0.3])
    single = result(0, (1.0, 0.2))
    assert heatmap.seed_mean(single) is single


def test_an_option_a_retrieval_task_does_not_take_names_the_task():
    """The line read 'it is scored by the  evaluation': the retrieval tasks share one class
    whose own name is blank."""
    from posjax.eval.evaluation import evaluation_class

    with pytest.raises(ConfigError) as refused:
        evaluation_class("passkey", "text", {"protocol": "sliding"}, "RUN")
    assert str(refused.value).startswith(
        "--protocol does not apply to RUN: it is scored by the passkey evaluation, which takes "
        "lengths, depths, trials, batch_size; drop it")


def test_a_retrieval_task_on_a_model_that_is_not_causal_names_its_own_evaluation(tmp_path):
    """`--eval=passkey` on a fine-tuned classifier said "this run is not causal", and no
    more."""
    from posjax.eval.weights import InMemory

    finetune = Path(__file__).resolve().parents[1] / "configs" / "finetune.py"
    config = configlib.load_config_module(str(finetune)).get_config("smoke")
    experiment = Experiment.from_config(config)
    model = experiment.build()
    evaluation = EVALUATIONS["passkey"](experiment, tmp_path, InMemory(0, model.params),
                                        name="passkey")
    with pytest.raises(ConfigError) as refused:
        evaluation.run()
    assert str(refused.value) == (
        "--eval=passkey scores a causal LM's continuations, and this run is a classifier: "
        "drop --eval to score it with its own evaluation (match)")


def test_cells_of_another_trial_count_are_not_merged_and_the_picture_names_the_count(
        lm_run, tmp_path, monkeypatch):
    """--trials=1 at 512, then --trials=3 at 256 into one file: the 1-trial row was kept
    beside the 3-trial one, and the heatmap never said how many trials a cell holds."""
    run, _ = lm_run
    output = tmp_path / "passkey.json"
    base = ["extrapolate", f"--workdir={run}", "--eval=passkey", "--depths=0",
            f"--output={output}"]
    assert cli.main([*base, "--lengths=512", "--trials=1"]) == 0
    titles = []
    real_draw = heatmap.draw
    monkeypatch.setattr(heatmap, "draw", lambda ax, result, *, title, **kw: titles.append(
        title) or real_draw(ax, result, title=title, **kw))
    assert cli.main([*base, "--lengths=256", "--trials=3"]) == 0
    result = fileio.read_json(output)
    assert [row["length"] for row in result["lengths"]] == [256]
    assert result["trials_per_cell"] == 3
    assert titles and "accuracy over 3 trials per cell" in titles[-1]


def test_text_for_a_task_that_reads_none_is_refused(lm_run, tmp_path, capsys):
    """passkey with --text_glob and --output ran on its own filler, rc 0, the books unread."""
    run, _ = lm_run
    (tmp_path / "book.txt").write_text("words " * 400)
    capsys.readouterr()
    assert cli.main(["extrapolate", f"--workdir={run}", "--eval=passkey", "--lengths=256",
                     f"--text_glob={tmp_path}/*.txt", f"--output={tmp_path / 'pk.json'}"]) == 2
    # (evaluations other test files register may follow needle)
    assert capsys.readouterr().err.strip().startswith(
        "posjax extrapolate: error: --text_glob gives text to read, and --eval=passkey makes "
        "all of its input itself: drop --text_glob, or hide the keys in that text with "
        "--eval=needle")
    assert not (tmp_path / "pk.json").exists()


def test_seeds_scored_with_other_trials_are_refused_and_lengths_one_seed_lacks_are_named():
    """A 10-trial seed and a 4-trial seed were averaged without a word, and lengths one seed
    lacked were dropped from the table with no note."""
    from posjax.results import heatmap

    def scored(seed, lengths, trials=10):
        return {"task": "passkey", "label": "rope", "run": f"encoding=rope,seed={seed}",
                "folder": f"/runs/encoding=rope,seed={seed}", "file": "retrieval_passkey.json",
                "train_len": 64, "chance": 0.2, "method": "none", "trials_per_cell": trials,
                "lengths": [{"length": n, "acc": 0.5} for n in lengths]}

    table = heatmap.table([scored(0, (256, 512)), scored(1, (256, 512, 1024))])
    assert "Left out, scored by some seeds only: passkey: rope (1024)." in table
    with pytest.raises(ConfigError, match=r"^runs /runs/encoding=rope,seed=0 and "
                       r"/runs/encoding=rope,seed=1 count as seeds of 'passkey: rope' by their "
                       r"names but differ in trials_per_cell \(10 against 4\)"):
        heatmap.table([scored(0, (256,)), scored(1, (256,), trials=4)])


def test_the_retrieval_table_keeps_the_sweeps_order_and_says_why_a_cell_is_empty():
    """retrieval.md listed alibi before rope where its pictures had rope first, and showed
    "-" at 128 with no reason, where extrapolation.md names each."""
    from posjax.results import heatmap

    def result(label, rows):
        return {"task": "passkey", "label": label, "train_len": 64, "chance": 0.2,
                "lengths": rows}

    table = heatmap.table([
        result("rope", [{"length": 128, "error": "passkey needs at least 254 tokens"},
                        {"length": 256, "acc": 0.5}]),
        result("alibi", [{"length": 128, "acc": 0.25}, {"length": 256, "acc": 0.75}])])
    assert table.index("| passkey: rope |") < table.index("| passkey: alibi |")
    assert "| passkey: rope | - | 0.50 |" in table
    assert ("Not scored (-): passkey: rope at 128: passkey needs at least 254 tokens."
            in table)


def test_a_needle_cell_draws_the_same_trials_whatever_the_longest_length_asked():
    """The haystack was the text's first 4 x the longest length tokens, and each trial's
    offset was drawn over all of it: --lengths=256 and --lengths=256,2048 scored the cell
    (256, 0.5) on other texts (acc 0.121 against 0.136)."""
    import types

    text = (np.arange(40_000) * 7919 % 90 + 32).astype(np.int32)  # printable bytes
    evaluation, probe = types.SimpleNamespace(name="needle"), retrieval.get_probe("needle", CFG)
    cells = [scoring.RetrievalEvaluation.trials(evaluation, probe, 256, 0.5, 3, BYTES,
                                                text[:4 * longest])
             for longest in (256, 2048, 8192)]
    for other in cells[1:]:
        for a, b in zip(cells[0], other, strict=True):
            np.testing.assert_array_equal(a.tokens, b.tokens)


@pytest.mark.parametrize("task, field, value", [("passkey", "distractors", 0),
                                                ("needle", "distractors", -1),
                                                ("mqar", "mqar_queries", 0)])
def test_a_field_that_leaves_nothing_to_score_is_refused_in_one_line(task, field, value):
    """distractors=0 scored a model that knows nothing at accuracy 1.0, mqar_queries=0
    trained on nothing (loss 0) and -1 distractors was an IndexError traceback."""
    cfg = data.default_data_config("retrieval")
    cfg[field] = value
    with pytest.raises(ConfigError, match=rf"^data.{field}={value}: .* give at least 1$"):
        retrieval.get_probe(task, cfg)
    cfg[field] = 1
    assert retrieval.get_probe("flipflop", cfg).candidates == 2  # reads no distractors


def test_a_needle_length_holds_every_words_trial_or_none():
    """A length of 213 tokens held seed 0's word and was accepted, then a longer word's
    trial needed 216, in a later training step or cell."""
    probe = retrieval.get_probe("needle", CFG)
    text = (np.arange(5000) % 90 + 32).astype(np.int32)
    needs = set()
    for seed in range(40):
        with pytest.raises(ConfigError) as refused:
            probe.trial(np.random.default_rng(seed), 213, 0.5, BYTES, text)
        needs.add(refused.value.need)
    (need,) = needs
    for seed in range(40):
        assert len(probe.trial(np.random.default_rng(seed), need, 0.5, BYTES, text).tokens) \
            == need


def test_answers_split_unevenly_name_the_tokenizer_and_what_a_trained_run_can_do():
    with pytest.raises(ConfigError, match=r"^passkey: the tokenizer splits the candidate "
                                          r"answers .*posjax's sentencepiece.*: score a run "
                                          r"trained with data.tokenizer=bytes$"):
        retrieval._same_length([np.zeros(5), np.zeros(6)], "passkey")
