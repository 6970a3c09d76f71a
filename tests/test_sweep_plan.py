"""Planning a sweep calls its config once per run; the in-process executor runs a sweep's
points one after another in the sweep's own process, with the same result files."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from posjax import fileio
from posjax.config.args import absolute_override
from posjax.launch import cli, sweep
from posjax.train import trainer

REPO = Path(__file__).resolve().parents[1]
LM = str(REPO / "configs" / "lm.py")
BASE = "smoke,seq_len=32,steps=4,eval_max_factor=2"

# lm.py's get_config, counted: each load of the file and each get_config call adds a line.
COUNTED_CONFIG = f'''
from pathlib import Path

from posjax.config import load_config_module

_lm = load_config_module({LM!r})
_COUNTS = Path(__file__).with_name("counts.txt")


def _count(what):
    with _COUNTS.open("a") as counts:
        counts.write(what + "\\n")


_count("load")


def get_config(arg):
    _count("get_config")
    return _lm.get_config(arg)


def sweep(add, arg=""):
    for encoding in ("rope", "alibi"):
        add(encoding=encoding)
'''


def _counts(folder: Path) -> dict[str, int]:
    lines = (folder / "counts.txt").read_text().split()
    return {what: lines.count(what) for what in ("load", "get_config")}


@pytest.mark.parametrize("overrides", [[], ["--config.train.learning_rate=0.002"]])
def test_a_vmapped_sweep_is_planned_with_one_get_config_per_run(tmp_path, capsys, overrides):
    """2 points x 2 seeds, vmapped: 4 runs, 2 commands. The sweep process loads the file
    once and calls get_config once per run (it loaded it twice and called get_config 8 times;
    with an override 7 loads and 16 calls); each command calls it once more: 6 for 4 runs."""
    config = tmp_path / "counted.py"
    config.write_text(COUNTED_CONFIG)
    assert cli.main(["sweep", f"--config={config}:{BASE},seeds=2", "--vmap_seeds",
                     f"--workdir={tmp_path / 'sweep'}", "--print_commands", *overrides]) == 0
    assert _counts(tmp_path) == {"load": 1, "get_config": 4}
    commands = capsys.readouterr().out.strip().splitlines()
    assert len(commands) == 2 and all("--seeds=0,1" in c for c in commands)
    assert all(o in c for o in overrides for c in commands)
    runs = fileio.read_json(tmp_path / "sweep" / "sweep.json")["runs"]
    assert len(runs) == 4 and {r["status"] for r in runs.values()} == {"pending"}
    # What each command's own process does with its config: one load, one get_config.
    (tmp_path / "counts.txt").unlink()
    for command in commands:
        argv = shlex.split(command)[1:]
        cli.COMMANDS["train"].parse(argv[1:]).config  # noqa: B018 (the property loads it)
    assert _counts(tmp_path) == {"load": 2, "get_config": 2}


@pytest.mark.slow
def test_the_inprocess_executor_runs_a_sweep_here_with_the_same_result_files(
        tmp_path, data_flags, monkeypatch, capsys):
    trained = []
    train = trainer.train

    def counted(config, workdir, **kwargs):
        trained.append(Path(workdir).name)
        return train(config, workdir, **kwargs)

    monkeypatch.setattr(trainer, "train", counted)  # seen only in this process
    sweepdir = tmp_path / "sweep"
    argv = ["sweep", f"--config={LM}:study=smoke,{BASE}", f"--workdir={sweepdir}",
            "--executor=inprocess", *data_flags]
    assert cli.main(argv) == 0
    assert trained == ["encoding=rope", "encoding=alibi"]  # here, one after another
    runs = fileio.read_json(sweepdir / "sweep.json")["runs"]
    assert {name: r["status"] for name, r in runs.items()} == {
        "encoding=rope": "done", "encoding=alibi": "done"}
    for name, entry in runs.items():
        run = sweepdir / "runs" / name
        assert set(fileio.read_json(run / "extrapolation.json")["lengths"][0]) >= {"length", "ppl"}
        assert fileio.read_json(run / "stages.json")["final_step"] == 4
        assert set(entry["summary"]["ppl"]) == {"32", "64"}
        log = (run / "log.txt").read_text()
        assert log.startswith(f"$ {entry['command']}\n")
        # train's stdout too: the log held the command and stderr only, nearly empty
        assert "\nstage=1 seq_len=32 " in log and "posjax train: results in" in log, log
    assert "| rope |" in capsys.readouterr().out  # the sweep's table, as with any executor
    # Resumable as the other executors: a re-run finds both runs done and trains nothing.
    assert cli.main(argv) == 0
    assert trained == ["encoding=rope", "encoding=alibi"]


def test_the_inprocess_executor_is_registered_and_in_the_sweeps_help():
    from posjax.launch import executors

    assert executors.EXECUTORS.lookup("inprocess") is executors.InProcess
    assert "inprocess (this process, one run after" in cli.help_text("sweep")
    assert "--executor=inprocess" in (REPO / "docs" / "sweeps.md").read_text()


def test_a_relative_text_glob_is_planned_absolute_and_other_values_are_kept(tmp_path,
                                                                            monkeypatch):
    """data.text_glob is declared a path (kinds.Field(path=True)): each run's arg carries it
    absolute; an absolute one, one from home and the other keys are left as given."""
    monkeypatch.chdir(tmp_path)
    runs = sweep.expand(LM, "smoke,dataset=local_text,text_glob=BOOKS/0*.txt",
                        grid=["encoding=rope,alibi"])
    assert {r.config.data.text_glob for r in runs} == {str(tmp_path / "BOOKS" / "0*.txt")}
    assert runs[0].arg == (f"smoke,dataset=local_text,text_glob={tmp_path}/BOOKS/0*.txt,"
                           "encoding=rope")
    for glob in ("/data/*.txt", "~/books/*.txt"):
        (run, _) = sweep.expand(LM, f"smoke,dataset=local_text,text_glob={glob}",
                                grid=["encoding=rope,alibi"])
        assert run.config.data.text_glob == glob


def test_overrides_of_path_fields_are_made_absolute_and_others_kept(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert absolute_override("--config.data.text_glob=B/*.txt") == (
        f"--config.data.text_glob={tmp_path}/B/*.txt")
    assert absolute_override("--config.train.init_from=runs/a") == (
        f"--config.train.init_from={tmp_path}/runs/a")
    for kept in ("--config.data.data_dir=~/d", "--config.data.data_dir=/d",
                 "--config.data.dataset=local_text", "--config.model.d_model=64"):
        assert absolute_override(kept) == kept


def test_a_sweep_recorded_with_a_relative_path_resumes_from_its_directory_only(
        tmp_path, monkeypatch, capsys):
    """sweep.json of an older posjax holds the relative arg: a re-run from the directory it
    started in resumes it (and records the absolute arg); from another it is refused."""
    monkeypatch.chdir(tmp_path)
    argv = ["sweep", f"--config={LM}:smoke,dataset=local_text,text_glob=BOOKS/*.txt",
            "--grid=encoding=rope", "--workdir=sweep", "--print_commands"]
    assert cli.main(argv) == 0
    index = fileio.read_json(tmp_path / "sweep" / "sweep.json")
    index["runs"]["encoding=rope"]["arg"] = ("smoke,dataset=local_text,text_glob=BOOKS/*.txt,"
                                             "encoding=rope")
    fileio.write_json(tmp_path / "sweep" / "sweep.json", index)
    assert cli.main(argv) == 0
    run = fileio.read_json(tmp_path / "sweep" / "sweep.json")["runs"]["encoding=rope"]
    assert f"text_glob={tmp_path}/BOOKS/*.txt" in run["arg"]
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    capsys.readouterr()
    assert cli.main([*argv[:-2], f"--workdir={tmp_path / 'sweep'}", "--print_commands"]) == 2
    assert "already holds run encoding=rope with arg" in capsys.readouterr().err


def test_a_sweep_recorded_before_values_with_commas_were_quoted_resumes(tmp_path, capsys):
    """models_2026's sweep.json, recorded on 2026-11-27, holds
    `layer_pattern=rope(theta=1e4,window=32)+rope(theta=1e6)` unquoted: a re-run of the same
    command was refused as a different sweep."""
    argv = ["sweep", f"--config={LM}:smoke,encoding=rope,seeds=1,"
                     "layer_pattern='rope(theta=1e4,window=8)+rope'", f"--workdir={tmp_path}",
            "--print_commands"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    index = fileio.read_json(tmp_path / "sweep.json")
    (name, run), = index["runs"].items()
    assert "'rope(theta=1e4,window=8)+rope'" in run["arg"]
    run["arg"] = run["arg"].replace("'", "")
    fileio.write_json(tmp_path / "sweep.json", index)
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert fileio.read_json(tmp_path / "sweep.json")["runs"][name]["arg"] == run["arg"].replace(
        "rope(theta=1e4,window=8)+rope", "'rope(theta=1e4,window=8)+rope'")


def test_an_arg_that_fails_in_one_run_of_the_default_study_names_the_run_and_study(
        tmp_path, capsys):
    """`configs/lm.py:theta=500,smoke` named encoding=none, which the user never gave: it is
    a run of the default study=main."""
    assert cli.main(["sweep", f"--config={LM}:theta=500,smoke", f"--workdir={tmp_path / 's'}",
                     "--print_commands"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "posjax sweep: error: run encoding=none of lm.py's sweep (study=main, its default): "
        "config arg 'theta' is a hyperparameter of rope")
    assert not (tmp_path / "s").exists()


def test_vmap_seeds_on_a_sweep_of_one_seed_per_point_says_each_run_trains_alone(
        tmp_path, capsys):
    """--vmap_seeds without seeds=N was accepted without a word and changed nothing."""
    assert cli.main(["sweep", f"--config={LM}:encoding=rope,smoke", "--grid=theta=1e4,5e5",
                     "--vmap_seeds", f"--workdir={tmp_path / 's'}", "--print_commands"]) == 0
    assert ("posjax sweep: --vmap_seeds trains a point's seeds in one program, and this sweep "
            "has one seed per point (seeds=N in the arg gives N): each run trains alone"
            ) in capsys.readouterr().err.splitlines()
    assert cli.main(["sweep", f"--config={LM}:encoding=rope,smoke,seeds=2",
                     "--grid=theta=1e4,5e5", "--vmap_seeds", f"--workdir={tmp_path / 't'}",
                     "--print_commands"]) == 0
    assert "--vmap_seeds trains" not in capsys.readouterr().err
    # one seed of each point left by --only: "this sweep has one seed per point" was untrue
    assert cli.main(["sweep", f"--config={LM}:encoding=rope,smoke,seeds=2",
                     "--grid=theta=1e4,5e5", "--vmap_seeds", f"--workdir={tmp_path / 'u'}",
                     "--only=*seed=1", "--print_commands"]) == 0
    assert ("posjax sweep: --vmap_seeds trains a point's seeds in one program, and this sweep "
            "leaves one seed of each point to train (the others done, or left out by --only): "
            "each run trains alone") in capsys.readouterr().err.splitlines()


def test_a_vmapped_sweep_hands_seed_steps_to_each_points_command(tmp_path, capsys):
    """--seed_steps=in_turn reaches each point's posjax train; vmap, the default, adds
    nothing."""
    for way, expected in (("in_turn", ["--seed_steps=in_turn"]), ("vmap", [])):
        assert cli.main(["sweep", f"--config={LM}:encoding=rope,smoke,seeds=2",
                         "--grid=theta=1e4,5e5", "--vmap_seeds", f"--seed_steps={way}",
                         f"--workdir={tmp_path / way}", "--print_commands"]) == 0
        commands = capsys.readouterr().out.strip().splitlines()
        assert len(commands) == 2
        for command in map(shlex.split, commands):
            assert [w for w in command if w.startswith("--seed")] == ["--seeds=0,1", *expected]


@pytest.mark.parametrize(("flags", "message"), [
    (("--seed_steps=in_turn",), "--seed_steps=in_turn steps the seeds --vmap_seeds trains in "
                                "one program: add --vmap_seeds, or drop --seed_steps"),
    (("--vmap_seeds", "--seed_steps=inturn"),
     "unknown --seed_steps way 'inturn' (did you mean 'in_turn'?); valid: in_turn, vmap"),
    (("--status", "--seed_steps=in_turn"),
     "--seed_steps is not read with --status, which runs nothing: leave it out"),
])
def test_a_sweeps_bad_seed_steps_is_one_line(tmp_path, capsys, flags, message):
    assert cli.main(["sweep", f"--config={LM}:encoding=rope,smoke,seeds=2", *flags,
                     f"--workdir={tmp_path / 's'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(message) and len(err.splitlines()) == 1, err
    assert not (tmp_path / "s").exists()


def test_another_sweep_over_one_planned_only_says_the_plan_can_be_deleted(tmp_path, capsys):
    """A sweep planned by --print_commands, then another in its folder, was told to use a
    new --workdir as if runs had trained there."""
    folder = tmp_path / "X"
    assert cli.main(["sweep", f"--config={LM}:smoke", f"--workdir={folder}",
                     "--print_commands"]) == 0
    capsys.readouterr()
    assert cli.main(["sweep", f"--config={LM}:smoke,learning_rate=3e-3",
                     f"--workdir={folder}", "--print_commands"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        f", planned (--print_commands) and never trained: delete {folder / 'sweep.json'} to "
        "plan this sweep there instead, or use a new --workdir")
    (folder / "sweep.json").unlink()  # as the line says
    assert cli.main(["sweep", f"--config={LM}:smoke,learning_rate=3e-3",
                     f"--workdir={folder}", "--print_commands"]) == 0


def test_a_sweep_function_of_add_alone_plans_as_one_of_add_and_arg(tmp_path, capsys):
    """DESIGN.md's form, sweep(add), was a TypeError traceback: the sweep calls it with the
    arg where it takes one, without where it does not, and the arg reaches every run."""
    config = tmp_path / "mine.py"
    config.write_text(COUNTED_CONFIG.replace('def sweep(add, arg=""):', "def sweep(add):"))
    runs = sweep.expand(str(config), BASE)
    assert [run.name for run in runs] == ["encoding=rope", "encoding=alibi"]
    assert all(run.arg.startswith(BASE) for run in runs)
    assert "would run 2: encoding=rope, encoding=alibi" in sweep.grid_notice(
        str(config), BASE, ["theta=1e4"], runs)
