"""Seeds as a sweep axis: run names, intervals, combined results, bands and bracketed cells."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from posjax import fileio
from posjax.errors import ConfigError
from posjax.launch import cli, sweep
from posjax.results import seeds

LM = str(Path(__file__).resolve().parents[1] / "configs" / "lm.py")


def test_seeds_run_every_point_with_consecutive_train_seeds():
    runs = sweep.expand(LM, "smoke,study=smoke,seeds=3,seed=7")
    assert [r.name for r in runs] == [f"encoding={e},seed={s}" for e in ("rope", "alibi")
                                      for s in (7, 8, 9)]
    assert runs[1].arg == "smoke,study=smoke,seed=8,encoding=rope"
    assert [r.name for r in sweep.expand(LM, "smoke,study=smoke")] == [
        "encoding=rope", "encoding=alibi"]  # one seed: the names of before
    with pytest.raises(ConfigError, match="seeds=0 must be >= 1"):
        sweep.expand(LM, "smoke,study=smoke,seeds=0")


def test_a_point_is_its_run_name_without_the_seed():
    assert seeds.point("encoding=rope,seed=2") == "encoding=rope"
    assert seeds.point("seed=2,encoding=rope,theta=500") == "encoding=rope,theta=500"
    assert seeds.point("encoding=rope,seeds_note=1") == "encoding=rope,seeds_note=1"


@given(st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=4))
def test_below_five_seeds_the_interval_is_min_and_max(values):
    mean, low, high = seeds.interval(values)
    assert (low, high) == (min(values), max(values))
    assert mean == pytest.approx(statistics.fmean(values))


def test_from_five_seeds_the_interval_is_the_95_percent_t_interval():
    values = [1.0, 2.0, 3.0, 4.0, 5.0]
    mean, low, high = seeds.interval(values)
    half = 2.7764451051977987 * statistics.stdev(values) / math.sqrt(5)  # t(0.975, 4)
    assert (mean, low, high) == pytest.approx((3.0, 3.0 - half, 3.0 + half))
    assert seeds.separated((1.0, 0.9, 1.1), (1.3, 1.2, 1.4))
    assert not seeds.separated((1.0, 0.9, 1.25), (1.3, 1.2, 1.4))


def _result(ppl: list[float]) -> dict:
    return {"evaluation": "text", "protocol": "nonoverlapping", "stride": None, "method": "none",
            "train_len": 32, "encoding": {"name": "rope"}, "head_dim": 16,
            "lengths": [{"length": 32 * 2**i, "ppl": p, "loss": math.log(p), "bucket_size": 32,
                         "bucket_loss": [math.log(p)] * 2**i} for i, p in enumerate(ppl)]}


def test_plot_draws_one_line_per_point_with_bracketed_cells(tmp_path, capsys):
    table = {"encoding=rope": [[2.0, 3.0], [2.2, 3.4], [2.1, 3.2]],
             "encoding=alibi": [[2.5, 2.6], [2.4, 2.7], [2.6, 2.5]]}
    runs = {}
    for point, per_seed in table.items():
        for seed, ppl in enumerate(per_seed):
            name = f"{point},seed={seed}"
            runs[name] = {"status": "done"}
            fileio.write_json(tmp_path / "runs" / name / "extrapolation.json", _result(ppl))
    fileio.write_json(tmp_path / "sweep.json", {"config": LM, "arg": "seeds=3", "runs": runs})
    assert cli.main(["plot", str(tmp_path)]) == 0
    text = (tmp_path / "extrapolation.md").read_text()
    assert "| rope | 2.100 [2.000, 2.200] | 3.200 [3.000, 3.400] |" in text
    assert "| alibi | 2.500 [2.400, 2.600] | 2.600 [2.500, 2.700] |" in text
    assert "Means over 3 seeds, in brackets the min-max" in text
    assert (tmp_path / "extrapolation.png").read_bytes().startswith(b"\x89PNG")


def test_combined_rows_average_numbers_and_keep_only_what_every_seed_agrees_on():
    rows = [{"length": 8, "acc": a, "splits": ["validation"], "bucket_loss": [a, None],
             "note": n} for a, n in ((0.5, "x"), (0.7, "y"))]
    merged = seeds.combine([{"label": "p", "lengths": [row]} for row in rows])[0]["lengths"][0]
    assert merged["acc"] == pytest.approx(0.6) and merged["acc_interval"] == [0.5, 0.7]
    assert merged["splits"] == ["validation"] and merged["bucket_loss"] == [0.6, None]
    assert merged["bucket_loss_interval"] == [[0.5, 0.7], None]
    assert "note" not in merged


def test_the_loss_by_position_and_theta_pictures_show_the_seeds_spread(tmp_path,
                                                                       monkeypatch):
    """A theta sweep with 2 seeds drew position_loss.png and theta.png from the seeds'
    means alone, with no band, bar or word that they were means: a gap between two thetas
    smaller than the seeds' spread read as an ordering."""
    from matplotlib.collections import PolyCollection

    from posjax.results import glyphs, plots

    per_theta = {100.0: [[2.0, 3.0], [2.4, 3.6]], 10000.0: [[2.1, 2.9], [2.3, 3.1]]}
    runs = {}
    for theta, per_seed in per_theta.items():
        for seed, ppl in enumerate(per_seed):
            name = f"encoding=rope,theta={theta},seed={seed}"
            runs[name] = {"status": "done"}
            result = _result(ppl)
            result["encoding"] = {"name": "rope", "theta": theta}
            result["lengths"][-1]["bucket_loss"] = [0.5 + seed, 1.0 + seed]
            fileio.write_json(tmp_path / "runs" / name / "extrapolation.json", result)
    fileio.write_json(tmp_path / "sweep.json", {"config": LM, "arg": "study=theta,seeds=2",
                                                "runs": runs})
    drawn = {}

    def kept(fig, path, **kwargs):
        ax = fig.axes[0]
        drawn[Path(path).name] = (fig._suptitle.get_text(), ax)

    monkeypatch.setattr(glyphs, "save", kept)
    plots.plot_sweep(str(tmp_path))
    title, ax = drawn["position_loss.png"]
    assert "Lines: means over 2 seeds; bands: their min-max" in title
    [band, _] = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert band.get_paths()[0].vertices[:, 1].min() == pytest.approx(0.5)
    title, ax = drawn["theta.png"]
    assert title == "Lines: means over 2 seeds; bars: their min-max"
    bars = [c for c in ax.collections if c.get_segments()]
    # at L=64 the seeds' perplexities 3.0 and 3.6 at theta 100: a bar from 3.0 to 3.6
    assert any(segments.tolist() == [[100.0, 3.0], [100.0, 3.6]]
               for c in bars for segments in map(np.asarray, c.get_segments()))


def test_a_pictures_seed_bands_are_named_on_it():
    """Shaded bands around each line, explained only in the .md beside the picture."""
    assert seeds.band_note([{"seeds": 1}, {}]) == ""
    assert seeds.band_note([{"seeds": 3}, {"seeds": 3}]) == (
        "\nLines: means over 3 seeds; bands: their min-max")
    assert seeds.band_note([{"seeds": 2}, {"seeds": seeds.T_INTERVAL_SEEDS}]) == (
        f"\nLines: means over 2, {seeds.T_INTERVAL_SEEDS} seeds; bands: their min-max / 95 % "
        "t-interval of the mean")


def test_rows_over_fewer_seeds_are_named_with_their_seeds():
    """ntk scored on seeds 0 and 1, yarn on seed 2 alone: the caption said "Means over 1, 2, 3
    seeds", never which row had which, and yarn's seed read as the method's gain."""
    rows = [{"label": "rope", "seeds": 3, "per_seed": [{"train_seed": k} for k in range(3)]},
            {"label": "rope +ntk", "seeds": 2, "per_seed": [{"train_seed": 1},
                                                            {"train_seed": 0}]},
            {"label": "rope +yarn", "train_seed": 2}]
    assert seeds.seeds_note(rows) == (
        "Means over 3 seeds, in brackets the min-max (fewer for `rope +ntk` over seeds 0, 1; "
        "`rope +yarn` over seed 2: compare rows on the same seeds); rank two runs only where "
        "their brackets do not overlap.")
    assert seeds.seeds_note(rows[:1]) == ("Means over 3 seeds, in brackets the min-max; rank "
                                          "two runs only where their brackets do not overlap.")
