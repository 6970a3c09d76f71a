"""RoPE analysis: RoFormer's decay bound and Liu et al.'s critical dimension."""

import math
import os

import numpy as np
import pytest

from posjax.errors import ConfigError
from posjax.results.analysis import (
    critical_dimension,
    critical_length,
    decay_table,
    plot_decay,
    rope_decay_curve,
)


def test_decay_curve_golden_values():
    # The curve of RoFormer's figure 2 (Su et al. 2021, sec. 3.4.3): d = 128, base 10000;
    # it starts at (d/2 + 1)/2 = 32.5.
    got = rope_decay_curve([0, 5, 10, 50, 100, 256], 128)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, [32.5, 20.85, 17.95, 12.63, 10.23, 6.54], atol=0.006)


def test_decay_curve_is_symmetric_and_blocked_consistently():
    r = np.arange(0, 9000, 7)
    np.testing.assert_allclose(rope_decay_curve(-r, 64), rope_decay_curve(r, 64))
    np.testing.assert_allclose(rope_decay_curve(r, 64)[:10], rope_decay_curve(r[:10], 64))


def test_a_huge_head_dim_is_computed_in_blocks_that_fit_in_memory():
    """--dim=1000000 built one [4096, d/2] complex block (32 GB): a MemoryError traceback."""
    got = rope_decay_curve([0, 1, 2], 1_000_000)
    assert got[0] == pytest.approx((1_000_000 / 2 + 1) / 2)
    assert got[0] > got[1] > got[2]


def test_critical_dimension_and_length():
    # d = 128, L = 512, theta = 10000: (d/2) log_theta(L / 2 pi) = 64 * ln(81.49) / ln(10000)
    # = 64 * 4.400 / 9.210 = 30.58 -> ceil 31 -> d_extra = 62; T = 2 pi 10000^(62/128) = 544.1.
    assert critical_dimension(128, 512, 10000.0) == 62
    assert critical_length(128, 512, 10000.0) == pytest.approx(544.10, abs=0.01)
    # Liu et al.'s LLaMA2 example: L = 4096 gives d_extra = 92 and about 4.7k tokens.
    assert critical_dimension(128, 4096, 10000.0) == 92
    assert critical_length(128, 4096, 10000.0) == pytest.approx(2 * math.pi * 10 ** (4 * 92 / 128))
    # Clipped to [0, d]: a tiny base sees every period, a tiny length none.
    assert critical_dimension(64, 4096, 2.0) == 64
    # Every pair turns within training: no unseen angle, no bound (not 2 pi theta < L_train).
    assert critical_dimension(128, 4096, 500.0) == 128
    assert critical_length(128, 4096, 500.0) == math.inf
    assert critical_dimension(64, 4, 10000.0) == 0


def test_decay_table_rows():
    rows = decay_table(128, [10000.0, 500.0], [0, 5])
    assert rows[0] == {"distance": 0.0, "theta=10000": 32.5, "theta=500": 32.5}
    assert rows[1]["theta=10000"] == pytest.approx(20.85, abs=0.006)


def test_plot_decay_writes_a_png_atomically(tmp_path):
    path = str(tmp_path / "decay.png")
    assert plot_decay(path, 64, [10000.0, 500.0], 300) == path
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.listdir(tmp_path) == ["decay.png"]


def test_bad_inputs():
    with pytest.raises(ConfigError, match="even head dim"):
        rope_decay_curve([0], 63)
    with pytest.raises(ConfigError, match="theta=1"):
        critical_dimension(64, 512, 1.0)


def test_decay_report_writes_no_bound_as_null_and_none(tmp_path):
    from posjax import fileio
    from posjax.results.analysis import decay_report

    decay_report(dim=128, thetas=[500.0, 10000.0], max_distance=600, train_len=4096,
                 output=str(tmp_path / "decay"))
    critical = fileio.read_json(tmp_path / "decay.json")["critical"]
    assert critical[0]["critical_length"] is None and critical[1]["critical_length"] > 4096
    assert "| 500 | 128 | none |" in (tmp_path / "decay.md").read_text()


@pytest.mark.parametrize("suffix", ["", ".png", ".md", ".json"])
def test_analyze_decay_output_with_or_without_a_suffix_writes_the_three_files(tmp_path, capsys,
                                                                               suffix):
    """`--output=DIR/decay.png` wrote decay.png.png, decay.png.md and decay.png.json."""
    from posjax.launch import cli

    assert cli.main(["analyze", "decay", "--dim=16", "--theta=100", "--max_distance=64",
                     "--train_len=32", f"--output={tmp_path / 'decay'}{suffix}"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decay.json", "decay.md", "decay.png"]
    assert capsys.readouterr().out.split() == [str(tmp_path / f"decay.{s}")
                                               for s in ("png", "md", "json")]
