"""The command line's one-line errors: each names the problem and the fix, with no traceback,
and leaves nothing behind."""

from __future__ import annotations

import pytest

from posjax import cli


def _only_line(capsys, argv: list[str]) -> str:
    """The whole of stderr after `posjax ARGV` exits 2, which must be one line."""
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    return err.strip()


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_a_config_file_without_get_config_is_one_line_naming_it(tmp_path, capsys, command):
    config = tmp_path / "noget.py"
    config.write_text("DEFAULTS = {}\n")
    workdir = tmp_path / "run"
    assert _only_line(capsys, [command, f"--config={config}:smoke", f"--workdir={workdir}"]) \
        == (f"posjax {command}: error: config file {config} defines no get_config(arg): it "
            "must define get_config(arg) returning the run's ml_collections.ConfigDict")
    assert not workdir.exists()
    assert config.read_text() == "DEFAULTS = {}\n"
