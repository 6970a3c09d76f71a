"""The command line's one-line errors: each names the problem and the fix, with no traceback,
and leaves nothing behind."""

from __future__ import annotations

import errno
import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from posjax import fileio
from posjax.config import configured
from posjax.errors import ConfigError
from posjax.launch import cli

LM = str(Path(__file__).resolve().parents[1] / "configs" / "lm.py")


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


NOT_WRITABLE = ("posjax cannot write there: point POSJAX_DATA_DIR (datasets), --workdir (runs) "
                "or --output (plots and results) at a writable folder, then re-run the command")
NOT_A_FOLDER = ("a file is where posjax writes a folder: give a folder's path (or move that "
                "file), then re-run the command")
UNREACHABLE = ("cannot reach it: check the address and that it is up and reachable from this "
               "machine, then re-run the same command")


@pytest.mark.parametrize(("error", "fix"), [
    (errno.ENOSPC, "free space on that disk, then re-run the same command to resume"),
    (errno.EDQUOT, "your disk quota there is used up: free some of it or point --workdir / "
                   "POSJAX_DATA_DIR at a disk with room, then re-run the same command to resume"),
    (errno.EFBIG, "a limit on a file's size stops the write (`ulimit -f`, or the file "
                  "system's largest file): raise it or point --workdir / --output at another "
                  "disk, then re-run the same command to resume"),
    (errno.EROFS, NOT_WRITABLE),
    (errno.EACCES, NOT_WRITABLE),
    (errno.EPERM, NOT_WRITABLE),
    (errno.ENOENT, "it is missing: create it or fix the path (was it moved or unmounted?), then "
                   "re-run the same command"),
    (errno.EEXIST, NOT_A_FOLDER),  # plot --output=FILE
    (errno.ENOTDIR, NOT_A_FOLDER),  # plot --output=FILE/x
    (errno.EISDIR, "a folder is where posjax writes a file: give a file's path (--output=FILE "
                   "names the file itself), then re-run the command"),  # --output=FOLDER
    (errno.ECONNREFUSED, UNREACHABLE),
    (errno.EHOSTUNREACH, UNREACHABLE),
    (errno.EIO, None),
], ids=lambda e: errno.errorcode[e] if isinstance(e, int) else "fix")
def test_each_os_error_is_one_line_with_its_own_fix(tmp_path, capsys, monkeypatch, error, fix):
    target = tmp_path / "run" / "config.json"

    def fail(path, *args, **kwargs):
        raise OSError(error, os.strerror(error), str(path))

    monkeypatch.setattr(fileio, "_atomic", fail)
    line = _only_line(capsys, ["train", f"--config={LM}:smoke", f"--workdir={target.parent}"])
    what = f"posjax train: error: {os.strerror(error)} ({target})"
    assert line == (f"{what}: {fix}" if fix else what)
    assert not target.exists()


def test_a_connection_error_without_an_errno_is_one_line_saying_it_cannot_reach_it(
        tmp_path, capsys, monkeypatch):
    def fail(path, *args, **kwargs):
        raise ConnectionResetError("the storage server went away\nmore detail")

    monkeypatch.setattr(fileio, "_atomic", fail)
    assert _only_line(capsys, ["train", f"--config={LM}:smoke",
                               f"--workdir={tmp_path}/run"]) == (
        f"posjax train: error: the storage server went away: {UNREACHABLE}")


CUDA_INSTALL = ("pip install -c constraints.txt -c constraints-gpu.txt -e '.[gpu]' in the "
                "checkout (CUDA 13: NVIDIA driver 580 or newer)")


INSTALLS = {"cuda": CUDA_INSTALL, "gpu": f"NVIDIA: {CUDA_INSTALL}; AMD: JAX's ROCm plugin",
            "tpu": "pip install -c constraints.txt 'jax[tpu]'",
            "metal": "see https://docs.jax.dev/en/latest/installation.html"}


def test_each_missing_backend_names_its_install():
    assert {name: cli.JAX_PLATFORM_INSTALLS.get(name, cli._JAX_INSTALL_GUIDE)
            for name in INSTALLS} == INSTALLS


# A fresh process each: the check restarts JAX's backends. One backend alone, and one missing
# from a list whose other backend starts.
@pytest.mark.parametrize(("platform", "missing"), [("cuda", "cuda"), ("cpu,tpu", "tpu")])
def test_jax_platforms_naming_a_backend_this_machine_lacks_is_one_line(tmp_path, platform,
                                                                       missing):
    from jax.extend import backend

    if {"cuda", "rocm", "tpu", "METAL"} & set(backend.backends()):
        pytest.skip(f"this machine has an accelerator: JAX_PLATFORMS={platform} may work here")
    workdir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "posjax", "train", f"--config={LM}:smoke",
         f"--workdir={workdir}"], env={**os.environ, "JAX_PLATFORMS": platform},
        capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", (
        f"posjax train: error: JAX_PLATFORMS={platform}: {missing} is not available here "
        f"(available: {', '.join(sorted(backend.backends()))}); unset JAX_PLATFORMS or "
        f"install it: {INSTALLS[missing]}\n"))
    assert not workdir.exists()


def test_a_jax_platforms_that_works_is_no_error_and_leaves_jax_as_it_was(monkeypatch):
    import jax
    from jax.extend import backend

    before = (jax.config.jax_platforms, sorted(backend.backends()))
    monkeypatch.setenv("JAX_PLATFORMS", ",".join(before[1]))
    assert cli._unavailable_platform() is None
    assert (jax.config.jax_platforms, sorted(backend.backends())) == before


def test_output_into_a_pipe_its_reader_closed_is_no_error():
    # the reader is gone before the command prints (posjax list encodings | head, head done)
    done = subprocess.Popen([sys.executable, "-m", "posjax", "list", "encodings"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    done.stdout.close()
    assert (done.wait(timeout=120), done.stderr.read()) == (0, "")


# --- one parser for every command -------------------------------------------------------


def test_an_override_may_come_before_its_config():
    parsed = cli._flags(["--config.model.d_model=48", f"--config={LM}:smoke", "--workdir=unused"],
                        cli._define_train, config=True)
    assert parsed.config.model.d_model == 48


def test_positional_args_and_flags_come_in_any_order_and_form(tmp_path, capsys):
    neither = tmp_path / "neither"
    neither.mkdir()
    for argv in (["--output", str(tmp_path / "out"), str(neither)],
                 [str(neither), f"--output={tmp_path / 'out'}"]):
        assert _only_line(capsys, ["plot", *argv]) == (
            f"posjax plot: error: {neither} has neither sweep.json nor config.json nor result "
            "files, nor run folders (sub-folders with a config.json or result files): give "
            "sweep or run directories")
    assert list(tmp_path.iterdir()) == [neither]


def test_a_config_file_that_raises_is_one_line_with_its_message_and_line(tmp_path, capsys):
    config = tmp_path / "picky.py"
    config.write_text("def get_config(arg):\n    raise ValueError('size must be small or big')\n")
    assert _only_line(capsys, ["train", f"--config={config}:huge", f"--workdir={tmp_path}/run"]) \
        == (f"posjax train: error: config file {config}: get_config('huge') raised ValueError: "
            f"size must be small or big, at {config}:2; fix the arg or the file")
    assert not (tmp_path / "run").exists()
    # Raised in a helper the file calls: the line that raised, not the file's call of it.
    (tmp_path / "sizes_helper.py").write_text("def pick(sizes):\n    return max(sizes)\n")
    helped = tmp_path / "helped.py"
    helped.write_text(f"import sys\nsys.path.insert(0, {str(tmp_path)!r})\n"
                      "from sizes_helper import pick\n\n"
                      "def get_config(arg):\n    return pick([])\n")
    line = _only_line(capsys, ["train", f"--config={helped}:", f"--workdir={tmp_path}/run"])
    assert line.startswith(f"posjax train: error: config file {helped}: get_config('') raised "
                           "ValueError: max() ")
    assert line.endswith(f", at {tmp_path / 'sizes_helper.py'}:2; fix the arg or the file")


def test_a_sweep_checks_its_overrides_against_every_run_before_any_starts(tmp_path, capsys):
    # rope's runs have encoding.theta, alibi's do not
    sweepdir = tmp_path / "sweep"
    line = _only_line(capsys, ["sweep", f"--config={LM}:smoke,study=smoke",
                               "--config.encoding.theta=500", f"--workdir={sweepdir}"])
    assert line.startswith("posjax sweep: error: --config.encoding.theta: config.encoding has "
                           "no key 'theta'")
    assert not sweepdir.exists()


@pytest.mark.parametrize(("override", "expected"), [
    ("--config.train.learning_rate=fast", "config.train.learning_rate takes a number (float), "
     "not 'fast'; e.g. --config.train.learning_rate=0.002 (its value now)"),
    ("--config.model.num_layers=2.5", "config.model.num_layers takes a whole number (int), "
     "not '2.5'; e.g. --config.model.num_layers=1 (its value now)"),
    ("--config.model.embed_scale=maybe", "config.model.embed_scale takes true or false, not "
     "'maybe'; e.g. --config.model.embed_scale=false (its value now)"),
])
def test_an_override_of_the_wrong_type_names_the_key_and_the_type_it_takes(
        tmp_path, capsys, override, expected):
    assert _only_line(capsys, ["train", f"--config={LM}:smoke", override,
                               f"--workdir={tmp_path}/run"]) == (
        f"posjax train: error: {override}: {expected}")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("text", "value"), [("yes", True), ("On", True), ("1", True),
                                          ("no", False), ("off", False), ("0", False)])
def test_a_boolean_override_takes_the_words_the_arg_takes(text, value):
    """qk_norm=yes in the arg worked, --config.model.qk_norm=yes was refused (absl: true/false)."""
    from posjax.config import configured

    assert configured(f"{LM}:smoke,qk_norm={text}", []).model.qk_norm is value
    assert configured(f"{LM}:smoke", [f"--config.model.qk_norm={text}"]).model.qk_norm is value
    # a switch declared unset (mlp_bias: None, the MLP's own) takes them too: "no" was refused
    assert configured(f"{LM}:smoke", [f"--config.model.mlp_bias={text}"]).model.mlp_bias is value


def test_an_override_of_a_field_unset_with_no_type_is_one_line_naming_the_arg(capsys, tmp_path):
    """--config.encoding.bidirectional=true (t5's, None: from the model) was a traceback."""
    assert _only_line(capsys, ["train", f"--config={LM}:smoke,encoding=t5",
                               "--config.encoding.bidirectional=true",
                               f"--workdir={tmp_path}/run"]) == (
        "posjax train: error: --config.encoding.bidirectional=true: config.encoding."
        "bidirectional is unset (None) with no type to read 'true' as: give it in the "
        "config's arg instead (FILE:smoke,encoding=t5,bidirectional=true)")


def test_the_status_of_a_missing_sweep_folder_offers_the_nearest_one(tmp_path, capsys,
                                                                     monkeypatch):
    fileio.write_json(tmp_path / "runs" / "smoke" / "sweep.json", {"runs": {}})
    (tmp_path / "runs" / "notes").mkdir()
    monkeypatch.chdir(tmp_path)
    assert _only_line(capsys, ["sweep", "--status", "--workdir=runs/smok"]) == (
        "posjax sweep: error: runs/smok does not exist (did you mean runs/smoke?): give the "
        "--workdir of a sweep (posjax sweep)")


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_every_command_rejects_an_unknown_flag_in_the_same_one_line(command, capsys):
    """It said "Unknown command line flag 'lengths'", naming neither the flags there are nor
    the one meant."""
    line = _only_line(capsys, [command, "--bogus=1"])
    fv = cli.flags.FlagValues()
    cli.COMMANDS[command].define(fv)
    assert line == (f"posjax {command}: error: unknown flag --bogus; valid: "
                    + ", ".join(sorted(f"--{name}" for name in fv)))


def test_an_unknown_flag_near_a_valid_one_names_it():
    with pytest.raises(ConfigError, match=r"^unknown flag --lenghts \(did you mean "
                       r"'--lengths'\?\); valid: --attention, "):
        cli.COMMANDS["extrapolate"].parse(["--lenghts=3"])


@pytest.mark.parametrize(("typed", "arg"), [
    ("--encoding=alibi", "smoke,encoding=alibi"),  # the arg's own encoding=rope replaced
    ("--steps=3", "encoding=rope,smoke,steps=3"),
    ("--smoke", "encoding=rope,smoke"),
    ("--theta=5e5", "encoding=rope,smoke,theta=5e5"),  # an encoding hyperparameter
    ("--learning_rate=1e-3", "encoding=rope,smoke,learning_rate=1e-3")])  # a train field
def test_a_config_arg_typed_as_a_flag_is_shown_in_the_config_arg(typed, arg):
    """`posjax train --config=configs/lm.py:encoding=rope,smoke --encoding=alibi` said
    "unknown flag --encoding (did you mean '--coordinator'?)"."""
    name = typed[2:].split("=")[0]
    with pytest.raises(ConfigError) as refused:
        cli.COMMANDS["train"].parse([f"--config={LM}:encoding=rope,smoke", "--workdir=w", typed])
    assert str(refused.value) == (f"unknown flag --{name}: {name} is a config arg, not a flag: "
                                  f"give it in --config's arg, --config={LM}:{arg}")


def test_a_stage_count_set_as_a_train_field_names_the_config_arg():
    """`--config.train.steps=5` said "config.train has no key 'steps' (did you mean
    'stages'?)", never the steps=N arg that sets them."""
    with pytest.raises(ConfigError, match=r"^--config.train.steps: config.train has no key "
                       r"'steps': each of train.stages is \(seq_len, batch_size, steps\); give "
                       r"steps=N in --config's arg"):
        configured(f"{LM}:smoke", ["--config.train.steps=5"])


def test_config_takes_its_value_after_a_space_like_every_flag():
    parsed = cli._flags(["--config", f"{LM}:smoke", "--config.model.d_model=48",
                         "--workdir", "unused"], cli._define_train, config=True)
    assert (parsed.config_spec, parsed.flags.workdir) == (f"{LM}:smoke", "unused")
    assert parsed.config.model.d_model == 48


@pytest.mark.parametrize("command", ["train", "sweep", "extrapolate"])
def test_a_stray_argument_to_a_command_of_flags_only_is_one_line(tmp_path, capsys, command):
    workdir = tmp_path / "run"
    usage = cli.COMMANDS[command].usage
    config = [f"--config={LM}:smoke"] if cli.COMMANDS[command].takes_config else []
    assert _only_line(capsys, [command, "smoke", *config, f"--workdir={workdir}"]) == (
        f"posjax {command}: error: unexpected argument 'smoke'; usage: {usage}")
    assert not workdir.exists()


@pytest.mark.parametrize(("argv", "message"), [
    # an empty --workdir trained (or planned a sweep) into the current folder, exit 0
    # (a flag the command requires cannot be left out: the line says only to give one)
    (["train", f"--config={LM}:smoke", "--workdir="], "--workdir= gives no value: give one"),
    (["sweep", f"--config={LM}:smoke", "--workdir=", "--print_commands"],
     "--workdir= gives no value: give one"),
    (["extrapolate", "--workdir="],
     "--workdir= gives no value: give one, or leave it out and give --pretrained"),
    (["extrapolate", "--pretrained="],
     "--pretrained= gives no value: give one, or leave it out and give --workdir"),
    # an empty --only ran every run; an empty --output wrote the default files
    (["sweep", f"--config={LM}:smoke", "--workdir=S", "--only="], "--only= gives no value"),
    (["plot", "S", "--output="], "--output= gives no value"),
    (["report", "S", "--output="], "--output= gives no value"),
    (["sweep", f"--config={LM}:smoke", "--workdir=S", "--grid=theta=1", "--grid="],
     "--grid= gives no value"),
    (["extrapolate", "--workdir=S", "--lengths=128,,512"],
     "--lengths=128,,512 has an empty value: write each value once, with one comma between two"),
    # it said "--config= is a folder"
    (["train", "--config=", "--workdir=S"], "--config= gives no value: give FILE:ARGS, e.g. "
     "--config=configs/lm.py:smoke (posjax list configs)"),
])
def test_a_flag_given_an_empty_value_is_one_line_before_any_work(tmp_path, monkeypatch, capsys,
                                                                  argv, message):
    monkeypatch.chdir(tmp_path)
    line = _only_line(capsys, argv)
    assert line.endswith(message if ":" in message or "," in message else
                         f"{message}: give one, or leave the flag out"), line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_a_missing_workdir_is_one_line_with_the_usage(command, capsys):
    assert cli.COMMANDS[command].required == ["workdir"]
    assert _only_line(capsys, [command]) == (
        f"posjax {command}: error: --workdir is required; usage: {cli.COMMANDS[command].usage}")


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_a_missing_config_is_the_same_one_line_for_train_and_sweep(tmp_path, command, capsys):
    assert _only_line(capsys, [command, f"--workdir={tmp_path}/run"]) == (
        f"posjax {command}: error: --config is required, e.g. --config=configs/lm.py:smoke "
        "(posjax list configs)")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_a_config_file_that_fails_to_load_is_one_line(tmp_path, capsys, command, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # as Python runs by default
    config = tmp_path / "broken.py"
    config.write_text("import not_a_module_anywhere\n\ndef get_config(arg):\n    return None\n")
    line = _only_line(capsys, [command, f"--config={config}:x", f"--workdir={tmp_path}/run"])
    assert line.startswith(f"posjax {command}: error: config file {config}: no module named "
                           "'not_a_module_anywhere' among the installed packages or in ")
    assert line.endswith("put its folder on PYTHONPATH, or pip install it")
    assert sorted(tmp_path.iterdir()) == [config]


def test_a_get_config_returning_no_configdict_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # no __pycache__ beside the file
    config = tmp_path / "plain.py"
    config.write_text("def get_config(arg):\n    return {'model': {}}\n")
    assert _only_line(capsys, ["train", f"--config={config}:x", f"--workdir={tmp_path}/run"]) \
        == (f"posjax train: error: config file {config}: get_config('x') returned a dict, not "
            "an ml_collections.ConfigDict; fix the file")
    assert sorted(tmp_path.iterdir()) == [config]


BROKEN_STEP = '''
import jax
import jax.numpy as jnp
from posjax.train import trainer

@jax.jit
def _reshape(x):
    return x.reshape(-1, 7, 5)

def broken(state, rest, batch, **static):
    return _reshape(batch["inputs"])

trainer.train_step = trainer.train_steps = broken
'''


def test_a_run_failing_inside_jit_records_the_error_itself(tmp_path, data_flags):
    """A run whose step raises inside a jitted function (the trainer's step replaced by one
    at interpreter start) ends with `failed: Type: message` as its last line, which is what
    a sweep records in sweep.json and prints, not JAX's note on its filtered frames."""
    from posjax.launch import executors

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BROKEN_STEP)
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    job = executors.Job("broken", str(tmp_path / "run"), (
        ("posjax", "train", f"--config={LM}:smoke,seq_len=16", f"--workdir={tmp_path / 'run'}",
         *data_flags),))
    outcome = executors.run_job(job, env)
    assert outcome.status == "failed"
    assert outcome.error.startswith("posjax train: failed: TypeError: cannot reshape array"), \
        outcome.error
    # and the line of the user's code it came from: their reshape, inside jit
    assert outcome.error.endswith(f", at {site / 'sitecustomize.py'}:8"), outcome.error


def test_a_failure_names_the_users_line_only_where_their_code_raised(tmp_path, monkeypatch,
                                                                     capsys):
    """An encoding of the user's that raised ended in `failed: ValueError: ...` naming neither
    their file nor the encoding; an error of posjax's own code names no user line."""
    from posjax.errors import in_user_code

    mine = tmp_path / "mine.py"
    mine.write_text("def bias():\n    raise ValueError('broken on purpose')\n")
    namespace: dict = {}
    exec(compile(mine.read_text(), str(mine), "exec"), namespace)
    with pytest.raises(ValueError) as theirs:
        namespace["bias"]()
    assert in_user_code(theirs.value) == f", at {mine}:2"
    # raised in posjax's code (here by int(), which has no Python frame of this file)
    monkeypatch.setitem(cli.discover.LISTINGS, "encodings",
                        functools.partial(int, "encodings", base=10))
    assert cli.main(["list", "encodings"]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        "posjax list: failed: ValueError: invalid literal for int() with base 10: 'encodings'")


def test_a_file_given_as_a_run_or_sweep_folder_is_named_a_file(tmp_path, capsys):
    """`posjax plot afile` said afile does not exist (a .json file is a result to plot)."""
    afile = tmp_path / "afile"
    afile.write_text("hi\n")
    assert _only_line(capsys, ["plot", str(afile)]) == (
        f"posjax plot: error: {afile} is a file, not a folder nor a result file (.json, as "
        "posjax extrapolate writes): give a sweep or run directory, or a result file")


@pytest.mark.parametrize("argv, line", [
    (["extrapolate", "--workdir=RUN", "--eval=passkey", "--depths=0.5,0.5"],
     "--depths=0.5,0.5 gives 0.5 twice: give each value once"),
    (["extrapolate", "--workdir=RUN", "--lengths=64,128,64"],
     "--lengths=64,128,64 gives 64 twice: give each value once"),
    (["train", f"--config={LM}:smoke", "--workdir=RUN", "--seeds=0,1,0"],
     "--seeds=0,1,0 gives 0 twice: give each value once"),
])
def test_a_value_given_twice_in_a_list_flag_is_one_line(tmp_path, capsys, monkeypatch, argv,
                                                        line):
    """--depths=0.5,0.5 drew two heatmap rows labelled 50%."""
    monkeypatch.chdir(tmp_path)
    assert _only_line(capsys, argv).endswith(f"error: {line}")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_a_setting_given_twice_is_one_line_not_the_last_one_silently(tmp_path, capsys, command):
    """`encoding=rope,smoke,encoding=alibi` trained ALiBi, and an arg's learning_rate lost to
    --config.train.learning_rate, each without a word (a sweep merged the repeated key too)."""
    extra = ["--print_commands"] if command == "sweep" else []
    workdir = f"--workdir={tmp_path / 'run'}"
    assert _only_line(capsys, [command, f"--config={LM}:encoding=rope,smoke,encoding=alibi",
                               workdir, *extra]) == (
        f"posjax {command}: error: config arg 'encoding' is given twice (encoding=rope and "
        "encoding=alibi): give it once (a config file that adds it to the arg it passes on: "
        "configlib.with_defaults(arg, encoding=...) lets the arg's own win)")
    assert _only_line(capsys, [command, f"--config={LM}:encoding=rope,smoke,learning_rate=5e-3",
                               "--config.train.learning_rate=1e-3", workdir, *extra]) == (
        f"posjax {command}: error: train.learning_rate is given twice, as the config arg's "
        "learning_rate=5e-3 and as --config.train.learning_rate=1e-3: give it once")
    assert not (tmp_path / "run").exists()
    # Either alone is one setting.
    for given in (["--config.train.learning_rate=1e-3"], []):
        assert cli.main(["train", f"--config={LM}:encoding=rope,smoke,steps=2", *given,
                         "--extrapolate=false", f"--workdir={tmp_path / str(len(given))}"]) == 0


RETRIEVAL = str(Path(LM).with_name("retrieval.py"))


@pytest.mark.parametrize(("config", "flags", "message"), [
    # inf was saved as null (JSON has no infinity): the run could then be neither scored nor
    # resumed; 64.7 trained at 64
    (f"{LM}:smoke,theta=inf", [], "theta='inf' is not a finite number: give theta a number"),
    (f"{LM}:smoke,seq_len=64.7", [], "seq_len='64.7' is not a whole number: give seq_len an "
                                     "integer"),
    (f"{LM}:smoke", ["--config.encoding.theta=inf"],
     "--config.encoding.theta=inf: give a finite number"),
    # a traceback from JAX after config.json was written
    (f"{LM}:smoke", ["--config.train.seed=-1"], "train.seed=-1 must be from 0 to 2147483647"),
    # refused only after training (--extrapolate), or scored with another setting
    (f"{LM}:smoke", ["--config.eval.max_tokens=-5"], "eval.max_tokens=-5 is not a whole "
                                                     "number of tokens >= 1"),
    (f"{LM}:smoke", ["--config.eval.group_factor=0"],
     "eval.group_factor=0 is not a whole number >= 1"),
    (f"{LM}:smoke", ["--config.eval.stride=-1"], "eval.stride=-1 is not a whole number >= 0"),
    (f"{LM}:smoke", ["--config.eval.protocol=bogus"],
     "eval.protocol='bogus' is not one of nonoverlapping, sliding"),
    (f"{LM}:smoke", ["--config.eval.protocol=sliding", "--config.eval.stride=1000"],
     "eval.stride=1000 is longer than the evaluation length 128: give a stride from 1 to 128"),
    # settings that change nothing where they were given, recorded in config.json
    (f"{LM}:smoke,stride=32", [], "eval.stride=32 moves sliding windows, and "
     "eval.protocol='nonoverlapping' scores none: give protocol=sliding too, or drop stride"),
    (f"{LM}:smoke,pose_chunks=3", [], "train.pose_chunks=3 cuts PoSE's positions, and "
     "train.pose=0 trains without PoSE: give pose=N (its target length) too, or drop "
     "pose_chunks"),
    (f"{LM}:smoke,pooling=mean", [], "model.pooling='mean' is a classifier's pooled "
     "representation, and model kind 'causal_lm' pools nothing: drop pooling"),
    (f"{LM}:smoke,linear_feature=cos", [], "model.linear_feature='cos' is linear attention's "
     "feature map, and model.attention='auto' is softmax's: give attention=linear too, or drop "
     "linear_feature"),
    (f"{LM}:smoke", ["--config.eval.learned_extension=bogus"],  # on a run with no table
     "eval.learned_extension='bogus', the default of posjax extrapolate's "
     "--learned_extension: unknown learned_extension 'bogus'"),
    (f"{LM}:smoke,evals=text@3", ["--config.evals.text.lengths=(100000,)"],
     "config.evals.text scores at most max_tokens=4096 tokens, fewer than its length 100000 "
     "needs: give config.evals.text.max_tokens=100000 or more, or lower its lengths"),
    (f"{LM}:smoke,encoding=learned,learned_extension=bogus", [],
     "eval.learned_extension='bogus', the default of posjax extrapolate's "
     "--learned_extension: unknown learned_extension 'bogus'; valid: hierarchical"),
    (f"{RETRIEVAL}:smoke,encoding=alibi,rope_scaling=yarn:4", [],
     "eval.rope_scaling='yarn:4', the default of posjax extrapolate's --rope_scaling: "
     "--rope_scaling=yarn:4 applies to rotary encodings"),
    # an evaluation while training that failed in a traceback when first due
    (f"{LM}:smoke,evals=text@3", ["--config.evals.text.lengths=(0,)"],
     "config.evals.text.lengths=(0,) is not whole numbers of tokens >= 1"),
    (f"{LM}:smoke,evals=text@3", ["--config.evals.text.max_tokens=-5"],
     "config.evals.text.max_tokens=-5 is not a whole number of tokens >= 1"),
    (f"{LM}:smoke,evals=passkey@3", ["--config.evals.passkey.trials=0"],
     "config.evals.passkey.trials=0 is not a whole number >= 1"),
    # an empty list quietly meant the file's default lengths; a share past 1, text alone
    (f"{LM}:smoke,lengths=", [], "config arg lengths= gives no value: give one or more joined "
                                 "by + (lengths=A+B), or leave it out"),
    (f"{RETRIEVAL}:smoke,text_mix=1.5", [], "data.text_mix=1.5 is a share of the training "
                                            "documents: give one from 0 to 1"),
    (f"{LM}:smoke,evals=text@2+text@3", [], "evals='text@2+text@3' gives text twice"),
    # --seeds replaced the seed the config gave, without a word
    (f"{LM}:smoke,seed=5", ["--seeds=0,1"], "--seeds=0,1 gives each run its train.seed, which "
     "would replace the config's train.seed=5: drop one of them"),
])
def test_a_setting_that_cannot_run_is_one_line_before_the_run_writes(
        tmp_path, capsys, data_flags, config, flags, message):
    workdir = tmp_path / ("run_{seed}" if any(f.startswith("--seeds") for f in flags) else "run")
    line = _only_line(capsys, ["train", f"--config={config}", f"--workdir={workdir}",
                               "--noprogress", *data_flags, *flags])
    assert message in line, line
    assert list(tmp_path.iterdir()) == []


def test_a_config_file_that_is_no_python_file_is_one_line(tmp_path, capsys):
    """A config file without .py ended in an AttributeError traceback (no loader)."""
    config = tmp_path / "myconfig"
    config.write_text("def get_config(arg):\n    return None\n")
    assert _only_line(capsys, ["train", f"--config={config}:smoke",
                               f"--workdir={tmp_path}/run"]) == (
        f"posjax train: error: config file {config} is not a Python file: give a .py file "
        "with get_config(arg) (posjax list configs)")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("override", "message"), [
    ("--config.data.text_glob=/x/*.txt", "--config.data.text_glob is read by dataset "
     "local_text or doc_match, not by dataset=stdlib_text: drop it, or add "
     "--config.data.dataset=local_text"),
    ("--config.data.num_symbols=7", "--config.data.num_symbols is read by dataset algorithmic"),
    # recorded in config.json, read by nothing: the bytes tokenizer trained
    ("--config.data.sentencepiece_model=/x.model", "--config.data.sentencepiece_model is read "
     "by tokenizer sentencepiece, not by tokenizer=bytes: drop it, or add "
     "--config.data.tokenizer=sentencepiece"),
])
def test_a_data_field_the_dataset_never_reads_is_one_line(tmp_path, capsys, override, message):
    """config.json recorded --config.data.text_glob on stdlib_text, which read none of it."""
    line = _only_line(capsys, ["train", f"--config={LM}:smoke", f"--workdir={tmp_path}/run",
                               override])
    assert line.endswith(message) or message in line, line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("override", "message"), [
    # 36 lines: the whole section's values as the "example"
    ("--config.model=3", "--config.model=3: config.model is a section, not a value: set one of "
                         "its fields, e.g. --config.model."),
    # "valid: " and nothing after it
    ("--config.evals.text.lengths=128", "--config.evals.text.lengths: config.evals is empty, "
     "so it has no key 'text' (add entries with the config arg evals=TYPE@EVERY, e.g. "
     "evals=text@100)"),
])
def test_an_override_of_a_section_or_of_an_empty_one_is_one_line(tmp_path, capsys, override,
                                                                  message):
    line = _only_line(capsys, ["train", f"--config={LM}:smoke", f"--workdir={tmp_path}/run",
                               override])
    assert message in line, line


@pytest.mark.parametrize("flag", ["--trials=abc", "--trials=2.5", "--max_tokens=x"])
def test_a_whole_number_flag_given_another_value_says_so(tmp_path, capsys, flag):
    """It was absl's "flag --trials=abc: invalid literal for int() with base 10: 'abc'"."""
    assert _only_line(capsys, ["extrapolate", f"--workdir={tmp_path}", flag]) == (
        f"posjax extrapolate: error: {flag} is not a whole number: give one, e.g. 4")


def test_extrapolate_of_a_sweeps_folder_names_its_runs(tmp_path, capsys):
    """`posjax extrapolate --workdir=runs/smoke` (a sweep's folder) asked "is it a posjax run
    directory?"."""
    for name in ("encoding=alibi", "encoding=rope"):
        fileio.write_json(tmp_path / "runs" / name / "config.json", {})
    fileio.write_json(tmp_path / "sweep.json", {"runs": {}})
    assert _only_line(capsys, ["extrapolate", f"--workdir={tmp_path}"]) == (
        f"posjax extrapolate: error: {tmp_path} is a sweep's folder, not a run's: give one of "
        f"its runs, --workdir={tmp_path / 'runs' / 'encoding=alibi'} (its runs: "
        "encoding=alibi, encoding=rope)")


CONFIGS = Path(LM).parent


@pytest.mark.parametrize(("config", "overrides", "message"), [
    ("lm.py:smoke,lengths=32+32", [], "eval.lengths=(32, 32) gives 32 twice: give each value once"),
    ("lm.py:smoke,evals=text@1", ["--config.evals.text.lengths=32,32"],
     "config.evals.text.lengths=(32, 32) gives 32 twice: give each value once"),
    ("patch2d.py:smoke,test_grid_sizes=12+12", [],
     "test_grid_sizes=(12, 12) gives 12 twice: give each value once"),
    ("text_image.py:smoke,test_grid_sizes=12+12", [],
     "test_grid_sizes=(12, 12) gives 12 twice: give each value once"),
])
def test_a_length_or_grid_side_given_twice_is_one_line_before_any_write(
        tmp_path, capsys, config, overrides, message):
    """Each was scored or built twice, its row repeated in the table and the result file
    (`--lengths=128,128` as a flag was already refused)."""
    workdir = tmp_path / "run"
    assert cli.main(["train", f"--config={CONFIGS / config}", *overrides,
                     f"--workdir={workdir}"]) == 2
    assert capsys.readouterr().err.strip() == f"posjax train: error: {message}"
    assert not workdir.exists()


def test_a_pattern_deeper_than_posjax_builds_is_one_line_not_minutes_of_silence(tmp_path,
                                                                                capsys):
    """layer_pattern=rope*100000 on smoke (as deep as its pattern) built modules for minutes
    with nothing printed."""
    assert cli.main(["train", f"--config={LM}:smoke,layer_pattern=rope*100000",
                     f"--workdir={tmp_path / 'run'}"]) == 2
    assert capsys.readouterr().err.strip().startswith(
        "posjax train: error: model.num_layers=100000 is more than the 1024 layers posjax "
        "builds")


def test_analyze_with_a_word_too_many_names_that_word(capsys):
    """`posjax analyze decay extra` said "unknown analysis 'decay' (did you mean 'decay'?)"."""
    assert cli.main(["analyze", "decay", "extra"]) == 2
    assert capsys.readouterr().err.strip() == (
        "posjax analyze: error: posjax analyze takes one analysis, got decay extra: drop "
        "'extra' (its options are flags: --theta=10000,500000)")


@pytest.mark.parametrize(("given", "message"), [
    ([f"--config={LM}:smoke", "--config.model.num_layers=1", "--config.model.num_layers=3"],
     "--config.model.num_layers is given twice (1 and 3)"),
    ([f"--config={LM}:smoke", f"--config={LM}:smoke,encoding=alibi"],
     f"--config is given twice ({LM}:smoke and {LM}:smoke,encoding=alibi)"),
    ([f"--config={LM}:smoke,layer_pattern=rope(theta=1e4,theta=2e4)"],
     "model.layer_pattern entry 'rope(theta=1e4,theta=2e4)': theta is given twice: give it "
     "once"),
])
def test_a_flag_or_pattern_setting_given_twice_is_one_line(tmp_path, capsys, given, message):
    """Each trained the last value with rc 0, as a key twice in the arg is refused for."""
    assert cli.main(["train", *given, f"--workdir={tmp_path / 'run'}"]) == 2
    assert capsys.readouterr().err.strip().startswith(f"posjax train: error: {message}")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("given", "message"), [
    ([f"--config={LM}:smoke", "--force=maybe"],
     "--force=maybe is not true or false: give --force or --noforce"),
    ([f"--config={LM}:smoke,dataset="],
     "dataset= names no dataset: give one (posjax list datasets), e.g. dataset=stdlib_text"),
    ([f"--config={LM}:smoke", "--config.encoding.name=alibi"],
     "--config.encoding.name=alibi would keep rope's hyperparameters in config.encoding: "
     "choose the encoding in the config's arg instead (FILE:smoke,encoding=alibi)"),
    ([f"--config={LM}:smoke,evals=task@1"],
     "config.evals.task.type=task scores a run's own data, and this run is scored by 'text': "
     "drop config.evals.task, or give a retrieval task"),
])
def test_each_refusal_speaks_of_what_was_given(tmp_path, capsys, given, message):
    """A raw tuple ('Non-boolean argument to boolean flag', 'maybe'), a function's name
    (default_data_config), a hyperparameter of the old encoding with no fix, and a --eval
    flag no one gave were each the whole line."""
    assert cli.main(["train", *given, f"--workdir={tmp_path / 'run'}"]) == 2
    assert capsys.readouterr().err.strip().startswith(f"posjax train: error: {message}")


def test_config_with_no_value_last_is_one_line_naming_it(capsys):
    """`posjax train --config` said "--workdir is required"."""
    assert cli.main(["train", "--workdir=/tmp/nowhere", "--config"]) == 2
    assert capsys.readouterr().err.strip() == (
        "posjax train: error: --config gives no value: give FILE:ARGS, e.g. "
        "--config=configs/lm.py:smoke (posjax list configs)")


def test_help_given_a_value_says_it_takes_none(capsys):
    """`posjax train --help=x` said "unknown flag --help", of a flag every command has."""
    assert cli.main(["train", "--help=x"]) == 2
    assert capsys.readouterr().err.strip() == (
        "posjax train: error: --help takes no value: posjax train --help")


@pytest.mark.parametrize("error", [ConfigError("damaged"), OSError(errno.ENOSPC, "full"),
                                   RuntimeError("bug")])
def test_an_error_while_a_progress_bar_is_open_is_a_line_of_its_own(monkeypatch, capsys,
                                                                     error):
    """A damaged metrics.jsonl found on resume: `... 320/400 [00:00<?, ?step/s]posjax train:
    error: ...`, the line glued to the bar the error's traceback kept open."""
    import dataclasses

    import tqdm

    def fails(parsed):
        bar = tqdm.tqdm(total=4, file=sys.stderr)
        bar.update(1)
        raise error

    monkeypatch.setitem(cli.COMMANDS, "list", dataclasses.replace(cli.COMMANDS["list"],
                                                                  run=fails))
    assert cli.main(["list"]) in (1, 2)
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1].startswith("posjax list: ") and "|" not in lines[-1], lines
