"""A researcher's first month (issue 50): a sweep of one's own values from the command line
(--grid), config files that import each other, checkpoints by wall time and a resumed
sweep that says so, result files with a plain open()'s mode, and a layer pattern longer
than the model refused."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from posjax import fileio

REPO = Path(__file__).resolve().parents[1]
LM = str(REPO / "configs" / "lm.py")


@pytest.fixture
def umask():
    """Set the process's umask for one test, then restore it."""
    old = os.umask(0o022)
    yield os.umask
    os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(Path(path).stat().st_mode)


def test_atomic_writes_get_the_mode_a_plain_open_would(tmp_path, umask):
    """mkstemp's 0600 was kept: config.json, stages.json and plots were private under
    umask 022 while metrics.jsonl (a plain open) was 0644."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fileio.write_json(tmp_path / "config.json", {"a": 1})
    fig = plt.figure()
    fileio.save_figure(fig, tmp_path / "plot.png")
    plt.close(fig)
    with open(tmp_path / "metrics.jsonl", "w") as plain:
        plain.write("{}\n")
    assert _mode(tmp_path / "config.json") == _mode(tmp_path / "plot.png") == 0o644
    assert _mode(tmp_path / "metrics.jsonl") == 0o644
    umask(0o077)
    fileio.write_text(tmp_path / "private.txt", "x")
    assert _mode(tmp_path / "private.txt") == 0o600
    # A file that exists keeps its own mode, as open(path, "w") keeps it.
    os.chmod(tmp_path / "config.json", 0o640)
    fileio.write_json(tmp_path / "config.json", {"a": 2})
    assert _mode(tmp_path / "config.json") == 0o640
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize("arg, layers", [("smoke", 1), ("size=main", 2)])
def test_a_layer_pattern_longer_than_the_model_is_refused(tmp_path, capsys, arg, layers):
    """rope+rope+rope+none on 1 or 2 layers trained as plain RoPE, with no word."""
    from posjax.launch import cli

    workdir = tmp_path / "run"
    assert cli.main(["train", f"--config={LM}:{arg},layer_pattern=rope+rope+rope+none",
                     f"--workdir={workdir}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"posjax train: error: model.layer_pattern='rope+rope+rope+none' names 4 layers but "
        f"model.num_layers={layers}, so {'+'.join(['rope', 'rope', 'none'][layers - 1:])} "
        f"would reach no layer: set --config.model.num_layers=4 (or a multiple), or shorten "
        f"the pattern to {layers} name(s)")
    assert not (workdir / "config.json").exists()
    # The fix it names works: the pattern on 4 layers builds RoPE, RoPE, RoPE, NoPE.
    from configs.lm import get_config
    from posjax.experiment import Experiment
    from posjax.models.transformer import layer_encodings

    config = get_config(f"{arg},layer_pattern=rope+rope+rope+none")
    config.model.num_layers = 4
    experiment = Experiment.from_config(config)
    names = [e.name for e in layer_encodings(experiment.model_config, experiment.encoding)]
    assert names == ["rope", "rope", "rope", "none"]
