"""`posjax COMMAND --help` and `posjax list`: what a new user reads first."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from absl import flags

from posjax import config as configlib
from posjax import encoders
from posjax.config import load_config_module
from posjax.launch import cli, discover, sweep
from posjax.models.layers import ModelConfig, config_fields

CONFIG_FILES = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.py"))
REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_command_has_help_with_its_flags_defaults_and_an_example(command, flag, capsys):
    assert cli.main([command, flag]) == 0
    text = capsys.readouterr().out
    fv = flags.FlagValues()
    cli.COMMANDS[command].define(fv)
    assert text.startswith(f"usage: posjax {command}")
    for name in fv:
        assert f"  --{name} (" in text, name
    assert f"example:\n  posjax {command}" in text


@pytest.mark.parametrize("argv", [["--help"], ["-h"], []])
def test_posjax_help_names_every_command_with_what_it_does(argv, capsys):
    assert cli.main(argv) == (0 if argv else 2)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "usage: posjax {train|sweep|extrapolate|plot|report|analyze|list} [flags]"
    for name, command in cli.COMMANDS.items():
        what = command.summary.split("; ")[0].rstrip(".")
        assert sum(line.split() == [name, *what.split()] for line in lines) == 1, name
    assert lines[-1] == "posjax COMMAND --help: its flags, their defaults and an example"


def test_list_without_a_topic_shows_each_topic_and_what_it_lists(capsys):
    assert cli.main(["list"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.splitlines() == [
        "usage: posjax list TOPIC, one of:",
        "  encodings    Every registered encoding: what it computes, its source, sites and "
        "hyperparameters.",
        "  datasets     The common config.data fields, then every data kind with the fields "
        "it declares.",
        "  evaluations  Every evaluation `posjax extrapolate --eval=NAME` runs, with its "
        "options.",
        "  configs      Every config file: its summary, its args with defaults, its sizes and "
        "studies.",
        "  fields       Every field of the model, train and eval sections: its default and "
        "what it means.",
        "  studies      Every study folder and how to reproduce it, and the config files' named "
        "studies.",
        "  attention    Every attention kernel (model.attention): its sites, where it runs and "
        "what fits it.",
        "  pretrained   Every Hugging Face model_type `posjax extrapolate --pretrained` loads: "
        "what it builds.",
        "", *discover.QUICK_START]
    assert set(discover.LISTINGS) == {"encodings", "datasets", "evaluations", "configs",
                                      "fields", "studies", "attention", "pretrained"}


def test_list_pretrained_names_every_family_with_what_it_builds(capsys):
    from posjax.pretrained import FAMILIES

    assert cli.main(["list", "pretrained"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for name, family in FAMILIES.items():
        assert family.about and lines[lines.index(name) + 1].startswith(
            "  " + family.about[:40]), name
    assert "  accepted hidden_act: silu" in lines


def test_list_with_two_topics_is_one_line(capsys):
    assert cli.main(["list", "configs", "studies"]) == 2
    assert capsys.readouterr().err == (
        "posjax list: error: give one topic: posjax list "
        "[encodings|datasets|evaluations|configs|fields|studies|attention|pretrained]\n")


def test_help_shows_defaults_as_a_user_types_them(capsys):
    cli.main(["sweep", "--help"])
    text = capsys.readouterr().out
    assert "--parallel (default: 1)" in text and "--extrapolate (default: true)" in text
    # sweep --status reads the folder's sweep.json: --config was marked required alone
    assert "--config (required, but not with --status)" in text
    assert "--workdir (required)" in text
    cli.main(["train", "--help"])
    assert "--config (required)\n" in capsys.readouterr().out


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_help_text_has_no_runs_of_spaces_inside_a_line(command):
    """--grid's help read "--grid=seq_len=64,128;     repeat this option ...": absl's own
    words come after a newline and an indent, which the wrapping kept as spaces."""
    for line in cli.help_text(command).splitlines():
        assert "  " not in line.strip(), line


def test_help_comes_before_any_check_of_the_other_flags(capsys):
    # without --config, train would fail with "--config is required"
    assert cli.main(["train", "--workdir=/nonexistent/x", "--help"]) == 0
    assert "usage: posjax train" in capsys.readouterr().out


def test_list_encodings_gives_every_name_its_sites_and_hyperparameters(capsys):
    assert cli.main(["list", "encodings"]) == 0
    text = capsys.readouterr().out
    for name in encoders.names():
        encoding = encoders.get(name)
        assert f"\n{name}\n" in f"\n{text}", name
        assert f"sites: {', '.join(encoding.sites()) or 'none'}" in text
    for field in dataclasses.fields(type(encoders.get("rope"))):
        assert f"{field.name}=" in text
    assert "rope\n    RoPE (Su et al. 2021)" in text
    # each description is its docstring's first paragraph, whole
    assert ("sinusoidal\n    Fixed sinusoids (Vaswani et al. 2017): x + sinusoidal(pos, "
            "d_model, base, layout, spacing).\n") in text


def test_list_shows_the_quick_start_the_tiny_size_and_the_smoke_study(capsys):
    assert cli.main(["list", "configs"]) == 0
    configs = capsys.readouterr().out
    assert configs.startswith("\n".join(discover.QUICK_START))
    assert ("sizes (size=NAME; the bare word smoke is size=smoke, the one for a quick try): "
            "smoke, main,") in configs
    assert cli.main(["list", "studies"]) == 0
    studies = " ".join(capsys.readouterr().out.split())  # undo the wrapping
    assert ("configs/lm.py studies (posjax sweep --config=configs/lm.py:study=NAME[,smoke] "
            "--workdir=DIR), runs each: main (7),") in studies
    assert "smoke (2)" in studies
    quick = [line.split() for line in discover.QUICK_START if "posjax " in line]
    assert [words[:2] for words in quick] == [["posjax", "sweep"], ["posjax", "train"],
                                             ["posjax", "train"], ["posjax", "plot"]]
    for words in quick[:3]:  # each a command line its command takes, at the tiny size
        parsed = cli.COMMANDS[words[1]].parse(words[2:])
        if words[1] == "sweep":  # its runs' configs: a study's arg alone names no one run
            path, _, arg = parsed.spec.partition(":")
            configs = [run.config for run in sweep.expand(path, arg)]
        else:
            configs = [parsed.config]
        assert [c.model.num_layers for c in configs] == [1] * len(configs)


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.name)
def test_list_configs_gives_each_files_args_with_defaults(path, capsys):
    assert cli.main(["list", "configs"]) == 0
    text = " ".join(capsys.readouterr().out.split())  # undo the wrapping
    module = load_config_module(str(path))
    assert path.name in text
    for key, value in module.DEFAULTS.items():
        assert f"{key}={value!r}" in text, key


def test_list_configs_in_a_project_with_its_own_configs_folder_lists_posjaxs_too(
        tmp_path, monkeypatch, capsys):
    """Run from a project with a configs/ folder of its own, `posjax list configs` listed
    that folder's files in place of posjax's, and with --config=configs/exp.py that file
    twice."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "exp.py").write_text(
        '"""A project\'s own config."""\n\ndef get_config(arg=""):\n    return None\n')
    monkeypatch.chdir(tmp_path)
    assert cli.main(["list", "configs", "--config=configs/exp.py"]) == 0
    files = [line for line in capsys.readouterr().out.splitlines()
             if line.endswith(".py") and not line.startswith(" ")]
    assert files == ["configs/exp.py", *(str(path) for path in CONFIG_FILES)]
    assert cli.main(["list", "studies"]) == 0
    assert f"{REPO / 'experiments' / 'main'}\n    The main job" in capsys.readouterr().out


def test_list_studies_names_each_study_and_how_to_reproduce_it(capsys):
    assert cli.main(["list", "studies"]) == 0
    text = capsys.readouterr().out
    assert "experiments/main\n    The main job" in text
    assert "reproduce: bash experiments/main/commands.sh" in text


def test_list_datasets_shows_each_kinds_own_fields(capsys):
    assert cli.main(["list", "datasets"]) == 0
    text = capsys.readouterr().out
    grid = text[text.index("\ngrid2d\n"):text.index("\nlocal_text\n")]
    assert "task = 'row_col'" in grid and "grid_size = 8" in grid and "text_glob" not in grid
    assert "    tokenizer = 'bytes'" in text.split("\nalgorithmic\n")[0]


def test_an_unknown_listing_is_one_line_with_the_valid_ones(capsys):
    assert cli.main(["list", "encodigns"]) == 2
    err = capsys.readouterr().err
    assert err == ("posjax list: error: unknown listing 'encodigns' (did you mean "
                   "'encodings'?); valid: attention, configs, datasets, encodings, "
                   "evaluations, fields, pretrained, studies\n")


def test_help_into_a_pipe_closed_early_is_no_error():
    """`posjax train --help | head -1`: the reader stops early; no BrokenPipe traceback."""
    process = subprocess.Popen([sys.executable, "-m", "posjax", "train", "--help"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # before the help is written: every write meets a closed pipe
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0 and err == b"", err.decode()[-2000:]


def test_list_fields_gives_every_model_train_and_eval_field_its_default_and_meaning(capsys):
    assert cli.main(["list", "fields"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # the defaults read as configs/lm.py's own (d_model 256 where its runs have 128): said
    assert "configs/lm.py's default size: d_model 128, 2 layers, learning rate 0.002)" in lines[0]
    for section, declared in (("model", configlib.MODEL_FIELDS),
                              ("train", configlib.TRAIN_FIELDS),
                              ("eval", configlib.EVAL_FIELDS)):
        assert f"config.{section} (--config.{section}.KEY=VALUE overrides one)" in lines
        for key, field in declared.items():
            assert field.meaning and "\n" not in field.meaning, key
            assert f"    {key} = {field.default!r}: {field.meaning}" in lines, key
    assert "    optimizer = 'adamw': an optax optimizer by name " in "\n".join(lines)
    # every field the model reads is described, placeholders included
    described = {*configlib.MODEL_FIELDS, *configlib.MODEL_PLACEHOLDERS}
    assert config_fields(ModelConfig) == described


def test_helpfull_adds_every_config_field_with_its_default_and_meaning(capsys):
    assert cli.main(["train", "--helpfull"]) == 0
    text = capsys.readouterr().out
    assert "--workdir" in text and "    learning_rate = 0.001: peak learning rate" in text
    assert cli.main(["plot", "--helpfull"]) == 0  # no config: its flags only
    assert "learning_rate" not in capsys.readouterr().out


def test_analyze_without_an_analysis_names_the_ones_there_are(capsys):
    """`posjax analyze` alone said "unknown analysis ''"."""
    assert cli.main(["analyze"]) == 2
    assert capsys.readouterr().err.strip() == (
        "posjax analyze: error: give an analysis: posjax analyze decay")
