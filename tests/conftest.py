"""Fixtures shared by the end-to-end test files.

The tests compile hundreds of small programs and run each a few times, so XLA's optimisation
passes cost more than they save: JAX_DISABLE_MOST_OPTIMIZATIONS (set here before JAX is
imported, and inherited by the processes the tests start) took tests/test_attention.py and
tests/test_models.py from 230 s to 144 s on this project's 2 cores, all passing. Every
comparison a test makes is between programs compiled alike; the benchmarks and real runs
keep XLA's full optimisation.

Every program, however quick to compile, goes to JAX's persistent compilation cache
(JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0, set here for the test processes and the ones
they start): the suite compiles thousands of small programs, each under JAX's default 1 s
threshold, and scripts/test.sh points the cache at .venv/jax-cache, so a second run here
reads them back (CI's fresh clone fills it). A cache entry is keyed by the program, the
flags and the jax version, so a stale one is never read.

XLA:CPU's older fusion emitters (--xla_cpu_use_fusion_emitters=false, added to XLA_FLAGS here
and so inherited too) compile these small programs faster: tests/test_models.py took 52 s
against 70 s with no compilation cache, all passing. So does compiling each program's LLVM
module whole (--xla_cpu_parallel_codegen_split_count=1) rather than split for threads that
three test workers on two cores leave no room for: its AdamW and packing tests took 62 s and
71 s against 69 s and 74 s split, two pairs with no compilation cache.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
# The test workers (scripts/test.sh: three) and the processes they start share one GPU under
# POSJAX_DEVICE=gpu: each allocates on demand, as in scripts/gpu_check.sh, not 75 % at start.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
# XLA ends a process whose XLA_FLAGS names a flag it does not know, and its CPU flags come
# and go between releases: these two were measured on jaxlib 0.10 (constraints.txt), so any
# other jaxlib (a GPU image's own, say) runs the tests without them.
if metadata.version("jaxlib").startswith("0.10."):
    for _flag in ("--xla_cpu_use_fusion_emitters=false",
                  "--xla_cpu_parallel_codegen_split_count=1"):
        if _flag.partition("=")[0] not in os.environ.get("XLA_FLAGS", ""):
            os.environ["XLA_FLAGS"] = " ".join([*os.environ.get("XLA_FLAGS", "").split(), _flag])

import jax  # noqa: E402
import pytest  # noqa: E402

from posjax import data  # noqa: E402

MAX_TEXT_BYTES = 200_000

# Float32 matmuls at full precision on every device: a GPU runs them in TF32 by default
# (about 1e-3 relative), which no float32 reference comparison here is written for. Tests of
# bfloat16 and fused paths set their model's dtype and take tolerances from it.
jax.config.update("jax_default_matmul_precision", "highest")

# The files that take longest on one worker, slowest first (seconds of one worker each, from
# `--durations=0` on this project's 2 cores, 2026-12-02: test_sweep 155, test_train 99 ...
# test_cli_errors 28; every other file under 25). scripts/test.sh hands each file whole to a
# worker in this order (--dist loadfile --no-loadscope-reorder): with xdist's own order (most
# tests first) test_distributed, 73 s of few tests, came last and ran alone for its last 45 s.
SLOWEST_FILES = (
    "test_sweep.py", "test_train.py", "test_models.py", "test_report.py", "test_distributed.py",
    "test_vmap_seeds.py", "test_extending.py", "test_attention.py", "test_docs_commands.py",
    "test_gpu_path.py", "test_flash_bias.py", "test_bench.py", "test_probes.py",
    "test_extrapolate.py", "test_gated_deltanet.py", "test_encoders_content.py",
    "test_first_month.py", "test_configs.py", "test_cli_errors.py")


def pytest_collection_modifyitems(items):
    """The slowest files first (SLOWEST_FILES), the others after them in their own order."""
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="session")
def small_data(tmp_path_factory) -> dict:
    """config.data fields that point a run at a 200 kB stdlib corpus, built once per session."""
    fields = {"data_dir": str(tmp_path_factory.getbasetemp() / "posjax_data"),
              "max_text_bytes": MAX_TEXT_BYTES}
    cfg = data.default_data_config("stdlib_text")
    cfg.update(**fields)
    data.sources.prepare(data.kind_of(cfg))
    return fields


@pytest.fixture(scope="session")
def data_flags(small_data) -> list[str]:
    """The same as command-line overrides."""
    return [f"--config.data.{key}={value}" for key, value in small_data.items()]


@pytest.fixture(scope="session", autouse=True)
def compile_cache(tmp_path_factory, worker_id) -> Path:
    """The persistent compilation cache of the test processes and of the processes they
    start (which inherit the variable), shared by the xdist workers: the one
    JAX_COMPILATION_CACHE_DIR names (scripts/test.sh: .venv/jax-cache), else one for this
    session. The smoke model's programs, which the end-to-end tests train in many fresh
    processes, then compile once instead of in each."""
    named = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    base = tmp_path_factory.getbasetemp()
    cache = Path(named) if named else (
        (base if worker_id == "master" else base.parent) / "jax_cache_session")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = str(cache)
    return cache


@pytest.fixture(scope="module", autouse=True)
def programs_of_one_file():
    """Drop JAX's in-memory programs after each test file. Every XLA:CPU executable a
    process holds takes about three memory maps; a worker keeping the programs of its ~1200
    tests passed Linux's 65530 maps per process (vm.max_map_count) near the end of the
    suite and died in the next load (an abort or a segfault in deserialize_executable).
    A later file that needs a program again reads it back from the persistent cache.
    After each file is also the fastest of the ways timed (2026-12-04, nine unit-test files
    on one worker, each pair side by side on 2 cores, caches cold): keeping the programs
    until the worker held 20000 maps took 323 s and 277 s where this took 277 s and 247 s;
    dropping them after each test took 323 s against 250 s. Caching only the programs that
    took 0.1 s or more to compile changed nothing (254 s against 252 s)."""
    yield
    jax.clear_caches()


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a connection fails the test (for code that must work offline)."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture
def one_error_line(capsys):
    """one_error_line(): the one line a refused command printed on stderr, stripped; fails
    the test on a traceback or on more lines than one."""
    def read() -> str:
        err = capsys.readouterr().err.strip()
        assert "Traceback" not in err and len(err.splitlines()) == 1, err
        return err
    return read


@pytest.fixture
def lock_held_elsewhere():
    """lock_held_elsewhere(folder): a context manager in which another process holds
    `folder`'s run lock (posjax.runlock.RunLock; POSIX locks are per process, so this one's
    own would not conflict); yields that process, killed on exit."""

    @contextlib.contextmanager
    def held(folder: Path):
        holder = subprocess.Popen(
            [sys.executable, "-c", "import time; from posjax.runlock import RunLock; "
             f"lock = RunLock({str(folder)!r}).acquire(); print('locked', flush=True); "
             "time.sleep(60)"],
            stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "locked"
            yield holder
        finally:
            holder.kill()
            holder.wait()
            holder.stdout.close()
    return held


@pytest.fixture(scope="session")
def my_config() -> str:
    """docs/extending.md's my_config.py, as the page shows it: a reader's own config file
    with its own encoding, sandwich_ext."""
    page = (Path(__file__).parents[1] / "docs" / "extending.md").read_text()
    return page.split("```python\n# my_config.py\n")[1].split("```")[0]


@pytest.fixture
def torn_copy(tmp_path):
    """torn_copy(run, step): a copy of the run directory `run` in this test's tmp_path whose
    checkpoint `step` has every file overwritten, as a torn disk write leaves it."""
    def copy(run: Path, step: int) -> Path:
        torn = tmp_path / "torn"
        shutil.copytree(run, torn)
        for path in (torn / "checkpoints" / str(step)).rglob("*"):
            if path.is_file():
                path.write_bytes(b"torn")
        return torn
    return copy


@pytest.fixture
def tensorboard_events():
    """tensorboard_events(folder): every TensorBoard Event in the event files under `folder`,
    file by file in name order, read as TFRecords (uint64 length, uint32 crc, the Event
    proto, uint32 crc)."""
    from tensorboardX.proto import event_pb2

    def read(folder: Path) -> list:
        events = []
        for path in sorted(Path(folder).rglob("events.out.tfevents.*")):
            raw, offset = path.read_bytes(), 0
            while offset < len(raw):
                length = int.from_bytes(raw[offset:offset + 8], "little")
                events.append(event_pb2.Event.FromString(raw[offset + 12:offset + 12 + length]))
                offset += 16 + length
        return events
    return read


@pytest.fixture
def ray_home(monkeypatch) -> Path:
    """This test's own Ray state, so none left on the machine counts: a HOME whose
    .ray/auth_token holds a fresh token (as one local Ray run leaves behind), a Ray temp dir
    (RAY_TMPDIR) and none of Ray's variables from outside. Its token file."""
    # In /tmp, not tmp_path: Ray's socket paths under its temp dir must fit in 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="posjax-ray-"))
    for name in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH",
                 "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(root / "home"))
    monkeypatch.setenv("RAY_TMPDIR", str(root / "tmp"))
    token = root / "home" / ".ray" / "auth_token"
    token.parent.mkdir(parents=True)
    (root / "tmp").mkdir()
    token.write_text(secrets.token_hex(32))
    yield token
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def catches_signal():
    """catches_signal(pid, signum): whether process `pid` has a handler for `signum`
    (Linux: /proc's SigCgt mask), so a test knows a started command took its stops."""
    def catches(pid: int, signum: int) -> bool:
        status = Path(f"/proc/{pid}/status").read_text()
        mask = next(line.split()[1] for line in status.splitlines()
                    if line.startswith("SigCgt:"))
        return bool(int(mask, 16) >> (signum - 1) & 1)
    return catches


@pytest.fixture(scope="session")
def one_sgd_step():
    """one_sgd_step(arg, **sections) -> (loss_sum, new parameters): configs/lm.py:arg with
    each section's values set (`data={"packing": "stream"}`), one jitted train step (state
    donated) with plain SGD from the initial state on a fixed random batch of the arg's
    shape. Plain SGD, so that the new parameters differ as the gradients do (Adam's first
    step moves every parameter by about the learning rate, however small its gradient)."""
    import jax.numpy as jnp
    import numpy as np

    from posjax.config import load_config_module
    from posjax.experiment import Experiment
    from posjax.train import optim
    from posjax.train.steps import initial_state, step_options, train_step

    def step(arg: str, **sections):
        config = load_config_module(str(Path(__file__).parents[1] / "configs" / "lm.py")
                                    ).get_config(arg)
        for section, values in sections.items():
            config[section].update(values)
        config.train.optimizer, config.train.optimizer_args = "sgd", "{}"
        experiment = Experiment.from_config(config)
        model = experiment.build()
        tx = optim.optimizer(config.train, experiment.total_steps)
        spec = experiment.batch_spec()
        length, rows, _ = config.train.stages[0]
        rng = np.random.default_rng(0)
        batch = {"inputs": rng.integers(0, 256, (rows, length)),
                 "targets": rng.integers(0, 256, (rows, length)),
                 "positions": np.tile(np.arange(length), (rows, 1)),
                 "segment_ids": np.ones((rows, length)), "weights": np.ones((rows, length))}
        batch = {key: jnp.asarray(batch[key], spec.arrays[key].dtype) for key in spec.arrays}
        state, sums = train_step(initial_state(model.params, tx, 0), model.rest, batch,
                                 **step_options(experiment, model.graphdef, tx))
        return float(sums["loss_sum"]), state.params

    return step
