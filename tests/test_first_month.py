"""A researcher's first month (issue 50): a sweep of one's own values from the command line
(--grid), config files that import each other, checkpoints by wall time and a resumed
sweep that says so, result files with a plain open()'s mode, a layer pattern longer than
the model refused, overrides that would merge a sweep's runs refused, and list args typed."""

from __future__ import annotations

import os
import re
import stat
import sys
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


@pytest.mark.parametrize("arg, layers, unused",
                         [("smoke,num_layers=1", 1, "rope*2+none"), ("size=main", 2, "rope+none")])
def test_a_layer_pattern_longer_than_the_model_is_refused(tmp_path, capsys, arg, layers,
                                                          unused):
    """rope+rope+rope+none on 1 or 2 layers trained as plain RoPE, with no word; the layers
    left over are named in short form."""
    from posjax.launch import cli

    workdir = tmp_path / "run"
    assert cli.main(["train", f"--config={LM}:{arg},layer_pattern=rope+rope+rope+none",
                     f"--workdir={workdir}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"posjax train: error: model.layer_pattern='rope+rope+rope+none' names 4 layers but "
        f"model.num_layers={layers}, so {unused} "
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


def test_seeds_in_a_trains_arg_names_the_flag_that_trains_seeds(tmp_path, capsys):
    """seeds=N is a sweep's axis (docs/sweeps.md): under posjax train the refusal names
    --seeds, not 'did you mean seed' and a hundred keys."""
    from posjax.launch import cli

    assert cli.main(["train", f"--config={LM}:encoding=rope,smoke,seeds=3",
                     f"--workdir={tmp_path / 'run'}"]) == 2
    assert capsys.readouterr().err.strip() == (
        "posjax train: error: config arg 'seeds' is posjax sweep's seeds axis; posjax train "
        "trains several seeds with --seeds=0,1,2 and {seed} in --workdir (runs/rope,seed={seed})")
    assert not (tmp_path / "run").exists()


def test_seeds_without_a_seed_field_in_the_workdir_says_what_it_lacks(tmp_path, capsys):
    """It said "--seeds needs distinct seeds and a --workdir with {seed}" where the seeds
    were distinct; and --seeds=3 trained seed 3 alone with no word (seeds=3 in a config arg
    is three seeds)."""
    from posjax.launch import cli

    assert cli.main(["train", f"--config={LM}:encoding=rope,smoke", "--seeds=0,1",
                     f"--workdir={tmp_path / 'run'}"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"posjax train: error: --workdir={tmp_path / 'run'} has no {{seed}}, which --seeds "
        "fills to name each seed's run directory: e.g. --workdir='runs/rope,seed={seed}' "
        "(posjax plot averages folders named NAME,seed=K)")
    assert cli.main(["train", f"--config={LM}:encoding=rope,smoke", "--seeds=3",
                     f"--workdir={tmp_path / 'run'}"]) == 2
    assert capsys.readouterr().err.startswith(
        "posjax train: --seeds=3 trains seed 3 alone; 3 seeds are --seeds=0,1,2\n")


def test_evaluation_text_too_short_for_its_lengths_is_refused_before_training(tmp_path,
                                                                             capsys):
    """train --extrapolate on a small corpus: the longest length is refused in one line
    naming the lengths that fit, before a step trains or a file is written; those train."""
    from posjax.launch import cli

    books = tmp_path / "books"
    books.mkdir()
    for i in range(12):
        (books / f"{i:02d}.txt").write_text(f"book {i}: " + "some words again " * 30)
    command = ["train", f"--config={LM}:encoding=rope,smoke,dataset=local_text,"
               f"text_glob={books}/*.txt", f"--config.data.data_dir={tmp_path / 'data'}",
               "--extrapolate", f"--workdir={tmp_path / 'run'}"]
    assert cli.main(command) == 2
    err = capsys.readouterr().err.strip()
    assert re.fullmatch(r"posjax train: error: the evaluation text \(local_text, split "
                        r"validation\) has (\d+) scored tokens, fewer than the evaluation "
                        r"length 2048: evaluate at most \1 tokens \(--config.eval.lengths="
                        r"\(128,256,512,\)\) or give it more text", err), err
    assert not (tmp_path / "run").exists()
    assert cli.main([*command, "--config.eval.lengths=(128,256,512,)"]) == 0
    assert (tmp_path / "run" / "extrapolation.json").is_file()


@pytest.mark.parametrize("study", ["encodings_2024", "models_2026"])
def test_a_studys_layer_patterns_build_at_smoke_size(study):
    """study=models_2026 at smoke size failed 3 of its 14 points: their 2-layer patterns
    (gdn+none, the local/global schedules) on the 1-layer toy model. The toy model is as
    deep as its pattern, and every layer reads its entry."""
    from configs.lm import STUDIES, get_config
    from posjax.experiment import Experiment
    from posjax.models.transformer import layer_specs

    points = []
    STUDIES[study](lambda **keys: points.append(keys))
    patterned = [p for p in points if "layer_pattern" in p]
    assert patterned
    for point in patterned:
        arg = ",".join(["smoke", *(f"{k}={v}" for k, v in point.items())])
        config = get_config(arg)
        assert config.model.num_layers == len(layer_specs(config.model)) == 2, arg
        Experiment.from_config(config).abstract()


def test_the_retrieval_config_builds_the_hybrid_at_smoke_size():
    """The passkey route of models_2026 at smoke size: gdn+none on the 1-layer toy model
    was refused; the toy model is as deep as its pattern there too."""
    from posjax.config import load_config_module
    from posjax.experiment import Experiment

    config = load_config_module("configs/retrieval.py").get_config(
        "task=passkey,smoke,encoding=none,layer_pattern=gdn+none")
    assert config.model.num_layers == 2
    Experiment.from_config(config).abstract()


# A sweep of one's own values: --grid.

GRID = ["--grid=theta=1e4,5e5", "--grid=seq_len=64,128"]


def _sweep(tmp_path, arg, *flags, config=LM):
    from posjax.launch import cli

    return cli.main(["sweep", f"--config={config}:{arg}", f"--workdir={tmp_path / 'sweep'}",
                     "--print_commands", *flags])


def test_grid_sweeps_the_cartesian_product_in_place_of_the_files_own_sweep(tmp_path, capsys):
    assert _sweep(tmp_path, "encoding=rope,smoke", *GRID) == 0
    out, err = capsys.readouterr()
    names = ["theta=1e4,seq_len=64", "theta=1e4,seq_len=128", "theta=5e5,seq_len=64",
             "theta=5e5,seq_len=128"]
    commands = out.strip().splitlines()
    assert [c.split("--workdir=")[1].split("/runs/")[1].split()[0] for c in commands] == names
    assert f"lm.py:encoding=rope,smoke,{names[0]} " in commands[0]
    assert err.strip().splitlines() == [
        f"posjax sweep: --grid gives 4 runs (2 theta x 2 seq_len) over {LM}:encoding=rope,smoke;"
        " the file's own sweep() is not used (it would run 1: encoding=rope)",
        "posjax sweep: 4 runs to start"]
    state = fileio.read_json(tmp_path / "sweep" / "sweep.json")
    assert list(state["runs"]) == names and state["grid"] == ["theta=1e4,5e5", "seq_len=64,128"]
    # Each run's config has its grid values; seeds=N in the arg runs every point N times.
    from posjax.launch import sweep

    runs = sweep.expand(LM, "smoke,seeds=2", ["theta=1e4,5e5"])
    assert [r.name for r in runs] == ["theta=1e4,seed=0", "theta=1e4,seed=1",
                                      "theta=5e5,seed=0", "theta=5e5,seed=1"]
    assert [r.config.encoding.theta for r in runs] == [1e4, 1e4, 5e5, 5e5]
    one = sweep.grid_notice(LM, "smoke", ["theta=1e4"], sweep.expand(LM, "smoke", ["theta=1e4"]))
    assert one.startswith("posjax sweep: --grid gives 1 run (1 theta) over ")
    # the file's own sweep counted with its seeds, as it would run them, and the grid too
    seeded = sweep.grid_notice(LM, "encoding=rope,smoke,seeds=2", ["theta=1e4,5e5"], runs)
    assert seeded.startswith("posjax sweep: --grid gives 4 runs (2 theta x 2 seeds) over ")
    assert seeded.endswith("the file's own sweep() is not used (it would run 2 (1 point x 2 "
                           "seeds): encoding=rope)")
    assert [r.config.train.seed for r in runs] == [0, 1, 0, 1]


def test_a_sweep_of_another_plan_in_one_folder_says_what_it_adds(tmp_path, capsys):
    """Another grid (or arg) on a sweep's folder adds its runs beside the first's: it said
    nothing, and sweep.json's grid named the second grid over the first's runs."""
    assert _sweep(tmp_path, "encoding=rope,smoke", "--grid=theta=1e4,5e5") == 0
    capsys.readouterr()
    assert _sweep(tmp_path, "encoding=rope,smoke", "--grid=theta=1e4,5e5") == 0  # the same
    assert "holds" not in capsys.readouterr().err
    assert _sweep(tmp_path, "encoding=rope,smoke", "--grid=theta=1e4,1e6") == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "posjax sweep: 2 runs to start"  # the command's: theta=1e4 and 1e6
    assert err[-2] == (f"posjax sweep: {tmp_path / 'sweep'} holds 2 runs of lm.py:encoding=rope,"
                       "smoke --grid=theta=1e4,5e5; this command adds 1 beside them "
                       "(theta=1e6), and its table shows all")
    state = fileio.read_json(tmp_path / "sweep" / "sweep.json")
    assert (state["arg"], state["grid"]) == ("encoding=rope,smoke", ["theta=1e4,5e5"])
    assert state["later_plans"] == [{"config": LM, "arg": "encoding=rope,smoke",
                                     "grid": ["theta=1e4,1e6"], "runs": ["theta=1e6"]}]
    assert list(state["runs"]) == ["theta=1e4", "theta=5e5", "theta=1e6"]
    # a plan whose run trains a held run's config under another name: refused
    assert _sweep(tmp_path, "encoding=rope,smoke", "--grid=theta=10000.0") == 2
    assert capsys.readouterr().err.strip() == (  # without the grid's notice: nothing runs
        f"posjax sweep: error: run theta=10000.0 trains the config of run theta=1e4, which "
        f"{tmp_path / 'sweep'} holds already: drop the value that equals theta=1e4's")
    assert "theta=10000.0" not in fileio.read_json(tmp_path / "sweep" / "sweep.json")["runs"]
    # a third plan: the first plan's runs are counted apart from the later ones'
    assert _sweep(tmp_path, "encoding=rope,smoke", "--grid=theta=1e7") == 0
    assert capsys.readouterr().err.strip().splitlines()[-2] == (
        f"posjax sweep: {tmp_path / 'sweep'} holds 2 runs of lm.py:encoding=rope,smoke "
        "--grid=theta=1e4,5e5 and 1 of later commands; this command adds 1 beside them "
        "(theta=1e7), and its table shows all")
    # --status with any of the folder's plans lists its runs; with another, it says so first
    from posjax.launch import cli

    status = ["sweep", f"--workdir={tmp_path / 'sweep'}", "--status"]
    for given in ([], [f"--config={LM}:encoding=rope,smoke", "--grid=theta=1e7"]):
        assert cli.main([*status, *given]) == 0
        assert not capsys.readouterr().err
    assert cli.main([*status, f"--config={LM}:encoding=alibi,smoke"]) == 0
    out, err = capsys.readouterr()
    assert err.splitlines() == [
        f"posjax sweep: {tmp_path / 'sweep'} holds the runs of --config={LM}:encoding=rope,smoke "
        f"--grid=theta=1e4,5e5 and of --config={LM}:encoding=rope,smoke --grid=theta=1e4,1e6 and "
        f"of --config={LM}:encoding=rope,smoke --grid=theta=1e7, not of the command given: "
        "their statuses follow"]
    assert len(out.splitlines()) == 4


@pytest.mark.parametrize("arg, grid, message", [
    ("smoke", ["--grid=thetaa=1e4,5e5"],
     "--grid=thetaa=1e4,5e5: unknown config arg 'thetaa' (did you mean 'theta'?); valid: "),
    ("smoke,encoding=alibi", ["--grid=theta=1e4"],
     "--grid=theta=1e4: config arg 'theta' is a hyperparameter of "),
    ("smoke", ["--grid=theta=1e4,abc"], "--grid=theta=1e4,abc: theta='abc' is not a number"),
    ("smoke,theta=3", ["--grid=theta=1e4,5e5"],
     "--grid=theta=1e4,5e5 and --config's arg (theta=3) both set theta: drop one of them"),
    ("smoke,study=theta", ["--grid=seq_len=64"],
     "--grid replaces the config file's own sweep, so study=theta would be ignored"),
    ("smoke", ["--grid=seeds=2"], "--grid=seeds=2: seeds=N is the sweep's seeds axis"),
    ("smoke,seeds=2", ["--grid=seed=0,1"],  # said "sweep adds run 'seed=0' twice"
     "--grid=seed=0,1: seeds are the sweep's seeds axis, whose runs count as one point's "
     "seeds: put seeds=N in --config's arg"),
    ("smoke", ["--grid=theta"], "--grid=theta: write --grid=KEY=V1,V2"),
    ("smoke", ["--grid=theta=1", "--grid=theta=2"], "--grid gives theta twice"),
    ("smoke", ["--grid=theta=1e4,1e4"], "--grid=theta=1e4,1e4 gives theta=1e4 twice"),
    # an empty value ran the others without a word
    ("smoke", ["--grid=theta=1e4,,5e5"], "--grid=theta=1e4,,5e5 has an empty value: write "
     "each value once, with one comma between two, e.g. --grid=theta=1e4,5e5"),
    ("smoke", ["--grid=theta=1e4,"], "--grid=theta=1e4, has an empty value"),
    # the bare smoke picked the size of every run: "the same config", blaming the values
    ("smoke", ["--grid=size=smoke,main"], "--grid=size=smoke,main: config args smoke and "
     "size=main both pick the size (smoke is size=smoke): give one of them"),
    # what posjax train refuses before it writes anything: it trained p=0.5, then failed
    ("smoke,encoding=rope", ["--grid=p=0.5,1.5"], "--grid=p=0.5,1.5: rope p=1.5 must be in "
     "[0, 1]"),
    ("smoke", ["--grid=learning_rate=-1,-2"], "--grid=learning_rate=-1,-2: "
     "train.learning_rate=-1 must be > 0"),
    # seq_len=2 trained and was scored first
    ("smoke", ["--grid=seq_len=2,1"], "--grid run seq_len=1: train.stages entry (1, 4, 6): "
     "seq_len must be >= 2 to have a next token to predict, got 1"),
    ("smoke", ["--grid=theta=1e4,10000", "--grid=seq_len=64"],  # one value written two ways
     "--grid=theta=1e4,10000 --grid=seq_len=64 gives runs theta=1e4,seq_len=64 and "
     "theta=10000,seq_len=64 the same config"),
])
def test_a_bad_grid_is_one_line(tmp_path, capsys, arg, grid, message):
    assert _sweep(tmp_path, arg, *grid) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"posjax sweep: error: {message}") and "\n" not in err
    assert not (tmp_path / "sweep").exists()


@pytest.mark.parametrize("arg, grid, message", [
    ("smoke,dataset=local_text,text_glob=/nowhere/*.txt", ["--grid=theta=1e4,5e5"],
     "--grid run theta=1e4: data.text_glob='/nowhere/*.txt' matches no files"),
    ("smoke", ["--grid=dataset=stdlib_text,local_text"],
     "--grid run dataset=local_text: dataset 'local_text' needs data.text_glob"),
])
def test_data_files_that_are_not_there_are_refused_before_a_sweep_here_starts(
        tmp_path, capsys, arg, grid, message):
    """Each run failed on its own as it started (the others trained); --print_commands and
    the cluster executors leave the files to the hosts that read them."""
    from posjax.launch import cli

    argv = ["sweep", f"--config={LM}:{arg}", f"--workdir={tmp_path / 'sweep'}", *grid]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()  # the refusal alone: the grid's notice is for a plan
    assert err.startswith(f"posjax sweep: error: {message}") and "\n" not in err, err
    assert not (tmp_path / "sweep").exists()
    assert cli.main([*argv, "--print_commands"]) == 0


def test_an_arg_the_study_would_replace_is_refused_not_dropped(tmp_path, capsys):
    """study=theta,theta=5e5 trained 100..1e6 and never 5e5; an arg the study agrees with
    (encoding=rope for the theta study) is kept."""
    from posjax.launch import sweep

    assert _sweep(tmp_path, "smoke,study=theta,theta=5e5") == 2
    assert capsys.readouterr().err.strip() == (
        "posjax sweep: error: lm.py's sweep sets theta=100.0 in run encoding=rope,theta=100.0, "
        "which would replace --config's theta=5e5: drop theta= from the arg, or sweep your own "
        "values with --grid=theta=V1,V2 instead of the file's sweep")
    assert len(sweep.expand(LM, "smoke,encoding=rope,study=theta")) == 5
    with pytest.raises(Exception, match="replace --config's encoding=alibi"):
        sweep.expand(LM, "smoke,encoding=alibi,study=main")


def test_an_arg_some_of_a_studys_encodings_take_names_the_grid_of_those(tmp_path, capsys):
    """study=main,theta=5e5 was refused with "pick one of those encodings", which a study's
    user cannot do: the refusal now gives the --grid of the study's runs that take it."""
    from posjax.launch import sweep

    assert _sweep(tmp_path, "smoke,study=main,theta=5e5,seeds=2") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("posjax sweep: error: run encoding=none,seed=0 of lm.py's sweep "
                          "(study=main): config arg 'theta' is a hyperparameter of rope, ")
    hint = "--grid=encoding=rope,xpos"
    assert err.endswith(f"; rope, xpos of its runs take it: --config={LM}:smoke,theta=5e5,"
                        f"seeds=2 {hint} sweeps those alone") and "\n" not in err
    runs = sweep.expand(LM, "smoke,theta=5e5,seeds=2", [hint.removeprefix("--grid=")])
    assert [r.name for r in runs] == ["encoding=rope,seed=0", "encoding=rope,seed=1",
                                      "encoding=xpos,seed=0", "encoding=xpos,seed=1"]
    assert {r.config.encoding.theta for r in runs} == {5e5}


@pytest.mark.parametrize("arg", ["study=theta,smoke", "study=theta,smoke,encoding=rope,theta=5e5"])
def test_a_study_under_train_is_refused_unless_the_arg_names_one_of_its_runs(tmp_path, capsys,
                                                                              arg):
    """posjax train with study=theta trained one default run (theta 1e4), rc 0 and no word; a
    sweep's per-run arg (study= beside one run's keys) still configures that run."""
    from posjax.config import configured
    from posjax.launch import cli

    run = tmp_path / "run"
    assert cli.main(["train", f"--config={LM}:{arg}", f"--workdir={run}"]) == 2
    assert not run.exists()
    assert capsys.readouterr().err.strip() == (
        "posjax train: error: study=theta is a sweep of 5 runs (posjax sweep "
        "--config=configs/lm.py:study=theta trains them) and this arg names none of them: drop "
        "study= to train the arg's own run, or give one run's keys (encoding=rope,theta=100.0)")
    config = configured(f"{LM}:study=theta,smoke,encoding=rope,theta=1e2", [])
    assert config.encoding.theta == 100.0


@pytest.mark.parametrize("arg, flags, message", [
    ("encoding=rope,smoke", ["--grid=theta=1e4,5e5", "--config.encoding.theta=3"],
     "--config.encoding.theta=3 would make runs theta=1e4 and theta=5e5 the same: it replaces "
     "encoding.theta, which the sweep sets per run (10000.0, 500000.0); drop it, or sweep your "
     "own values with --grid"),
    ("study=theta,smoke", ["--config.encoding.theta=5e5"],
     "--config.encoding.theta=5e5 would make runs encoding=rope,theta=100.0 and "
     "encoding=rope,theta=1000.0 the same: it replaces encoding.theta, which the sweep sets "
     "per run (100.0, 1000.0)"),
    ("smoke,seeds=2", ["--grid=theta=1e4", "--config.train.seed=7"],
     "--config.train.seed=7 would make runs theta=1e4,seed=0 and theta=1e4,seed=1 the same"),
])
def test_an_override_replacing_what_the_sweep_varies_is_refused(tmp_path, capsys, arg, flags,
                                                                message):
    """A --config override applied to every run silently trained every point at its value,
    under the points' names."""
    assert _sweep(tmp_path, arg, *flags) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"posjax sweep: error: {message}")
    assert not (tmp_path / "sweep").exists()


def test_an_override_the_runs_share_is_kept(tmp_path, capsys):
    """Evaluation lengths fixed for a seq_len grid: the runs still differ, so it applies."""
    assert _sweep(tmp_path, "encoding=rope,smoke", "--grid=seq_len=64,128",
                  "--config.eval.lengths=128") == 0
    commands = capsys.readouterr().out.strip().splitlines()
    assert len(commands) == 2 and all("--config.eval.lengths=128" in c for c in commands)


def test_a_list_arg_of_numbers_is_numbers(tmp_path, capsys, data_flags):
    """`lengths=128` was the string '128': the run trained, then its evaluation crashed."""
    from posjax.config import parse_arg
    from posjax.launch import cli

    parsed = parse_arg("lengths=64+128,schedule_restarts=3", {"lengths": (),
                                                               "schedule_restarts": ()})
    assert parsed.lengths == (64, 128) and parsed.schedule_restarts == (3,)
    run = tmp_path / "run"
    for arg, message in [
        ("lengths=abc", "eval.lengths=('abc',): 'abc' is not a positive whole number of "
                        "tokens; give whole numbers joined by + (lengths=128+256+512)"),
        ("lengths=128,256", "config arg '256' has no key: join a list's items with + "
                            "(lengths=128+256), not with commas"),
    ]:
        assert cli.main(["train", f"--config={LM}:smoke,{arg}", f"--workdir={run}",
                         *data_flags]) == 2
        assert capsys.readouterr().err.strip() == f"posjax train: error: {message}"
        assert not run.exists()  # refused before anything was written
    assert cli.main(["train", f"--config={LM}:smoke,lengths=64", f"--workdir={run}",
                     "--extrapolate", *data_flags]) == 0
    assert [r["length"] for r in fileio.read_json(run / "extrapolation.json")["lengths"]] == [64]


def _text_result(dataset: str, text_glob: str | None = None, fingerprint: str = "") -> dict:
    """A text evaluation's result file as posjax extrapolate writes it (one length)."""
    data = {"dataset": dataset, "split": "validation", "tokenizer": "bytes"}
    if text_glob:
        data["text_glob"] = text_glob
    if fingerprint:
        data["fingerprint"] = fingerprint
    return {"run": "r", "evaluation": "text", "report": "text", "encoding": {"name": "rope"},
            "train_len": 128, "step": 6, "total_steps": 6, "data": data, "smoke": False,
            "protocol": "nonoverlapping", "stride": None, "max_tokens": 8192, "method": "none",
            "lengths": [{"length": 128, "loss": 2.0, "ppl": 7.389, "tokens": 8191,
                         "bucket_size": 128, "bucket_loss": [2.0]}]}


def test_a_score_written_as_null_is_no_number_in_the_table_or_the_pictures(tmp_path, capsys):
    """A nan or inf score is written as null (a diverged model): posjax plot failed on it
    (a format of None, or no positive value to log-scale) for every result in the folder."""
    from posjax.launch import cli

    good, diverged = tmp_path / "good", tmp_path / "diverged"
    fileio.write_json(good / "extrapolation.json", _text_result("stdlib_text"))
    result = _text_result("stdlib_text")
    result["lengths"][0].update(loss=None, ppl=None, bucket_loss=[None])
    fileio.write_json(diverged / "extrapolation.json", result)
    assert cli.main(["plot", str(good), str(diverged), f"--output={tmp_path / 'both'}"]) == 0
    table = (tmp_path / "both" / "extrapolation.md").read_text()
    assert "| good | 7.389 |" in table and "| diverged | - |" in table
    assert "Not scored (-): diverged at 128: scored nan or inf." in table
    assert cli.main(["plot", str(diverged)]) == 0
    assert (diverged / "extrapolation.png").exists()


def _brackets(results: list[dict]) -> dict[str, str]:
    """{series: the data its legend label names} (plots._series_data keys each result)."""
    from posjax.results import plots

    on = plots._series_data(results)
    return {result["series"]: on[id(result)] for result in results if id(result) in on}


def test_tables_and_pictures_name_the_data_and_never_mix_texts_silently(tmp_path):
    """`posjax plot` drew a run scored on the user's books beside one scored on the default
    corpus as one comparison, its caption naming neither."""
    from posjax.results import plots

    books, stdlib = tmp_path / "books", tmp_path / "stdlib"
    fileio.write_json(books / "extrapolation.json", _text_result("local_text", "BOOKS/*.txt"))
    fileio.write_json(stdlib / "extrapolation.json", _text_result("stdlib_text"))
    plots.plot_sweep([stdlib])
    assert (stdlib / "extrapolation.md").read_text().rstrip().endswith(
        "Scored on stdlib_text, validation split, first 8192 tokens, bytes tokenizer.")
    plots.plot_sweep([books, stdlib], output=tmp_path / "mixed")
    assert (tmp_path / "mixed" / "extrapolation.md").read_text().rstrip().endswith(
        "**Not one data set**, each run's: books: scored on local_text, validation split of "
        "the files matching BOOKS/*.txt, first 8192 tokens, bytes tokenizer; stdlib: scored on "
        "stdlib_text, validation split, first 8192 tokens, bytes tokenizer.")
    results = [plots._labelled(name, fileio.read_json(folder / "extrapolation.json"),
                               folder / "extrapolation.json")
               for name, folder in (("books", books), ("stdlib", stdlib))]
    assert _brackets(results) == {"books": "local_text, BOOKS/*.txt",
                                  "stdlib": "stdlib_text"}  # the legend's brackets
    results[1]["data"] = results[0]["data"]
    results[1]["max_tokens"] = 4096  # one text, two budgets: the brackets tell them apart
    assert _brackets(results) == {"books": "local_text, BOOKS/*.txt, first 8192 tokens",
                                  "stdlib": "local_text, BOOKS/*.txt, first 4096 tokens"}


def test_the_loss_by_position_picture_names_its_data_and_each_runs_where_they_differ(
        tmp_path, monkeypatch):
    """position_loss.png named no text, beside runs scored on the user's books and on the
    default corpus."""
    from posjax.results import plots

    books, stdlib = tmp_path / "books", tmp_path / "stdlib"
    fileio.write_json(books / "extrapolation.json", _text_result("local_text", "BOOKS/*.txt"))
    fileio.write_json(stdlib / "extrapolation.json", _text_result("stdlib_text"))
    drawn = {}
    monkeypatch.setattr(fileio, "save_figure", lambda fig, path, **kw: drawn.update({
        Path(path).name: (fig.get_suptitle(), [t.get_text() for ax in fig.axes
                                                if ax.get_legend() for t in
                                                ax.get_legend().get_texts()])}) or path)
    plots.plot_sweep([stdlib])
    title, _ = drawn["position_loss.png"]
    assert title == ("Loss by position in the longest evaluation window\nScored on stdlib_text, "
                     "validation split, first 8192 tokens, bytes tokenizer")
    plots.plot_sweep([books, stdlib], output=tmp_path / "mixed")
    title, legend = drawn["position_loss.png"]
    assert title.endswith("\nNot one data set: each run's in brackets")
    assert legend == ["books (L=128) [local_text, BOOKS/*.txt]",
                      "stdlib (L=128) [stdlib_text]"], legend


def test_one_text_at_two_token_budgets_is_captioned_as_one_text(tmp_path):
    """Smoke runs at two training lengths (their budgets scale with it) on one text were
    captioned "Not one data set", as if two texts had been scored."""
    from posjax.results import plots

    short, long = tmp_path / "seq_len=64", tmp_path / "seq_len=128"
    fileio.write_json(long / "extrapolation.json", _text_result("stdlib_text"))
    fileio.write_json(short / "extrapolation.json", {**_text_result("stdlib_text"),
                                                     "max_tokens": 4096})
    plots.plot_sweep([short, long], output=tmp_path / "both")
    table = (tmp_path / "both" / "extrapolation.md").read_text()
    assert "Not one data set" not in table and table.rstrip().endswith(
        "Scored on stdlib_text, validation split, bytes tokenizer; **not one token budget**, "
        "each run's: seq_len=64: first 4096 tokens; seq_len=128: first 8192 tokens.")


def test_one_glob_over_edited_files_is_two_data_sets_and_a_caption_keeps_its_case(tmp_path):
    """The caption of one data set lower-cased the glob (/tmp/BOOKS became /tmp/books, a
    folder that may not exist); runs scored on one glob before and after its files changed
    were captioned as one data set."""
    from posjax.results import plots

    before, after = tmp_path / "before", tmp_path / "after"
    fileio.write_json(before / "extrapolation.json",
                      _text_result("local_text", "/tmp/BOOKS/*.txt", "0123456789"))
    plots.plot_sweep([before])
    assert (before / "extrapolation.md").read_text().rstrip().endswith(
        "Scored on local_text, validation split of the files matching /tmp/BOOKS/*.txt "
        "(fingerprint 0123456789), first 8192 tokens, bytes tokenizer.")
    fileio.write_json(after / "extrapolation.json",
                      _text_result("local_text", "/tmp/BOOKS/*.txt", "abcdef0123"))
    plots.plot_sweep([before, after], output=tmp_path / "both")
    assert "**Not one data set**" in (tmp_path / "both" / "extrapolation.md").read_text()
    results = [plots._labelled(name, fileio.read_json(folder / "extrapolation.json"),
                               folder / "extrapolation.json")
               for name, folder in (("before", before), ("after", after))]
    assert _brackets(results) == {
        "before": "local_text, /tmp/BOOKS/*.txt (0123456789)",
        "after": "local_text, /tmp/BOOKS/*.txt (abcdef0123)"}


def test_every_picture_of_smoke_runs_says_it_checks_the_set_up(tmp_path, monkeypatch):
    """The loss-by-position and theta pictures of smoke runs carried no such line."""
    from posjax.results import plots

    drawn = {}
    monkeypatch.setattr(fileio, "save_figure",
                        lambda fig, path, **kw: drawn.setdefault(Path(path).name, fig) and path)
    folders = []
    for theta in (1e4, 5e5):
        result = {**_text_result("stdlib_text"), "smoke": True}
        result["encoding"] = {"name": "rope", "theta": theta}
        folders.append(tmp_path / f"theta={theta:g}")
        fileio.write_json(folders[-1] / "extrapolation.json", result)
    plots.plot_sweep(folders, output=tmp_path / "out")
    assert {"extrapolation.png", "position_loss.png", "theta.png"} <= set(drawn)
    for name, fig in drawn.items():
        assert "smoke run: checks the set-up, not a result" in fig._suptitle.get_text(), name


# Config files that import each other.

USER_CONFIG = '''
from configs.lm import get_config as lm_config


def get_config(arg=""):
    """configs/lm.py's config at a lower learning rate: a user's file built on posjax's."""
    config = lm_config(arg)
    config.train.learning_rate = 1e-3
    return config
'''


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """This process as the `posjax` command sees it from another folder: the checkout is not
    on sys.path (`python -m pytest` put it there) and configs/ is not imported."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path
                                      if p and Path(p).resolve() != REPO])
    for name in [m for m in sys.modules if m.split(".")[0] == "configs"]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ImportError):
        __import__("configs.lm")


def test_a_config_file_anywhere_imports_configs_lm_and_trains(tmp_path, elsewhere, data_flags,
                                                               capsys):
    """`from configs.lm import get_config` in a user's file said `No module named
    'configs'`; a module that is nowhere is one line naming it and where posjax looked."""
    from posjax.launch import cli

    mine = tmp_path / "mine.py"
    mine.write_text(USER_CONFIG)
    workdir = tmp_path / "run"
    assert cli.main(["train", f"--config={mine}:smoke,steps=2", f"--workdir={workdir}",
                     *data_flags]) == 0
    saved = fileio.read_json(workdir / "config.json")
    assert saved["train"]["learning_rate"] == 1e-3 and "final_step" in fileio.read_json(
        workdir / "stages.json")
    (tmp_path / "nowhere.py").write_text(USER_CONFIG.replace("configs.lm", "configs.nope"))
    capsys.readouterr()
    assert _sweep(tmp_path, "smoke", "--grid=theta=1e4", config=tmp_path / "nowhere.py") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"posjax sweep: error: config file {tmp_path / 'nowhere.py'}: no module "
                          "named 'configs.nope' among the installed packages or in "
                          f"{tmp_path}, {REPO} (where posjax looks for your own modules): ")
    assert "\n" not in err


# Checkpoints by wall time, and a resumed sweep that says so.

def test_checkpoints_come_by_wall_time_too(tmp_path, data_flags, monkeypatch):
    """Every steps/4 lost up to a quarter of a run; with checkpoint_every_minutes a save
    also comes whenever that much time passed since the last (here: every step)."""
    from posjax.launch import cli
    from posjax.train import checkpoint

    saved, save = [], checkpoint.Checkpoints.save
    monkeypatch.setattr(checkpoint.Checkpoints, "save", lambda self, step, *a, **k: (
        saved.append(step), save(self, step, *a, **k))[1])
    argv = ["train", f"--config={LM}:smoke,steps=4", f"--workdir={tmp_path / 'run'}",
            "--config.train.checkpoint_every_steps=100", *data_flags]
    assert cli.main([*argv, "--config.train.checkpoint_every_minutes=1e-9"]) == 0
    assert saved == [1, 2, 3, 4]  # the step schedule alone saves at the stage's end, 4
    # The clock itself: due once the minutes passed since the last save, never at 0.
    now = [0.0]
    clock = checkpoint.SaveClock(5, clock=lambda: now[0])
    now[0] = 299.0
    assert not clock.due()
    now[0] = 300.0
    assert clock.due()
    clock.saved()
    assert not clock.due()
    assert not checkpoint.SaveClock(0, clock=lambda: 1e9).due()


def test_a_resumed_sweep_says_which_runs_it_resumes(tmp_path, capsys):
    """An interrupted sweep's re-run said nothing of resuming, and a new sweep nothing of how
    many runs it plans."""
    from posjax.config import config_json, configured

    runs = tmp_path / "sweep" / "runs"
    assert _sweep(tmp_path, "smoke,study=smoke") == 0  # the first time: nothing to resume
    assert capsys.readouterr().err.strip().splitlines() == ["posjax sweep: 2 runs to start"]
    done = runs / "encoding=rope"
    fileio.write_json(done / "stages.json", {"final_step": 6, "stages": []})
    fileio.write_json(done / "config.json", config_json(configured(
        f"{LM}:smoke,study=smoke,encoding=rope", [])))
    fileio.write_json(done / "extrapolation.json", {"lengths": []})
    (runs / "encoding=alibi" / "checkpoints" / "3").mkdir(parents=True)
    assert _sweep(tmp_path, "smoke,study=smoke") == 0
    assert capsys.readouterr().err.strip().splitlines() == [
        "posjax sweep: resuming encoding=alibi from step 3",
        "posjax sweep: 1 run done, 1 resumed, 0 to start"]
    # a run that trained every step, not yet scored, is finished, not resumed
    total = sum(steps for *_, steps in configured(
        f"{LM}:smoke,study=smoke,encoding=alibi", []).train.stages)
    (runs / "encoding=alibi" / "checkpoints" / str(total)).mkdir()
    assert _sweep(tmp_path, "smoke,study=smoke") == 0
    assert capsys.readouterr().err.strip().splitlines() == [
        f"posjax sweep: encoding=alibi trained all its {total} steps: finishing it",
        "posjax sweep: 1 run done, 0 resumed, 1 finished, 0 to start"]


def test_a_vmapped_seed_ahead_of_its_program_says_where_it_resumes(tmp_path, capsys):
    """kill -9 of a vmapped sweep left seed 0 a checkpoint at the last step and seed 1 none;
    the re-run said seed 0 'trained all its 6 steps: finishing it', then trained both seeds
    again from step 0, as the program's seeds resume from the step they all reached."""
    runs = tmp_path / "sweep" / "runs"
    arg = "smoke,encoding=rope,seeds=2"
    assert _sweep(tmp_path, arg, "--vmap_seeds") == 0
    capsys.readouterr()
    (runs / "encoding=rope,seed=0" / "checkpoints" / "6").mkdir(parents=True)
    (runs / "encoding=rope,seed=1").mkdir(parents=True)
    assert _sweep(tmp_path, arg, "--vmap_seeds") == 0
    assert capsys.readouterr().err.strip().splitlines() == [
        "posjax sweep: encoding=rope,seed=0 reached step 6, and the seeds it trains with "
        "step 0: training it again with them from step 0",
        "posjax sweep: 0 runs done, 0 resumed, 2 to start"]
    (runs / "encoding=rope,seed=1" / "checkpoints" / "3").mkdir(parents=True)
    assert _sweep(tmp_path, arg, "--vmap_seeds") == 0
    assert capsys.readouterr().err.strip().splitlines() == [
        "posjax sweep: encoding=rope,seed=0 reached step 6, and the seeds it trains with "
        "step 3: resuming it with them from step 3",
        "posjax sweep: resuming encoding=rope,seed=1 from step 3",
        "posjax sweep: 0 runs done, 2 resumed, 0 to start"]


def test_a_later_command_imports_a_recorded_config_file_that_imports_configs(tmp_path,
                                                                              elsewhere):
    """`posjax extrapolate --workdir` imports the run's recorded config files again
    (registry.import_files): one that imports configs.lm loads there too."""
    from posjax import registry

    mine = tmp_path / "recorded.py"
    mine.write_text(USER_CONFIG)
    registry.import_files([str(mine)], tmp_path / "run")
    assert sys.modules["configs.lm"].__file__ == str(REPO / "configs" / "lm.py")



def test_seeds_of_a_config_file_with_no_sweep_are_one_point_named_by_its_encoding(tmp_path,
                                                                                  capsys):
    """`seeds=N` over a user's file with no sweep() was refused (only --grid gave runs, and
    a grid cannot be seeds): its own config is the one point, each seed a run."""
    from posjax.launch import sweep

    mine = tmp_path / "mine.py"
    mine.write_text(USER_CONFIG)
    runs = sweep.expand(str(mine), "smoke,encoding=alibi,seeds=2,seed=3")
    assert [r.name for r in runs] == ["encoding=alibi,seed=3", "encoding=alibi,seed=4"]
    assert [r.config.train.seed for r in runs] == [3, 4]
    assert {r.config.train.learning_rate for r in runs} == {1e-3}
    assert sweep.group(str(mine), runs) == {"encoding=alibi": runs}
    assert _sweep(tmp_path, "smoke,seeds=2", "--vmap_seeds", config=mine) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "--seeds=0,1" in out[0] and "runs/encoding=rope,seed={seed}" in out[0]
    # seeds=1 asks for that one point's one run (it was refused, told to give seeds=N)
    assert [r.name for r in sweep.expand(str(mine), "smoke,seeds=1")] == ["encoding=rope"]
    assert _sweep(tmp_path, "smoke", config=mine) == 2  # no runs asked for at all
    err = capsys.readouterr().err.strip()
    assert err.endswith("defines no sweep(add, arg) function: give the runs with "
                        "--grid=KEY=V1,V2, or seeds=N in the arg for N seeds of the config as "
                        "the arg gives it") and "\n" not in err

# The install scripts: no CUDA build on a machine with no GPU, no stamp after a failed pip.

def _checkout_copy(tmp_path) -> Path:
    """The scripts and the files _venv.sh reads, in a folder of their own (no .venv)."""
    import shutil

    copy = tmp_path / "checkout"
    shutil.copytree(REPO / "scripts", copy / "scripts")
    for name in ("pyproject.toml", "constraints.txt", "constraints-gpu.txt"):
        shutil.copy(REPO / name, copy / name)
    return copy


HAS_GPU = Path("/dev/nvidia0").exists() or bool(__import__("shutil").which("nvidia-smi"))


@pytest.mark.skipif(HAS_GPU, reason="this machine has an NVIDIA GPU")
@pytest.mark.parametrize("command", [
    ["env", "POSJAX_DEVICE=gpu", "bash", "scripts/run.sh"], ["bash", "scripts/gpu_check.sh"],
    ["env", "POSJAX_DEVICE=gpu", "bash", "scripts/test.sh"]])
def test_the_gpu_build_is_refused_before_any_install_where_there_is_no_gpu(tmp_path, command):
    """gpu_check.sh installed gigabytes of CUDA wheels before saying jax saw no GPU, and
    POSJAX_DEVICE=gpu run.sh installed them and started the main job on the CPU."""
    import subprocess

    copy = _checkout_copy(tmp_path)
    done = subprocess.run(command, cwd=copy, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    no_gpu = ("this machine has no NVIDIA GPU (no /dev/nvidia0, nvidia-smi lists none), so "
              "nothing was installed")
    assert done.stderr.strip() == (
        f"scripts/gpu_check.sh checks the GPU path, and {no_gpu}: on a CPU, bash "
        "scripts/test.sh runs the tests" if "scripts/gpu_check.sh" in command else
        f"POSJAX_DEVICE=gpu: {no_gpu}: on a CPU run bash scripts/run.sh or scripts/test.sh "
        "without POSJAX_DEVICE")
    assert not (copy / ".venv").exists()


def test_a_wheel_folder_with_no_wheels_is_refused_before_pip(tmp_path):
    """POSJAX_WHEELS naming an empty folder: 17 lines of pip's errors came before the
    script's own line."""
    import subprocess

    copy = _checkout_copy(tmp_path)
    (tmp_path / "empty").mkdir()
    done = subprocess.run(["bash", "-c", "source scripts/_venv.sh || exit 2"], cwd=copy,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "POSJAX_WHEELS": str(tmp_path / "empty")})
    assert (done.returncode, done.stderr.strip()) == (
        2, f"POSJAX_WHEELS={tmp_path / 'empty'} holds no wheels (*.whl): make them with "
           "scripts/gpu_wheels.sh")
    assert not (copy / ".venv").exists()


def test_a_failed_install_leaves_no_stamp_so_the_next_run_installs(tmp_path):
    """With POSJAX_WHEELS naming an empty folder pip failed, yet the stamp was written (the
    callers' `source _venv.sh || exit 2` turns set -e off), so the next run skipped the
    install."""
    import subprocess

    copy = _checkout_copy(tmp_path)
    bin_dir = copy / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    (bin_dir / "pip").write_text("#!/bin/sh\necho 'pip: no matching distribution' >&2\nexit 1\n")
    (bin_dir / "pip").chmod(0o755)
    done = subprocess.run(["bash", "-c", "source scripts/_venv.sh || exit 2"], cwd=copy,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "POSJAX_DEVICE": "cpu"})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "pip could not install posjax into .venv (above: why); nothing is marked installed, "
        "so the next run tries again")
    assert not list((copy / ".venv").glob(".posjax-installed*"))


def test_a_run_name_longer_than_a_folder_name_is_refused_before_any_run_trains(tmp_path,
                                                                                capsys):
    """A 70-name layer pattern trained one run, then failed with `File name too long`,
    leaving that run `running` in sweep.json and --status failing the same way."""
    pattern = "+".join(["rope", "none"] * 35)
    assert _sweep(tmp_path, "smoke", f"--grid=layer_pattern=rope,{pattern}") == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("posjax sweep: error: run layer_pattern=rope+none+") and err.endswith(
        "is named by its values in 363 bytes, more than a folder name holds (255): give shorter "
        "values (a layer pattern repeats an entry with *N: rope*3+none)")
    assert not (tmp_path / "sweep").exists()


@pytest.mark.parametrize("key", ["pose", "randomize_positions"])
def test_drawn_positions_on_data_with_several_position_axes_are_one_line(key):
    """text_image.py:smoke with train.pose=512 trained into a 38-line reshape traceback after
    writing config.json: PoSE and randomized positions draw one number per token."""
    from posjax.config import configured
    from posjax.errors import ConfigError
    from posjax.experiment import Experiment

    config = configured(f"{REPO / 'configs' / 'text_image.py'}:smoke",
                        [f"--config.train.{key}=512"])
    with pytest.raises(ConfigError) as e:
        Experiment.from_config(config).check_positions_read()
    assert str(e.value) == (
        f"train.{key}=512 draws one position per token, and dataset 'text_image' gives each "
        f"token 3 position components: drop train.{key}, or train on text")


def test_plots_of_runs_in_unrelated_folders_ask_for_an_output_folder(tmp_path, monkeypatch,
                                                                     capsys):
    """Runs in ~/x/runs and /data/y/runs were plotted into the folder they share, / or /tmp,
    without a word."""
    from posjax.launch import cli

    mine, theirs = tmp_path / "mine" / "runs" / "bias", tmp_path / "clone" / "runs" / "rope"
    for run in (mine, theirs):
        fileio.write_json(run / "extrapolation.json", _text_result("stdlib_text"))
    monkeypatch.chdir(tmp_path / "mine")
    assert cli.main(["plot", "runs/bias", str(theirs)]) == 2
    assert capsys.readouterr().err == (
        f"posjax plot: error: the runs given are in different folders, which share only "
        f"{tmp_path}: give --output=FOLDER for the plots and the table\n")
    assert not list(tmp_path.glob("*.png"))
    assert cli.main(["plot", "runs/bias", str(theirs), "--output=both"]) == 0
    assert (tmp_path / "mine" / "both" / "extrapolation.png").exists()
    monkeypatch.chdir(tmp_path)  # under the current folder: the folder they share
    assert cli.main(["plot", "mine/runs/bias", "clone/runs/rope"]) == 0
    assert (tmp_path / "extrapolation.png").exists()


def test_a_sweeps_twin_runs_its_reordered_grid_and_an_only_that_matches_nothing(tmp_path,
                                                                              capsys):
    """A sweep() adding one config twice trained it twice under two names; the same --grid
    flags in another order were told to "drop the value"; --only matching nothing named no
    run."""
    twin = tmp_path / "twin.py"
    twin.write_text("from configs.lm import DEFAULTS, get_config\n\n\n"
                    "def sweep(add, arg=''):\n"
                    "    add(encoding='rope', theta=1e4)\n"
                    "    add(encoding='rope', theta=10000)\n")
    assert _sweep(tmp_path, "smoke", config=str(twin)) == 2
    assert capsys.readouterr().err.strip() == (
        f"posjax sweep: error: {twin}'s sweep() adds runs encoding=rope,theta=10000.0 and "
        "encoding=rope,theta=10000 the same config: add only one of them")
    assert _sweep(tmp_path, "encoding=rope,smoke", "--grid=theta=100,1e4",
                  "--grid=learning_rate=1e-3") == 0
    capsys.readouterr()
    assert _sweep(tmp_path, "encoding=rope,smoke", "--grid=learning_rate=1e-3",
                  "--grid=theta=100,1e4") == 2
    assert capsys.readouterr().err.strip() == (
        "posjax sweep: error: run learning_rate=1e-3,theta=100 is run "
        "theta=100,learning_rate=1e-3, which " f"{tmp_path / 'sweep'} holds, named with its "
        "keys in another order: give the --grid flags in the order of the command that made it")
    assert _sweep(tmp_path, "encoding=rope,smoke", "--grid=theta=100,1e4",
                  "--grid=learning_rate=1e-3", "--only=lr=1e-3") == 2
    assert capsys.readouterr().err.strip() == (
        "posjax sweep: error: --only='lr=1e-3' matches no run of this sweep; its runs: "
        "theta=100,learning_rate=1e-3, theta=1e4,learning_rate=1e-3 (a shell pattern: "
        "--only='*theta=100*')")


def test_the_hint_names_no_run_that_fails_the_same_check(tmp_path, capsys):
    """A retrieval sweep whose trials are too short for mqar named 'rope, none of its runs
    take it', and both failed the same way: the hint ran get_config alone, not the checks
    the plan runs."""
    from posjax.launch import cli

    retrieval = REPO / "configs" / "retrieval.py"
    argv = ["sweep", f"--config={retrieval}:task=mqar,size=smoke,seeds=2,encodings=rope+none,"
            "max_factor=2,seq_len=64", f"--workdir={tmp_path / 'sweep'}"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "mqar needs at least 49 tokens per trial" in err and "take it" not in err
