"""Several processes, one run, on JAX's own runtime: 2 CPU processes on 127.0.0.1 (Gloo
collectives) against 1 process with 2 simulated devices on the same global batches;
killing one process and re-running both; a torn checkpoint set aside once; process 0 alone
writes; extrapolation in 2 processes. And the fsdp mesh: 4 simulated devices, a sharded
state against the 2 processes.

Each process runs `posjax train` then `posjax extrapolate` in one interpreter (one
`jax.distributed` join), so the whole file costs a few process start-ups and compiles.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from posjax import fileio
from posjax.runlock import exclusive

pytestmark = pytest.mark.slow

LM = str(Path(__file__).resolve().parents[1] / "configs" / "lm.py")
# 24 steps: the killed run must still be training when the test sees its step-4 checkpoint
# (with the session's compilation cache, 8 steps were done before the kill landed).
STEPS = 24
ARG = f"smoke,seq_len=32,batch_size=8,steps={STEPS}"
OVERRIDES = ("--config.train.checkpoint_every_steps=4", "--config.train.log_every_steps=1")
# Train, then (unless told "train-only") score 64 tokens, in one interpreter; argv: workdir,
# "train-only" or "evaluate", then train flags.
SCRIPT = textwrap.dedent("""
    import sys
    from posjax.launch import cli
    workdir, what, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    cluster = [a for a in rest if a.split("=")[0] in
               ("--coordinator", "--num_processes", "--process_id")]
    code = cli.main(["train", f"--config={LM}:{ARG}", f"--workdir={workdir}", "--noprogress",
                     *rest])
    if what == "train-only":
        sys.exit(code)
    code = code or cli.main(["extrapolate", f"--workdir={workdir}", "--lengths=64",
                             *cluster])
    sys.exit(code)
""").replace("{LM}", LM).replace("{ARG}", ARG)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shared_dir(tmp_path_factory, worker_id: str, name: str) -> Path:
    """A folder every xdist worker of this session sees (without xdist: this session's)."""
    base = tmp_path_factory.getbasetemp()
    return (base if worker_id == "master" else base.parent) / name


def env(cache: Path, devices: int = 1) -> dict:
    return dict(os.environ, JAX_PLATFORMS="cpu", JAX_COMPILATION_CACHE_DIR=str(cache),
                JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                XLA_FLAGS=" ".join([*os.environ.get("XLA_FLAGS", "").split(),
                                    f"--xla_force_host_platform_device_count={devices}"]))


def start_two(workdir: Path, data_flags, cache: Path,
              what: str = "evaluate") -> list[subprocess.Popen]:
    """Both processes of a 2-process run of SCRIPT."""
    port = free_port()
    return [subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(workdir), what, *data_flags, *OVERRIDES,
         f"--coordinator=127.0.0.1:{port}", "--num_processes=2", f"--process_id={i}"],
        env=env(cache), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(2)]


def finish(processes) -> list[tuple[int, str]]:
    """(exit code, stderr) of each process; a process still running after 240 s (a hang)
    fails the test, and none is left behind."""
    outcomes = []
    try:
        for p in processes:
            _, err = p.communicate(timeout=240)
            outcomes.append((p.returncode, err))
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outcomes


def losses(workdir: Path) -> list[float]:
    return [r["loss"] for r in fileio.read_jsonl(workdir / "metrics.jsonl")]


@pytest.fixture(scope="session")
def two_process_run(tmp_path_factory, worker_id, data_flags, compile_cache) -> Path:
    """A finished 2-process run (with its extrapolation), trained once per session by
    whichever worker needs it first; the tests only read it."""
    workdir = shared_dir(tmp_path_factory, worker_id, "two_processes")
    with exclusive(workdir.with_name("two_processes.lock")):
        if not (workdir / "extrapolation.json").exists():
            for code, err in finish(start_two(workdir, data_flags, compile_cache)):
                assert code == 0, err[-3000:]
    return workdir


def test_two_processes_match_one_process_with_two_devices(two_process_run, tmp_path,
                                                          data_flags, compile_cache):
    one = tmp_path / "one"
    # The same global batches: two data shards, both read by the one process.
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(one), "evaluate", *data_flags, *OVERRIDES,
         "--config.data.num_shards=2"], env=env(compile_cache, devices=2),
        capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    np.testing.assert_allclose(losses(two_process_run), losses(one), rtol=1e-5, atol=1e-5)
    two_eval, one_eval = (fileio.read_json(d / "extrapolation.json")
                          for d in (two_process_run, one))
    for a, b in zip(two_eval["lengths"], one_eval["lengths"], strict=True):
        assert a["length"] == b["length"]
        np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-5)


def test_process_zero_alone_writes_and_each_saves_its_data_position(two_process_run):
    rows = fileio.read_jsonl(two_process_run / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))  # one writer, no doubles
    assert fileio.read_json(two_process_run / "config.json")["provenance"]["process_count"] == 2
    positions = sorted(p.name for p in (two_process_run / "checkpoints" / str(STEPS) /
                                        "iterator").glob("*.json"))
    assert positions == ["process_0-of-2.json", "process_1-of-2.json"]
    assert (two_process_run / ".lock-process-1").exists()


@pytest.mark.parametrize("killed", [1, 0])
def test_killing_one_process_then_rerunning_both_resumes_exactly(two_process_run, tmp_path,
                                                                 data_flags, compile_cache,
                                                                 killed):
    workdir = tmp_path / "killed"
    processes = start_two(workdir, data_flags, compile_cache, "train-only")
    deadline = time.monotonic() + 300
    while not (workdir / "checkpoints" / "4").is_dir():
        assert time.monotonic() < deadline and processes[killed].poll() is None
        time.sleep(0.1)
    processes[killed].send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    (survivor_code, err), _ = finish([processes[1 - killed], processes[killed]])
    # The survivor stops at once instead of waiting out the heartbeat (20 s) ...
    assert time.monotonic() - killed_at < 15, err[-3000:]
    if survivor_code == -signal.SIGABRT:
        # ... but where the coordinator died, JAX's client may abort it first (see
        # docs/sweeps.md, "Kill and resume"): its lost connection is fatal there.
        assert killed == 0 and "JAX distributed service detected fatal errors" in err, err
    else:  # ... in one line of posjax's
        assert survivor_code == 1, err[-3000:]
        assert "another process of this run stopped" in err.strip().splitlines()[-1], \
            err[-3000:]
    assert not (workdir / "stages.json").exists()
    for code, err in finish(start_two(workdir, data_flags, compile_cache, "train-only")):
        assert code == 0, err[-3000:]
    np.testing.assert_array_equal(losses(workdir), losses(two_process_run))


def test_an_unreadable_checkpoint_is_set_aside_once_and_both_processes_resume_before_it(
        two_process_run, torn_copy, data_flags, compile_cache):
    workdir = torn_copy(two_process_run, STEPS)
    (zero_code, zero_err), (one_code, one_err) = finish(
        start_two(workdir, data_flags, compile_cache, "train-only"))
    assert zero_code == 0 and one_code == 0, (zero_err + one_err)[-3000:]
    warnings = [line for err in (zero_err, one_err) for line in err.splitlines()
                if line.startswith("warning: checkpoint")]
    assert len(warnings) == 1 and f"step {STEPS} is unreadable" in warnings[0], warnings
    assert (workdir / "checkpoints.unreadable" / str(STEPS)).is_dir()
    assert (workdir / "checkpoints" / str(STEPS)).is_dir()  # saved again by the resumed run
    np.testing.assert_array_equal(losses(workdir), losses(two_process_run))


def test_fsdp_on_four_devices_matches_the_two_process_run(tmp_path, data_flags, compile_cache,
                                                          two_process_run):
    # A 2 x 2 (data, fsdp) mesh on the 2-process run's batches (two data shards): the
    # sharded state gives that run's losses (which the 1-process, 2-device run also gives).
    # Then one step of the sharded state, whose result must keep the rules' sharding
    # (nothing silently gathered back to full copies).
    script = textwrap.dedent("""
        import sys, jax
        from posjax.launch import cli
        from posjax.config import load_config
        from posjax.experiment import Experiment
        from posjax.train import optim, sharding
        from posjax.train.steps import initial_state, train_step
        root, *flags = sys.argv[1:]
        assert cli.main(["train", f"--config={LM}:{ARG}", f"--workdir={root}/fsdp",
                         "--noprogress", "--config.train.mesh=(('data', 2), ('fsdp', 2))",
                         *flags]) == 0
        config = load_config(f"{root}/fsdp")
        experiment = Experiment.from_config(config)
        model = experiment.build()
        tx = optim.optimizer(config.train, experiment.total_steps)
        mesh = sharding.make_mesh(config.train.mesh)
        state = initial_state(model.params, tx, config.train.seed)
        state = jax.device_put(state, sharding.state_shardings(state, mesh,
                                                               config.train.sharding_rules))
        batch = next(experiment.train_iterator(experiment.stages[0]))
        new, _ = train_step(state, jax.device_put(model.rest, sharding.replicated(mesh)),
                            sharding.global_batch(batch, mesh), graphdef=model.graphdef,
                            tx=tx, input_key=experiment.input_key)
        for before, after in zip(jax.tree.leaves(state), jax.tree.leaves(new), strict=True):
            assert after.sharding.is_equivalent_to(before.sharding, after.ndim), after.sharding
        kernels = [leaf for leaf in jax.tree.leaves(new.params) if leaf.ndim == 2]
        assert kernels and all("fsdp" in leaf.sharding.spec for leaf in kernels)
    """).replace("{LM}", LM).replace("{ARG}", ARG)
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path), *data_flags,
                             *OVERRIDES, "--config.data.num_shards=2"],
                            env=env(compile_cache, devices=4),
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    np.testing.assert_allclose(losses(tmp_path / "fsdp"), losses(two_process_run),
                               rtol=1e-5, atol=1e-5)


def _one_of_two(tmp_path, data_flags, cache, port, **extra_env) -> subprocess.Popen:
    """Process 0 of a 2-process run whose process 1 never starts."""
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "run"), "train-only", *data_flags,
         f"--coordinator=127.0.0.1:{port}", "--num_processes=2", "--process_id=0"],
        env=dict(env(cache), **extra_env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)


def test_a_process_whose_peers_never_join_ends_in_one_line_after_its_wait(
        tmp_path, data_flags, compile_cache):
    """Alone, process 0 printed nothing, ignored SIGTERM and Ctrl-C, and after JAX's 300 s
    aborted with a C++ stack dump."""
    port = free_port()
    alone = _one_of_two(tmp_path, data_flags, compile_cache, port, POSJAX_JOIN_TIMEOUT_S="3")
    [(code, err)] = finish([alone])
    assert code == 1 and err.splitlines() == [
        f"posjax: joining the run as process 0 of 2 at 127.0.0.1:{port} (waiting up to 3 s "
        "for every process)",
        f"posjax: the run's processes did not all join within 3 s (process 0 of 2 at "
        f"127.0.0.1:{port}): start every process's command, with the same --coordinator and "
        "--num_processes and each its own --process_id, then re-run them"], err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_while_waiting_for_the_peers_is_one_line_at_once(tmp_path, data_flags,
                                                                 compile_cache, signum):
    waiting = _one_of_two(tmp_path, data_flags, compile_cache, free_port())
    while "joining the run" not in (line := waiting.stderr.readline()):
        assert line, "exited before joining"
    waiting.send_signal(signum)
    [(code, err)] = finish([waiting])
    assert (code, err) == (128 + signum, "posjax: interrupted while joining the run's processes, "
                                "before any work: re-run the command\n")


def test_a_coordinator_port_in_use_is_one_line(tmp_path, data_flags, compile_cache):
    """Process 0 died in a 16-line 'Failed to start RPC server' traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        [(code, err)] = finish([_one_of_two(tmp_path, data_flags, compile_cache, port)])
    assert (code, err) == (2, f"posjax train: error: --coordinator=127.0.0.1:{port}: port "
                              f"{port} is in use on this host: give every process another "
                              "free port\n")


def test_a_peers_failure_is_named_in_one_readable_line():
    """After kill -9 of process 1 the survivor said "Error dispatching computation: " four
    times and was cut inside the bracket of the cause."""
    from posjax.train.distributed import peer_cause

    error = RuntimeError(
        "INTERNAL: " + "Error dispatching computation: " * 4 + "Gloo all-reduce failed: "
        "[external/gloo/gloo/transport/tcp/pair.cc:534] Read error [127.0.0.1]:4242: "
        "Connection reset by peer\nthe stack")
    assert peer_cause(error) == (
        "INTERNAL: Error dispatching computation: Gloo all-reduce failed: [external/gloo/gloo/"
        "transport/tcp/pair.cc:534] Read error [127.0.0.1]:4242: Connection reset by peer")
    assert peer_cause(RuntimeError("word " * 60), width=28) == "word word word word word ..."
    assert peer_cause(ValueError("")) == "ValueError"
