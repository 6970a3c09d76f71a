"""Several seeds in one vmapped program (`posjax train --seeds`, `posjax sweep --vmap_seeds`):
each seed's losses, evaluation and files are those of the seed trained alone (to float
tolerance; bit for bit with --seed_steps=in_turn), chunks of seeds where memory asks, resume
after a kill (bit for bit, also when the kill fell between the seeds' saves), and one seed
diverging stops that seed only.

Runs call `posjax.launch.cli.main` in-process; the kill needs its own process.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posjax import fileio
from posjax.experiment import Experiment
from posjax.launch import cli, sweep
from posjax.launch.executors import Outcome
from posjax.train import trainer
from posjax.train.checkpoint import restore_params

pytestmark = pytest.mark.slow

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
LM = str(CONFIGS / "lm.py")
# Evaluated at 32 and 64 tokens, which the tests' 200 kB corpus holds.
ARG = "smoke,seq_len=32,batch_size=8,steps=12,eval_max_factor=2"
EVERY_STEP = ("--config.train.checkpoint_every_steps=4", "--config.train.log_every_steps=1")
STEPS = 12
# Seed k of a vmapped program against seed k alone, as |a - b| <= RTOL |b|: the two differ
# only in how XLA rounds batched against single matmuls (measured: 1.2e-7 relative on the
# losses of 24 smoke steps, 8e-9 on the evaluation's perplexities).
RTOL = 1e-5
# The final weights, absolutely: Adam divides each gradient by its own running scale, so a
# weight whose gradient is near zero moves by what rounding leaves of it (seen: 1.4e-6 on a
# weight of 4e-3 after 12 steps on an AMD EPYC family 25 model 1; 1e-6 held on two other CPUs).
PARAMS_ATOL = 1e-5
SEEDS = (0, 1, 2)


def test_seed_slice_takes_each_seed_back_out_of_the_stack():
    trees = [{"w": jnp.full((2, 3), float(k)), "b": (jnp.arange(4) + k, jnp.int32(k))}
             for k in SEEDS]
    stacked = trainer.stack_seeds(trees)
    for k, tree in enumerate(trees):
        jax.tree.map(np.testing.assert_array_equal, trainer.seed_slice(stacked, k), tree)


def train_argv(workdir, data_flags, *extra, arg=ARG) -> list[str]:
    """The command line, EVERY_STEP's overrides but those `extra` gives (an override twice
    is refused)."""
    given = {flag.partition("=")[0] for flag in extra}
    every = [flag for flag in EVERY_STEP if flag.partition("=")[0] not in given]
    return ["train", f"--config={LM}:{arg}", f"--workdir={workdir}", "--noprogress",
            *every, *data_flags, *extra]


def losses(workdir) -> list[float]:
    return [row["loss"] for row in fileio.read_jsonl(Path(workdir) / "metrics.jsonl")]


def final_params(workdir):
    return restore_params(Experiment.from_workdir(workdir), workdir)[1]


def without_provenance(workdir) -> dict:
    return {k: v for k, v in fileio.read_json(Path(workdir) / "config.json").items()
            if k != "provenance"}


@pytest.fixture(scope="module")
def alone(tmp_path_factory, data_flags) -> dict[int, Path]:
    """Each seed trained and evaluated alone."""
    root = tmp_path_factory.mktemp("alone")
    for seed in SEEDS:
        assert cli.main(train_argv(root / str(seed), data_flags, "--extrapolate",
                                   arg=f"{ARG},seed={seed}")) == 0
    return {seed: root / str(seed) for seed in SEEDS}


@pytest.fixture(scope="module")
def vmapped(tmp_path_factory, data_flags) -> Path:
    """The three seeds with memory for two per program: seeds 0 and 1 in one vmapped
    program, then seed 2 in another."""
    root = tmp_path_factory.mktemp("vmapped")
    floor = Experiment.from_config(
        cli._flags(train_argv(root, data_flags)[1:], cli._define_train, config=True).config
    ).memory_floor(32, 8)
    sizes, placements = [], []

    def recording(state, rest, batch, **options):
        sizes.append(batch["inputs"].shape[0])
        placements.append(tuple(leaf.sharding for leaf in jax.tree.leaves(state)))
        return train_steps(state, rest, batch, **options)

    train_steps = trainer.train_steps
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trainer, "device_memory", lambda: 2 * floor + 1)
        patch.setattr(trainer, "train_steps", recording)
        assert cli.main(train_argv(root / "seed={seed}", data_flags, "--extrapolate",
                                   "--seeds=0,1,2")) == 0
    assert sizes == [2] * STEPS + [1] * STEPS  # seeds per program, step by step
    # Each program's first step takes its state placed as the step returns it: one compile.
    assert len(set(placements[:STEPS])) == len(set(placements[STEPS:])) == 1
    return root


def test_each_vmapped_seed_matches_that_seed_trained_alone(alone, vmapped):
    for seed in SEEDS:
        run = vmapped / f"seed={seed}"
        assert len(losses(run)) == STEPS
        np.testing.assert_allclose(losses(run), losses(alone[seed]), rtol=RTOL, atol=0)
        assert without_provenance(run) == without_provenance(alone[seed])
        assert without_provenance(run)["train"]["seed"] == seed
        ours, theirs = (fileio.read_json(r / "extrapolation.json") for r in (run, alone[seed]))
        assert [r["length"] for r in ours["lengths"]] == [32, 64]
        np.testing.assert_allclose([r["ppl"] for r in ours["lengths"]],
                                   [r["ppl"] for r in theirs["lengths"]], rtol=RTOL)
        assert ours["step"] == ours["total_steps"] == STEPS
        stages = fileio.read_json(run / "stages.json")
        assert stages["final_step"] == STEPS and "diverged" not in stages
        for a, b in zip(jax.tree.leaves(final_params(run)),
                        jax.tree.leaves(final_params(alone[seed])), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=PARAMS_ATOL)
    # Different seeds: different initialisations and data orders.
    assert losses(vmapped / "seed=0")[0] != losses(vmapped / "seed=1")[0]


def test_seeds_stepped_in_turn_are_the_seeds_trained_alone_bit_for_bit(tmp_path, alone,
                                                                        data_flags,
                                                                        monkeypatch):
    """--seed_steps=in_turn: the lone program on each seed's own state, never the vmapped
    one, so every loss, weight and perplexity is the lone run's exactly."""
    monkeypatch.setattr(trainer, "train_steps", lambda *a, **k: pytest.fail("vmapped"))
    assert cli.main(train_argv(tmp_path / "seed={seed}", data_flags, "--extrapolate",
                               "--seeds=0,1,2", "--seed_steps=in_turn")) == 0
    for seed in SEEDS:
        run = tmp_path / f"seed={seed}"
        assert losses(run) == losses(alone[seed])
        assert without_provenance(run) == without_provenance(alone[seed])
        ours, theirs = (fileio.read_json(r / "extrapolation.json") for r in (run, alone[seed]))
        assert [r["ppl"] for r in ours["lengths"]] == [r["ppl"] for r in theirs["lengths"]]
        for a, b in zip(jax.tree.leaves(final_params(run)),
                        jax.tree.leaves(final_params(alone[seed])), strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(("flags", "message"), [
    (("--seeds=0,1", "--seed_steps=batched"),
     "unknown --seed_steps way 'batched'; valid: in_turn, vmap"),
    (("--seed_steps=in_turn",), "--seed_steps=in_turn steps the seeds of --seeds: give "
                                "--seeds=0,1,... too, or drop it"),
    # A lone run trained into a folder named "{seed}".
    ((), "has {seed}, which --seeds fills (one run per seed): give --seeds=0,1,..., or drop "
         "{seed} from --workdir"),
    (("--seeds=",), "--seeds= gives no value: give one, or leave the flag out"),
])
def test_a_bad_seed_steps_is_one_line(tmp_path, data_flags, capsys, flags, message):
    assert cli.main(train_argv(tmp_path / "{seed}", data_flags, *flags)) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(message) and len(err.splitlines()) == 1, err
    assert not any(tmp_path.iterdir())


def test_seeds_per_program_fits_the_devices_memory(monkeypatch, alone):
    experiment = Experiment.from_workdir(alone[0])
    floor = experiment.memory_floor(32, 8)
    for memory, expected in [(floor - 1, 1), (2 * floor, 2), (100 * floor, 3)]:
        monkeypatch.setattr(trainer, "device_memory", lambda memory=memory: memory)
        assert trainer.seeds_per_program(experiment, 3) == expected


def test_a_rerun_of_finished_seeds_trains_nothing(vmapped, data_flags, capsys):
    before = {seed: losses(vmapped / f"seed={seed}") for seed in SEEDS}
    assert cli.main(train_argv(vmapped / "seed={seed}", data_flags, "--extrapolate",
                               "--seeds=0,1,2")) == 0
    assert {seed: losses(vmapped / f"seed={seed}") for seed in SEEDS} == before
    out = capsys.readouterr().out
    assert f"{vmapped / 'seed=2'}: stage=1" in out
    assert "posjax train: wrote" not in out  # and scores nothing again
    for seed in SEEDS:  # and says so, as a lone run's re-run does
        run = vmapped / f"seed={seed}"
        assert f"posjax train: {run}: training had finished\n" in out
        assert (f"posjax train: {run} was scored when it finished; posjax extrapolate "
                f"--workdir={run} scores it again\n") in out


def test_a_rerun_of_finished_seeds_with_another_config_is_checked_as_a_lone_runs(
        vmapped, tmp_path, data_flags, capsys):
    """Not "training had finished" over the old results: a changed config is refused in one
    line before any seed trains; with --force, no more steps is refused as well, and more
    steps train every seed on from its last checkpoint."""
    before = {seed: losses(vmapped / f"seed={seed}") for seed in SEEDS}
    for extra in ((), ("--force",)):
        assert cli.main(train_argv(vmapped / "seed={seed}", data_flags, "--seeds=0,1,2", *extra,
                                   arg=f"{ARG},theta=500")) == 2
        out, err = capsys.readouterr()
        assert len(err.strip().splitlines()) == 1 and "encoding.theta: 10000.0 -> 500.0" in err
        assert ("or --force to resume" in err) != bool(extra), err
        assert "training had finished" not in out
    assert {seed: losses(vmapped / f"seed={seed}") for seed in SEEDS} == before
    copy = tmp_path / "copy"
    shutil.copytree(vmapped, copy)
    capsys.readouterr()
    assert cli.main(train_argv(copy / "seed={seed}", data_flags, "--seeds=0,1,2", "--force",
                               arg=ARG.replace(f"steps={STEPS}", f"steps={STEPS + 2}"))) == 0
    kept = ", ".join(str(copy / f"seed={seed}" / "forced.json") for seed in SEEDS)
    assert f"; the old config.json is kept in {kept}\n" in capsys.readouterr().out  # each seed's
    for seed in SEEDS:
        assert losses(copy / f"seed={seed}")[:STEPS] == before[seed]
        assert len(losses(copy / f"seed={seed}")) == STEPS + 2


class _RecordingScorer:
    """A trainer Scorer that records the runs it scores; every run counts as scored but
    those named in `missing`."""

    def __init__(self, missing):
        self.missing, self.runs = set(missing), []

    def __call__(self, experiment, workdir, step, params):
        self.runs.append(Path(workdir).name)

    def check(self, experiment) -> None:
        pass

    def scored(self, experiment, workdir) -> bool:
        return Path(workdir).name not in self.missing


def test_a_rerun_scores_exactly_the_finished_seeds_without_their_result(vmapped, data_flags):
    # A retrieval run's result is retrieval_TASK.json, not extrapolation.json: the scorer,
    # not a file name in the trainer, says which seeds are scored.
    config = cli._flags(train_argv(vmapped, data_flags)[1:], cli._define_train,
                        config=True).config
    scorer = _RecordingScorer(missing={"seed=1"})
    trainer.train_seeds(config, str(vmapped / "seed={seed}"), SEEDS, progress=False,
                        evaluate=scorer)
    assert scorer.runs == ["seed=1"]


def test_a_workdir_without_the_seed_field_is_one_line(tmp_path, data_flags, capsys):
    assert cli.main(train_argv(tmp_path, data_flags, "--seeds=0,1")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "{seed}" in err, err
    assert not any(tmp_path.iterdir())


def test_resume_after_sigkill_matches_an_uninterrupted_program(tmp_path, data_flags,
                                                               vmapped):
    """Killed after step 4's checkpoints; seed 1's newest checkpoint then removed, as a kill
    between the two seeds' saves leaves it: both resume from the step they share."""
    argv = train_argv(tmp_path / "seed={seed}", data_flags, "--seeds=0,1")
    runs = [tmp_path / "seed=0", tmp_path / "seed=1"]
    proc = subprocess.Popen([sys.executable, "-m", "posjax", *argv],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        while proc.poll() is None:
            rows = fileio.read_jsonl(runs[1] / "metrics.jsonl")
            if all((r / "checkpoints" / "4").is_dir() for r in runs) and rows and (
                    rows[-1]["step"] >= 5):
                break
            time.sleep(0.01)
        assert proc.poll() is None, "the run ended before it could be stopped"
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert fileio.read_jsonl(runs[0] / "metrics.jsonl")[-1]["step"] < STEPS
    saved = sorted(int(p.name) for p in (runs[1] / "checkpoints").iterdir()
                   if p.name.isdigit())
    shutil.rmtree(runs[1] / "checkpoints" / str(saved[-1]))
    assert cli.main(argv) == 0
    for seed, run in enumerate(runs):
        assert [r["step"] for r in fileio.read_jsonl(run / "metrics.jsonl")] == list(
            range(1, STEPS + 1))
        # The same program (two seeds) as the uninterrupted one: bit for bit.
        assert losses(run) == losses(vmapped / f"seed={seed}")
        for a, b in zip(jax.tree.leaves(final_params(run)),
                        jax.tree.leaves(final_params(vmapped / f"seed={seed}")), strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_checkpoint_between_two_rows_resumes_each_seeds_rows(tmp_path, data_flags):
    """Rows every 5 steps, checkpoints every 3: the latest checkpoint removed, the program
    resumes two steps into a window, from each seed's own saved sums of it."""
    argv = train_argv(tmp_path / "seed={seed}", data_flags, "--seeds=0,1",
                      "--config.train.log_every_steps=5",
                      "--config.train.checkpoint_every_steps=3")
    runs = [tmp_path / "seed=0", tmp_path / "seed=1"]
    assert cli.main(argv) == 0
    uninterrupted = [fileio.read_jsonl(run / "metrics.jsonl") for run in runs]
    for run in runs:
        shutil.rmtree(run / "checkpoints" / str(STEPS))
    assert cli.main(argv) == 0
    for run, before in zip(runs, uninterrupted, strict=True):
        rows = fileio.read_jsonl(run / "metrics.jsonl")
        assert [r["step"] for r in rows] == [5, 10, 12]
        for key in ("loss", "acc", "grad_norm"):
            assert [r[key] for r in rows] == [r[key] for r in before], key


def test_a_stop_signal_saves_each_seed_at_the_step_it_reached(tmp_path, data_flags, vmapped,
                                                              monkeypatch, capsys):
    argv = train_argv(tmp_path / "seed={seed}", data_flags, "--seeds=0,1",
                      "--config.train.checkpoint_every_steps=100")
    runs = [tmp_path / "seed=0", tmp_path / "seed=1"]
    add, steps = trainer._Window.add, []

    def add_then_stop(self, batch_sums):
        add(self, batch_sums)
        steps.append(1)
        if len(steps) == 5:
            signal.raise_signal(signal.SIGTERM)

    monkeypatch.setattr(trainer._Window, "add", add_then_stop)
    assert cli.main(argv) == 128 + signal.SIGTERM
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "posjax train: interrupted at step 5: re-run the same command to resume from its "
        "checkpoint at step 5")
    assert all((run / "checkpoints" / "5").is_dir() for run in runs)
    monkeypatch.undo()
    assert cli.main(argv) == 0
    for seed, run in enumerate(runs):
        assert losses(run) == losses(vmapped / f"seed={seed}")
        for a, b in zip(jax.tree.leaves(final_params(run)),
                        jax.tree.leaves(final_params(vmapped / f"seed={seed}")), strict=True):
            np.testing.assert_array_equal(a, b)


BAD_STEP = 6


def poison_seed_1(train_steps):
    """train_steps whose seed 1 gets nan parameters (and says so) at step BAD_STEP."""
    def step(state, rest, batch, **options):
        state, sums = train_steps(state, rest, batch, **options)
        if int(state.step[0]) == BAD_STEP:
            state = state._replace(
                params=jax.tree.map(lambda p: p.at[1].set(jnp.nan), state.params))
            sums = {**sums, "diverged_at": sums["diverged_at"].at[1].set(BAD_STEP)}
        return state, sums
    return step


def test_one_diverging_seed_stops_alone_and_is_recorded(tmp_path, data_flags, vmapped,
                                                        monkeypatch, capsys):
    monkeypatch.setattr(trainer, "train_steps", poison_seed_1(trainer.train_steps))
    template = tmp_path / "runs" / "encoding=rope,seed={seed}"
    argv = train_argv(template, data_flags, "--seeds=0,1")
    assert cli.main(argv) == 1
    good, bad = (Path(str(template).replace("{seed}", str(s))) for s in (0, 1))
    err = capsys.readouterr().err.strip()
    assert err == (f"posjax train: error: {bad}: loss, gradients or parameters became nan/inf "
                   f"at step {BAD_STEP}; stopped, the last good checkpoint (step 4) is kept in "
                   f"{bad / 'checkpoints'}: lower train.learning_rate or raise "
                   "train.warmup_steps"), err
    # The healthy seed trained on, exactly as in the program where nothing diverged.
    assert losses(good) == losses(vmapped / "seed=0")
    assert fileio.read_json(good / "stages.json")["final_step"] == STEPS
    # The diverged one kept its last good checkpoint and rows, and says why it stopped.
    stages = fileio.read_json(bad / "stages.json")
    assert "final_step" not in stages and f"at step {BAD_STEP}" in stages["diverged"]
    assert [int(p.name) for p in (bad / "checkpoints").iterdir() if p.name.isdigit()] == [4]
    assert [r["step"] for r in fileio.read_jsonl(bad / "metrics.jsonl")][-1] < BAD_STEP
    # A sweep's rows: the healthy seed done, the diverged one failed with its own line.
    state = sweep.SweepState(tmp_path, LM, ARG, extrapolate=False)
    state.report(["encoding=rope,seed=0", "encoding=rope,seed=1"],
                 Outcome("failed", "posjax train: error: ...", 10.0))
    assert state.runs["encoding=rope,seed=0"]["status"] == "done"
    assert state.runs["encoding=rope,seed=0"]["seconds"] == 5.0
    assert state.runs["encoding=rope,seed=1"] == {
        "status": "failed", "error": stages["diverged"], "seconds": 5.0}
    # Re-running trains neither again: the diverged seed is retried alone.
    monkeypatch.undo()
    assert cli.main(argv) == 1
    assert f"{bad}: loss, gradients" in capsys.readouterr().err
    assert json.loads(json.dumps(fileio.read_json(bad / "stages.json"))) == stages


def poison_second_seed(train_step):
    """train_step for seeds stepped in turn, in seat order, whose second call of step
    BAD_STEP (seed 1's) gives nan parameters and says so."""
    calls = []

    def step(state, rest, batch, **options):
        state, sums = train_step(state, rest, batch, **options)
        calls.append(int(state.step))
        if calls[-1] == BAD_STEP and calls.count(BAD_STEP) == 2:
            state = state._replace(params=jax.tree.map(lambda p: p * jnp.nan, state.params))
            sums = {**sums, "diverged_at": jnp.full_like(sums["diverged_at"], BAD_STEP)}
        return state, sums
    return step


def test_one_diverging_seed_stepped_in_turn_stops_alone(tmp_path, data_flags, alone,
                                                        monkeypatch, capsys):
    """As vmapped (above): the diverged seed keeps its last good checkpoint, the healthy
    one trains on, here bit for bit its lone run. Stepped in seat order, without threads."""
    monkeypatch.setattr(trainer, "seed_threads", lambda group, seeds: None)
    monkeypatch.setattr(trainer, "train_step", poison_second_seed(trainer.train_step))
    template = tmp_path / "encoding=rope,seed={seed}"
    assert cli.main(train_argv(template, data_flags, "--seeds=0,1",
                               "--seed_steps=in_turn")) == 1
    good, bad = (Path(str(template).replace("{seed}", str(s))) for s in (0, 1))
    assert capsys.readouterr().err.strip() == (
        f"posjax train: error: {bad}: loss, gradients or parameters became nan/inf at step "
        f"{BAD_STEP}; stopped, the last good checkpoint (step 4) is kept in "
        f"{bad / 'checkpoints'}: lower train.learning_rate or raise train.warmup_steps")
    assert losses(good) == losses(alone[0])
    assert fileio.read_json(good / "stages.json")["final_step"] == STEPS
    assert f"at step {BAD_STEP}" in fileio.read_json(bad / "stages.json")["diverged"]
    assert [int(p.name) for p in (bad / "checkpoints").iterdir() if p.name.isdigit()] == [4]


def test_a_sweep_with_vmap_seeds_trains_a_points_seeds_in_one_command(tmp_path, data_flags,
                                                                      alone, capsys):
    argv = ["sweep", f"--config={LM}:{ARG},study=smoke,seeds=2", f"--workdir={tmp_path}",
            "--only=encoding=rope,*", "--vmap_seeds", *EVERY_STEP, *data_flags]
    assert cli.main([*argv, "--print_commands"]) == 0
    command = capsys.readouterr().out.strip()
    assert len(command.splitlines()) == 1 and "--seeds=0,1" in command
    assert "encoding=rope,seed={seed}" in command and command.endswith("--extrapolate")
    assert cli.main(argv) == 0
    runs = fileio.read_json(tmp_path / "sweep.json")["runs"]
    assert set(runs) == {"encoding=rope,seed=0", "encoding=rope,seed=1"}
    for seed, name in enumerate(sorted(runs)):
        entry = runs[name]
        assert entry["status"] == "done" and entry["command"] == command
        assert set(entry["summary"]["ppl"]) == {"32", "64"}
        np.testing.assert_allclose(losses(tmp_path / "runs" / name), losses(alone[seed]),
                                   rtol=RTOL, atol=0)
    assert runs["encoding=rope,seed=0"]["seconds"] == runs["encoding=rope,seed=1"]["seconds"]
    out = capsys.readouterr().out
    assert "| rope |" in out  # the sweep's table, the mean of the two seeds
    assert cli.main(["plot", str(tmp_path)]) == 0
    assert "[" in (tmp_path / "extrapolation.md").read_text()  # the seeds' range


def test_a_vmapped_group_of_seeds_not_from_0_trains_them(tmp_path, data_flags, capsys):
    """Seeds 5 and 6 of seed=5,seeds=2 (or seeds 1 and 2 after seed 0 trained alone) failed
    every run: the group's command kept the first seed's seed=K in its arg, which train
    refuses beside --seeds."""
    argv = ["sweep", f"--config={LM}:{ARG},study=smoke,seed=5,seeds=2", f"--workdir={tmp_path}",
            "--only=encoding=rope,*", "--vmap_seeds", *data_flags]
    assert cli.main([*argv, "--print_commands"]) == 0
    command = capsys.readouterr().out.strip()
    assert "--seeds=5,6" in command and "seed=5" not in command.split("--workdir")[0]
    assert cli.main(argv) == 0
    runs = fileio.read_json(tmp_path / "sweep.json")["runs"]
    assert {name: entry["status"] for name, entry in runs.items()} == {
        "encoding=rope,seed=5": "done", "encoding=rope,seed=6": "done"}
    for seed in (5, 6):
        assert fileio.read_json(tmp_path / "runs" / f"encoding=rope,seed={seed}" /
                                "config.json")["train"]["seed"] == seed


SEED_SIZED = f"""
from posjax.config import load_config_module

_lm = load_config_module({LM!r})


def get_config(arg):
    config = _lm.get_config(arg)
    config.model.d_model = 32 * (1 + config.train.seed)  # the seed changes more than the seed
    return config


def sweep(add, arg=""):
    add(encoding="rope")
"""


def test_only_runs_that_differ_in_train_seed_alone_are_grouped(tmp_path):
    runs = sweep.expand(LM, "smoke,study=smoke,seeds=3")
    groups = sweep.group(LM, runs)
    assert {name: [r.seed for r in members] for name, members in groups.items()} == {
        "encoding=rope": [0, 1, 2], "encoding=alibi": [0, 1, 2]}
    other = tmp_path / "seed_sized.py"
    other.write_text(SEED_SIZED)
    runs = sweep.expand(str(other), "smoke,seeds=2")
    assert list(sweep.group(str(other), runs)) == ["encoding=rope,seed=0",
                                                   "encoding=rope,seed=1"]
    assert list(sweep.group(LM, sweep.expand(LM, "smoke,study=smoke"))) == [
        "encoding=rope", "encoding=alibi"]  # one seed: nothing to group


@pytest.mark.parametrize(("flags", "message"), [
    (("--seeds=0,x",), "--seeds=0,x: 'x' is not a seed >= 0"),
    (("--seeds=0,1", "--num_processes=2"), "--seeds trains in one process"),
])
def test_bad_seeds_flags_are_one_line(tmp_path, data_flags, capsys, flags, message):
    assert cli.main(train_argv(tmp_path / "{seed}", data_flags, *flags)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(("config", "arg", "needs_text", "stages"), [
    # two of RoFormer's stages at toy size (the smoke size's six compile five shapes), an MLM
    # encoder
    ("mlm.py", "smoke,encoding=rope", True, ["--config.train.stages=((16,4,3),(32,4,2))"]),
    ("algorithmic.py", "smoke,encoding=rope,randomize_positions=128,steps=6", False, []),
])
def test_other_model_kinds_stages_and_randomized_positions_match_alone(
        tmp_path, data_flags, config, arg, needs_text, stages):
    flags = [*(data_flags if needs_text else [f"--config.data.data_dir={tmp_path / 'data'}"]),
             "--noprogress", "--config.train.log_every_steps=1", *stages]
    base = ["train", f"--config={CONFIGS / config}:{arg}"]
    assert cli.main([*base, f"--workdir={tmp_path / 'seed={seed}'}", "--seeds=0,1",
                     *flags]) == 0
    for seed in (0, 1):
        assert cli.main(["train", f"--config={CONFIGS / config}:{arg},seed={seed}",
                         f"--workdir={tmp_path / f'alone{seed}'}", *flags]) == 0
        np.testing.assert_allclose(losses(tmp_path / f"seed={seed}"),
                                   losses(tmp_path / f"alone{seed}"), rtol=RTOL, atol=0)
        stages = fileio.read_json(tmp_path / f"seed={seed}" / "stages.json")["stages"]
        assert [s["stage"] for s in stages] == [
            s["stage"]
            for s in fileio.read_json(tmp_path / f"alone{seed}" / "stages.json")["stages"]]
    assert losses(tmp_path / "seed=0") != losses(tmp_path / "seed=1")


@pytest.mark.parametrize(("platform", "group", "seeds", "cores", "threads"), [
    ("cpu", "in_turn", 3, 2, 2), ("cpu", "in_turn", 2, 8, 2), ("cpu", "in_turn", 3, 1, None),
    ("cpu", "vmap", 3, 4, None), ("gpu", "in_turn", 3, 4, None)])
def test_seeds_in_turn_are_stepped_from_one_thread_per_core(monkeypatch, platform, group,
                                                            seeds, cores, threads):
    """On a CPU, in turn steps as many seeds at once as the process has cores (at most one
    thread per seed); with one core, vmapped, or on an accelerator, no threads."""
    monkeypatch.setattr(trainer.provenance, "allowed_cores", lambda: cores)
    monkeypatch.setattr(jax, "default_backend", lambda: platform)
    pool = trainer.seed_threads(group, seeds)
    assert (pool and pool._max_workers) == threads
    if pool:
        pool.shutdown()


def test_a_seed_new_to_a_program_of_trained_seeds_is_refused_not_their_restart(
        vmapped, tmp_path, data_flags, capsys):
    """--seeds=0,1,2 after seeds 0 and 1 had trained (seed 2 new) restarted every seed from
    step 0 without a word, deleting the trained seeds' checkpoints."""
    for seed in (0, 1):  # stopped at step 8 of 12
        shutil.copytree(vmapped / f"seed={seed}", tmp_path / f"seed={seed}")
        shutil.rmtree(tmp_path / f"seed={seed}" / "checkpoints" / str(STEPS))
        summary = fileio.read_json(tmp_path / f"seed={seed}" / "stages.json")
        summary.pop("final_step")
        fileio.write_json(tmp_path / f"seed={seed}" / "stages.json", summary)
    kept = sorted(p.name for p in (tmp_path / "seed=0" / "checkpoints").iterdir())
    assert cli.main(train_argv(tmp_path / "seed={seed}", data_flags, "--seeds=0,1,2")) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"posjax train: error: {tmp_path / 'seed=0'} has trained to step 8 and "
        f"{tmp_path / 'seed=2'} not at all: the seeds of one program start from one step, so "
        f"{tmp_path / 'seed=0'} would train again from 0; train {tmp_path / 'seed=2'} alone "
        "(its seed alone in --seeds), then the others"), err
    assert sorted(p.name for p in (tmp_path / "seed=0" / "checkpoints").iterdir()) == kept
