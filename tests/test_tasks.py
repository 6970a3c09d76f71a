"""Task runs: configs/algorithmic.py and configs/patch2d.py load and expand; smoke runs of
each are scored at every problem size (posjax.eval.tasks, reached through evaluate);
mean reciprocal rank on a hand-made example; task sweeps plot accuracy against size."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posjax import config as configlib
from posjax import encoders, fileio, models
from posjax.data import grid2d
from posjax.errors import ConfigError
from posjax.eval import evaluate, format_table
from posjax.experiment import Experiment
from posjax.launch import sweep
from posjax.results import plots, ranking
from posjax.train import trainer

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
ALGORITHMIC = str(CONFIGS / "algorithmic.py")
PATCH2D = str(CONFIGS / "patch2d.py")


def get_config(path: str, arg: str, data_dir=None):
    config = configlib.load_config_module(path).get_config(arg)
    if data_dir is not None:
        config.data.data_dir = str(data_dir)
    return config


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tfds")


# --- configs ----------------------------------------------------------------------------


def test_algorithmic_config_lengths_and_sweep():
    config = get_config(ALGORITHMIC, "smoke,task=addition")
    # seq_len holds the longest training example: 3 * 20 + 3 tokens for addition
    assert config.train.stages == ((63, 4, 6),)
    assert (config.data.train_lengths, config.data.test_lengths) == ((1, 20), (21, 40))
    assert (config.model.kind, config.data.dataset) == ("causal_lm", "algorithmic")
    t5 = Experiment.from_config(get_config(ALGORITHMIC, "smoke,encoding=t5"))
    assert t5.encoding.bidirectional is False  # the causal model's T5
    assert get_config(ALGORITHMIC, "smoke,encoding=t5,bidirectional=true").encoding.bidirectional
    with pytest.raises(ConfigError, match="M >= 81"):
        get_config(ALGORITHMIC, "smoke,randomize_positions=64")
    with pytest.raises(ConfigError, match="train_max < test_max"):
        get_config(ALGORITHMIC, "smoke,train_max=40,test_max=40")
    with pytest.raises(ConfigError, match="unknown algorithmic task"):
        get_config(ALGORITHMIC, "smoke,task=revers")

    runs = sweep.expand(ALGORITHMIC, "smoke,task=reverse")
    names = [r.name for r in runs]
    assert len(names) == 11 and "encoding=none,randomize_positions=0" in names
    assert "encoding=none,randomize_positions=256" not in names  # NoPE reads no positions
    assert "encoding=learned,randomize_positions=256" in names
    assert all("task=reverse" in r.arg for r in runs)
    custom = sweep.expand(ALGORITHMIC, "smoke,randomize_positions=512,encodings=rope+t5")
    assert [r.name for r in custom] == [
        "encoding=rope,randomize_positions=0", "encoding=rope,randomize_positions=512",
        "encoding=t5,randomize_positions=0", "encoding=t5,randomize_positions=512",
    ]  # fmt: skip


def test_patch2d_config_and_sweep():
    config = get_config(PATCH2D, "smoke,encoding=rope")
    assert (config.model.kind, config.model.output, config.model.grid_width) == (
        "patch2d", "per_patch", 16)
    assert config.train.stages == ((64, 4, 6),)
    assert config.data.test_grid_sizes == (12, 16)
    runs = sweep.expand(PATCH2D, "smoke,task=manhattan")
    assert [r.name for r in runs] == [
        "encoding=rope", "encoding=rope2d", "encoding=rope_mixed", "encoding=learned"]
    with pytest.raises(ConfigError, match="grid sides must be >= 2"):
        get_config(PATCH2D, "smoke,test_grid_sizes=1")
    # a side below the trained one was averaged into the "seen" column
    with pytest.raises(ConfigError, match=r"^test_grid_sizes=4\+12: side 4 is below grid_size=8, "
                       r"the one side trained on, yet a table counts it among the sides seen: "
                       r"give test sides >= 8$"):
        Experiment.from_config(get_config(PATCH2D, "smoke,test_grid_sizes=4+12")).data.source(
            "train")


def test_a_grid_wider_than_the_model_indexes_is_refused_in_its_own_words(tmp_path):
    """A training grid wider than model.grid_width was refused under the prefix
    "eval.learned_extension='', the default of posjax extrapolate's --learned_extension"."""
    config = get_config(PATCH2D, "smoke,encoding=rope")
    config.model.grid_width = 4
    with pytest.raises(ConfigError, match=r"^grid side 8 is wider than model.grid_width=4, "):
        trainer.train(config, tmp_path / "run", progress=False)


def test_a_test_grid_wider_than_the_model_indexes_is_refused_before_training(tmp_path):
    """--config.data.test_grid_sizes past model.grid_width trained, then every test grid
    was an error row."""
    config = get_config(PATCH2D, "smoke,encoding=rope")
    config.data.test_grid_sizes = (12, 20)
    with pytest.raises(ConfigError, match=r"^grid side 20 is wider than model.grid_width=16, "
                       r"so raster indices row \* 16 \+ col repeat: train with "
                       r"model.grid_width >= 20$"):
        trainer.train(config, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


# --- smoke runs -------------------------------------------------------------------------


@pytest.mark.slow
def test_algorithmic_run_scored_per_size_with_error_rows_past_the_table(tmp_path, data_dir):
    config = get_config(ALGORITHMIC, "smoke,encoding=learned,train_max=4,test_max=8", data_dir)
    workdir = tmp_path / "learned"
    trainer.train(config, workdir, progress=False)
    result = evaluate(workdir)  # the data kind picks the task evaluation
    assert result["protocol"] == "task" and result["train_len"] == 4
    assert json.loads((workdir / "extrapolation.json").read_text()) == result
    rows = {r["length"]: r for r in result["lengths"]}
    assert sorted(rows) == list(range(1, 9))
    for n in range(1, 5):  # copy: 2n + 1 tokens <= the 9 rows of the table
        assert rows[n]["tokens"] == 2 * n + 1 and rows[n]["splits"] == ["validation"]
        assert 0.0 <= rows[n]["seq_acc"] <= rows[n]["acc"] <= 1.0
        assert math.isclose(rows[n]["ppl"], math.exp(rows[n]["loss"]))
    for n in range(5, 9):
        assert "learned_extension=hierarchical" in rows[n]["error"]
        # in sizes, as --lengths takes them: "at most 9 tokens" was refused as no size
        assert rows[n]["error"].endswith(" or evaluate sizes up to 4 (--lengths=4)")
    assert "| problem size n | loss | acc | exact match |" in format_table(result)

    # The same checkpoint through Su's hierarchical extension reaches every size, and agrees
    # with the plain table where both are defined.
    extended = evaluate(workdir, learned_extension="hierarchical",
                        output=tmp_path / "hierarchical.json")
    assert extended["learned_extension"] == "hierarchical"
    ext_rows = {r["length"]: r for r in extended["lengths"]}
    assert all("acc" in r for r in ext_rows.values())
    for n in range(1, 5):
        assert math.isclose(ext_rows[n]["loss"], rows[n]["loss"], rel_tol=1e-5)


@pytest.mark.slow
def test_randomized_run_draws_positions_at_evaluation(tmp_path, data_dir):
    arg = "smoke,encoding=rope,train_max=4,test_max=8,randomize_positions=32"
    workdir = tmp_path / "rope_rand"
    trainer.train(get_config(ALGORITHMIC, arg, data_dir), workdir, progress=False)
    first = evaluate(workdir, lengths=(3, 8))
    assert [r["length"] for r in first["lengths"]] == [3, 8]
    assert all("acc" in r for r in first["lengths"]) and first["randomize_positions"] == 32
    again = evaluate(workdir, lengths=(3, 8), output=tmp_path / "again.json")
    assert again["lengths"] == first["lengths"]  # seeded draws
    # a size given that no split holds is an error row, where it was dropped without a word
    beyond = evaluate(workdir, lengths=(3, 60), output=tmp_path / "beyond.json")["lengths"]
    assert [r["length"] for r in beyond] == [3, 60] and "acc" in beyond[0]
    assert beyond[1]["error"] == ("no evaluation example of this size (the evaluation splits "
                                  "hold sizes 1-8)")
    with pytest.raises(ConfigError, match=r"no evaluation examples of sizes \[60\]: the "
                                          "evaluation splits hold sizes 1-8"):
        evaluate(workdir, lengths=(60,), output=tmp_path / "none.json")
    assert ranking.encoding_label(first) == "rope+rand32"


@pytest.mark.slow
def test_patch2d_rope2d_run_scored_on_larger_grids(tmp_path, data_dir):
    arg = "smoke,encoding=rope2d,grid_size=4,test_grid_sizes=6+8"
    workdir = tmp_path / "rope2d"
    trainer.train(get_config(PATCH2D, arg, data_dir), workdir, progress=False)
    result = evaluate(workdir)
    assert result["train_len"] == 4 and result["dataset"] == "grid2d"
    rows = {r["length"]: r for r in result["lengths"]}
    assert sorted(rows) == [4, 6, 8]
    for side, row in rows.items():
        assert row["patches"] == side * side and row["scored"] == row["examples"] * side**2
        assert 0.0 <= row["balanced_acc"] <= 1.0 and 0.0 <= row["acc"] <= 1.0
    assert rows[8]["splits"] == ["test_8"]
    with pytest.raises(ConfigError, match="--protocol does not apply.*task evaluation"):
        evaluate(workdir, protocol="sliding")


# --- ranking and plots ------------------------------------------------------------------


def _result(task, name, seq_acc_by_size, randomize=0, train_len=20):
    rows = [
        {"length": n, "error": "cannot reach"} if v is None
        else {"length": n, "loss": 1.0, "ppl": math.e, "acc": v, "seq_acc": v}
        for n, v in seq_acc_by_size.items()
    ]
    return {"run": f"{name}-{task}", "evaluation": "task", "encoding": {"name": name},
            "train_len": train_len, "protocol": "task", "method": "none",
            "dataset": "algorithmic", "task": task, "randomize_positions": randomize,
            "lengths": rows}


def test_mean_reciprocal_rank_hand_made():
    results = [
        # copy: a 0.9, b 0.5, c errors -> ranks 1, 2, 3 (size 10 is seen: ignored)
        _result("copy", "a", {10: 0.0, 21: 1.0, 22: 0.8}),
        _result("copy", "b", {10: 1.0, 21: 0.5, 22: 0.5}),
        _result("copy", "c", {10: 1.0, 21: None, 22: None}),
        # reverse: b 0.9 first, a and c tie at 0.2 and share rank 2
        _result("reverse", "a", {21: 0.2}),
        _result("reverse", "b", {21: 0.9}),
        _result("reverse", "c", {21: 0.2}),
    ]
    mrr = ranking.mean_reciprocal_rank(results)
    assert mrr == pytest.approx({"a": 0.75, "b": 0.75, "c": (1 / 3 + 1 / 2) / 2})
    # one group per unseen size: copy 21 (a, b, c), copy 22 (a, b, c), reverse 21 (b, a=c)
    by_size = ranking.mean_reciprocal_rank(results, bucket_size=1)
    assert by_size["a"] == pytest.approx((1 + 1 + 1 / 2) / 3)
    assert ranking.size_bucket(20, 20, 5) is None and ranking.size_bucket(26, 20, 5) == 1
    assert ranking.encoding_label(_result("copy", "rope", {}, randomize=256)) == "rope+rand256"


def test_task_sweep_plots_accuracy_against_size(tmp_path):
    runs = {"encoding=none": _result("copy", "none", {n: 1.0 - n / 50 for n in range(1, 41)}),
            "encoding=learned": _result("copy", "learned",
                                        {n: (0.9 if n <= 20 else None) for n in range(1, 41)})}
    for name, result in runs.items():
        fileio.write_json(tmp_path / "runs" / name / "extrapolation.json", result)
    fileio.write_json(tmp_path / "sweep.json", {"runs": {name: {} for name in runs}})
    paths = plots.plot_sweep(tmp_path)
    assert [p.name for p in paths] == ["extrapolation.png", "extrapolation.md"]
    assert paths[0].stat().st_size > 10_000
    text = paths[1].read_text()
    assert "| run | seen (<= 20) | 21-25 | 26-30 | 31-35 | 36-40 |" in text
    assert "| learned | 0.900 / 0.900 | - | - | - | - |" in text
    assert "| none | 1.000 |" in text  # MRR: first in every bucket


def test_task_results_of_two_data_kinds_get_a_table_and_picture_each(tmp_path):
    """An algorithmic run (sequence lengths) beside a grid2d one (grid sides) shared one
    table: grid sides 8, 12 and 16 sat in the columns of lengths <= 20, 21-25 and 26-30."""
    sides = {**_result("per_patch", "rope2d", {4: 1.0, 8: 0.5, 12: 0.2}, train_len=8),
             "dataset": "grid2d"}
    for row in sides["lengths"]:
        row["balanced_acc"] = row["acc"]
    fileio.write_json(tmp_path / "alg" / "extrapolation.json",
                      _result("copy", "none", {n: 1.0 - n / 50 for n in range(1, 31)}))
    fileio.write_json(tmp_path / "p2d" / "extrapolation.json", sides)
    paths = plots.plot_sweep([tmp_path / "alg", tmp_path / "p2d"], output=tmp_path / "both")
    assert sorted(p.name for p in paths) == [
        "algorithmic_extrapolation.md", "algorithmic_extrapolation.png",
        "grid2d_extrapolation.md", "grid2d_extrapolation.png"]
    grid = (tmp_path / "both" / "grid2d_extrapolation.md").read_text()
    assert "p2d" in grid and "| alg |" not in grid and "trained on sizes up to 8." in grid
    assert "| p2d |" not in (tmp_path / "both" / "algorithmic_extrapolation.md").read_text()


def test_runs_of_two_training_sizes_get_a_table_each_and_a_size_with_no_example_counts_in_none(
        tmp_path):
    """Runs trained on grids of 8 and of 16 shared the columns of the larger: the first's
    sizes 9-16 sat under "seen (<= 16)"'s neighbour, its 17-20 in the wrong bucket; and a
    size given to --lengths that the data has no example of counted as accuracy 0."""
    short = _result("copy", "short", {n: 0.5 for n in range(1, 13)}, train_len=8)
    long = _result("copy", "long", {n: 1.0 for n in range(1, 25)}, train_len=16)
    long["lengths"].append({"length": 30, "error": "no evaluation example of this size (x)",
                            "no_examples": True})
    for name, result in {"short": short, "long": long}.items():
        fileio.write_json(tmp_path / name / "extrapolation.json", result)
    text = plots.task_table(plots.load_results([tmp_path / "short", tmp_path / "long"]))
    assert "| run | seen (<= 8) | 9 | 10 | 11 | 12 |\n" in text
    assert "| short | 0.500 / 0.500 | 0.500 / 0.500 |" in text
    # the unmeasured 30 makes no column, nor widens the buckets
    assert "| run | seen (<= 16) | 17-18 | 19-20 | 21-22 | 23-24 |\n" in text
    assert "trained on sizes up to 8." in text and "trained on sizes up to 16." in text
    # and the table says so (it left 30 out without a word; where a bucket's first size had
    # no example, its heading began at the next, 26-30 read as 27-30)
    assert "The scored data hold no example of size 30: in no column." in text
    assert text.count("no example of size") == 1  # the table of 8 has every size
    other = _result("copy", "b", {n: 1.0 for n in [*range(1, 25), 30]}, train_len=16)
    # the unmeasured 30 ranks long second to b's 1.0 at 30 no more
    assert ranking.mean_reciprocal_rank([long, other], bucket_size=1) == {"b": 1.0, "long": 1.0}


def test_runs_of_two_tasks_get_a_table_each_and_a_run_with_no_rival_no_rank(tmp_path):
    """Runs of copy and reverse shared one table, and a reverse run alone in its task ranked
    1.000 above every copy run, whatever its accuracy."""
    runs = {"a": _result("copy", "a", {10: 1.0, 21: 0.5}),
            "b": _result("copy", "b", {10: 1.0, 21: 0.25}),
            "r": _result("reverse", "r", {10: 1.0, 21: 0.0})}
    for name, result in runs.items():
        fileio.write_json(tmp_path / name / "extrapolation.json", result)
    text = plots.task_table(plots.load_results([tmp_path / n for n in runs]))
    copy, reverse = text.split("Task reverse:")
    assert copy.startswith("Task copy:\n\n| run |") and "| a |" in copy and "| r |" not in copy
    assert "| r | 1.000 / 1.000 | 0.000 / 0.000 |" in reverse and "MRR" not in reverse
    assert ranking.mean_reciprocal_rank(list(runs.values())) == {"a": 1.0, "b": 0.5}


def test_text_image_runs_are_ranked_by_patch_accuracy_where_exact_match_ties_at_zero():
    """Every run's exact match is 0 past the trained sides: ranked by it, all but one tied
    at 0.750 (experiments/encodings_2025)."""
    runs = [{**_result("next_row", name, {4: 1.0, 9: 0.0, 12: 0.0}, train_len=6),
             "dataset": "text_image"} for name in ("a", "b")]
    for result, acc in zip(runs, (0.8, 0.3), strict=True):
        for row in result["lengths"][1:]:
            row["acc"] = acc
    text = plots.task_table([{**r, "label": r["encoding"]["name"]} for r in runs])
    assert "Mean reciprocal rank by answer-token accuracy" in text
    assert "| a | 1.000 |\n| b | 0.500 |" in text


def test_a_ranking_where_every_run_ties_says_so():
    """A smoke sweep of four encodings, every exact match 0.000, printed MRR 1.000 for each
    (ties share the better rank), read as every encoding best."""
    tied = [{**_result("copy", name, {10: 1.0, 21: 0.0, 40: 0.0}), "label": name}
            for name in ("a", "b", "c")]
    assert ranking.tied_groups(tied) == (1, 1)
    text = plots.task_table(tied)
    assert "| a | 1.000 |\n| b | 1.000 |\n| c | 1.000 |" in text
    assert text.rstrip().endswith("Every run ties on every column (each ranked first): this "
                                  "ranks nothing.")
    some = [{**r, "lengths": [*r["lengths"], {"length": 60, "loss": 1.0, "acc": v,
                                              "seq_acc": v}]}
            for r, v in zip(tied, (0.3, 0.2, 0.1), strict=True)]
    assert ranking.tied_groups(some, bucket_size=20) == (1, 2)
    assert plots.task_table(some).rstrip().endswith(
        "Every run ties on 2 of the 3 columns ranked, where each ranks first.")


@pytest.mark.parametrize("name, two_d", [("mrope", True), ("rope", False)])
def test_mrope_reads_a_grid_as_an_image_where_1d_rope_reads_the_raster_index(name, two_d):
    """M-RoPE on patch2d read the raster index row * grid_width + col, plain RoPE on a line:
    it now gets an image's (0, row, col), so what it computes no longer depends on the
    grid_width the raster index needs."""
    def output(grid_width: int):
        cfg = models.ModelConfig(d_model=32, num_layers=1, num_heads=2, head_dim=16,
                                 mlp_dim=32, output="per_patch", grid_width=grid_width)
        model = models.build_model(cfg, encoders.get(name), kind="patch2d", max_len=64,
                                   rngs=nnx.Rngs(0), num_classes=3, patch_dim=5)
        side = 4
        patches = jax.random.normal(jax.random.key(1), (1, side * side, 5))
        positions = jnp.asarray(grid2d.grid_positions(side))[None]
        return np.asarray(model(patches, positions, jnp.ones((1, side * side), jnp.int32)))

    with jax.default_matmul_precision("highest"):
        same = np.allclose(output(4), output(8), atol=1e-5)
    assert same == two_d


def test_the_held_out_loss_of_randomized_positions_reads_them_as_the_evaluation_does(
        data_dir, monkeypatch):
    """The trainer's own held-out evaluation scored a run trained on randomized positions at
    0..T-1, where its task evaluation draws sorted positions from [0, M) (Ruoss et al.)."""
    seen = []

    def step(params, rest, batch, **kwargs):  # the rows of examples, not the padding
        seen.append(np.asarray(batch["positions"])[np.asarray(batch["segment_ids"])[:, 0] > 0])
        return {"loss_sum": 0.0, "correct_sum": 0.0, "weight_sum": 1.0}

    monkeypatch.setattr(trainer, "eval_step", step)
    for arg, randomized in (("smoke,randomize_positions=256", True), ("smoke", False)):
        experiment = Experiment.from_config(get_config(ALGORITHMIC, arg, data_dir))
        model = experiment.abstract()
        seen.clear()
        trainer.evaluate(experiment, model, model.params, 63, 1)
        for positions in seen:
            plain = np.broadcast_to(np.arange(positions.shape[-1]), positions.shape)
            assert np.array_equal(positions, plain) != randomized
            assert (np.diff(positions, axis=-1) > 0).all() and positions.max() < 256
        first = [p.copy() for p in seen]
        seen.clear()
        trainer.evaluate(experiment, model, model.params, 63, 1)  # seeded: the same draws
        assert all(np.array_equal(a, b) for a, b in zip(first, seen, strict=True))
