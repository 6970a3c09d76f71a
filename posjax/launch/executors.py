"""Where a sweep's runs execute: this machine (`local`), this process (`inprocess`), a Ray
cluster (`ray`) or SLURM (`slurm`, job arrays through submitit).

Every executor runs the same `Job`s (a run's `posjax train` command lines) and reports each
run's start and `Outcome` back to the sweep, which keeps sweep.json: `local`, `ray` and `slurm`
in child processes that isolate faults, with the same worker-side function, `run_job`;
`inprocess` in the sweep's own process, one run after another (`run_here`), so a debugger
reaches the model and the loss. A run's commands resume from its checkpoints, so an executor
that retries or requeues a run loses no work, and each run directory's lock keeps two
workers off one run.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import importlib
import importlib.util
import os
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from posjax.errors import ConfigError
from posjax.launch import hostenv
from posjax.registry import Registry
from posjax.runlock import INTERRUPTED, PARENT_ENV

EXECUTORS = Registry("executor")
# Exit codes of an interrupted command: posjax's own, and death by SIGINT, SIGTERM or SIGHUP.
INTERRUPT_CODES = (INTERRUPTED, 128 + signal.SIGTERM, 128 + signal.SIGHUP, -signal.SIGINT,
                   -signal.SIGTERM, -signal.SIGHUP)


@dataclasses.dataclass(frozen=True)
class Job:
    """One run: its name, directory and command lines (`posjax ...`), in order."""

    name: str
    workdir: str
    commands: tuple[tuple[str, ...], ...]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """How a job ended: status "done", "failed" or "interrupted"; the last line of a failed
    command's stderr; the seconds its commands took where they ran."""

    status: str
    error: str | None
    seconds: float


@dataclasses.dataclass(frozen=True)
class Options:
    """The executor flags of `posjax sweep`."""

    parallel: int = 1
    retries: int = 0
    cpus_per_run: int = 1
    gpus_per_run: int = 1
    ray_address: str | None = None
    slurm_partition: str | None = None
    slurm_time_min: int = 60
    slurm_cluster: str = "slurm"


# How long `_stream` waits for output at a time: an interrupt raised in this thread without a
# signal (Ray's cancel of a running task) takes effect only between two waits.
STREAM_WAIT_S = 0.5


def _stream(proc: subprocess.Popen, log, show: bool,
            muted: threading.Event | None = None) -> str:
    """Copy the command's stderr into `log` (and ours when `show`, until `muted` is set); its
    last line. It never blocks for more than STREAM_WAIT_S at a time, so Ray's cancel stops a
    quiet run (`--noprogress` writes almost nothing) at once, not when the run ends."""
    tail = b""
    while True:
        if not select.select([proc.stderr], [], [], STREAM_WAIT_S)[0]:
            continue
        chunk = proc.stderr.read1(65536)
        if not chunk:
            break
        log.write(chunk)
        tail = (tail + chunk)[-4096:]
        if show and not (muted and muted.is_set()):
            try:
                sys.stderr.buffer.write(chunk)
                sys.stderr.flush()
            except BrokenPipeError:  # our stderr's reader left (| head): the log keeps it all
                show = False
    lines = [ln for ln in tail.decode(errors="replace").replace("\r", "\n").splitlines()
             if ln.strip()]
    return lines[-1] if lines else ""


def run_job(job: Job, env: dict[str, str], *, show: bool = False,
            muted: threading.Event | None = None,
            started: Callable[[subprocess.Popen], None] | None = None) -> Outcome:
    """Run `job`'s commands in order on this host, output appended to WORKDIR/log.txt.

    env: variables added to this process's environment. Each command is a child of this
    process that dies with it (runlock.die_with_parent). `show`: its stderr shown on ours too,
    until `muted` is set (a sweep stopping says so in its own line, not in each run's).
    `started(proc)` sees each child.
    """
    begin, workdir = time.perf_counter(), Path(job.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    child_env = {**os.environ, **env, PARENT_ENV: str(os.getpid())}
    with open(workdir / "log.txt", "ab") as log:
        for command in job.commands:
            log.write(f"$ {shlex.join(command)}\n".encode())
            log.flush()
            argv = [sys.executable, "-m", "posjax", *command[1:]]
            if command[1] == "train" and not show:
                argv.append("--noprogress")
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.PIPE, env=child_env,
                                    start_new_session=True)  # our signals reach it from us
            if started:
                started(proc)
            try:
                last = _stream(proc, log, show, muted)
                code = proc.wait()
            except KeyboardInterrupt:  # Ray's cancel, or Ctrl-C in a SLURM job
                proc.terminate()
                proc.wait()
                code = INTERRUPTED
            seconds = time.perf_counter() - begin
            if code in INTERRUPT_CODES:
                return Outcome("interrupted", None, seconds)
            if code < 0:  # killed by a signal: its last line is whatever it printed before
                return Outcome("failed", f"killed by {signal.Signals(-code).name}: re-run the "
                               "sweep to resume it from its last checkpoint", seconds)
            if code:
                return Outcome("failed", last or f"exit code {code}", seconds)
    return Outcome("done", None, time.perf_counter() - begin)


Report = Callable[[str, "Outcome | None"], None]


class Executor(abc.ABC):
    """Runs jobs somewhere; `report(name, None)` when one starts, `report(name, outcome)`
    when it ends. Ctrl-C (KeyboardInterrupt) stops the jobs it can stop and re-raises."""

    name: str = ""
    # Whether the runs read their files on this machine (a cluster's hosts may mount others)
    on_this_machine: bool = False
    # The Options it reads: another one typed on the command line is refused (check_flags).
    reads: frozenset[str] = frozenset()

    def __init__(self, options: Options):
        self.options = options

    @abc.abstractmethod
    def check(self) -> None:
        """A one-line ConfigError if this executor cannot run here (before any work)."""

    @abc.abstractmethod
    def run(self, jobs: list[Job], env: dict[str, str], report: Report) -> None:
        """Run every job to an outcome."""


def check_flags(executor: str, given: set[str]) -> None:
    """A one-line ConfigError for a flag of Options typed on the command line (`given`)
    that `executor` does not read: it would be ignored without a word."""
    unread = sorted(given - EXECUTORS.lookup(executor).reads)
    if unread:
        readers = [f"--executor={name}" for name, kind in EXECUTORS.items()
                   if unread[0] in kind.reads]
        raise ConfigError(f"--{unread[0]} is not read by --executor={executor}: leave it out, "
                          f"or run with {' or '.join(readers)}")


def gpu_count() -> int:
    """NVIDIA GPUs on this host (nvidia-smi's list; 0 without one). The sweep process
    counts them without initialising a device, so it holds no accelerator memory."""
    if not shutil.which("nvidia-smi"):
        return 0
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    return sum(line.startswith("GPU ") for line in listed.stdout.splitlines())


def device_env(slot: int, gpus: int, gpus_per_run: int, parallel: int) -> dict[str, str]:
    """The accelerator variables of the run in worker `slot`: its own GPUs while there are
    enough, shared ones (without XLA's memory preallocation) when runs outnumber them."""
    if gpus == 0:
        return {}
    per_run = max(1, min(gpus_per_run, gpus))
    first = (slot * per_run) % gpus
    env = {"CUDA_VISIBLE_DEVICES": ",".join(str((first + i) % gpus) for i in range(per_run))}
    if parallel * per_run > gpus:
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    return env


def cpu_env(slot: int, workers: int, gpus: int, last: bool = False) -> dict[str, str]:
    """The CPU cores of the run in worker `slot` of `workers` on a machine with no GPU: its
    own share of this process's cores (hostenv.CPUS, which the run pins itself to). None
    where one run has them all, for the `last` run when it starts after others ended
    (nothing queued behind it, it would soon train alone on its share) or where the platform
    cannot pin."""
    if gpus or workers < 2 or last or not hasattr(os, "sched_getaffinity"):
        return {}
    cores = hostenv.cpu_groups(sorted(os.sched_getaffinity(0)), workers)[slot]
    return {hostenv.CPUS: ",".join(map(str, cores))}


@EXECUTORS.register("local")
class Local(Executor):
    """Subprocesses on this machine, `parallel` at a time, each with its share of the GPUs,
    or with no GPU of the CPU cores."""

    reads = frozenset({"parallel", "gpus_per_run"})

    on_this_machine = True

    def check(self):
        """This machine can always run posjax."""

    def run(self, jobs, env, report):
        jobs = list(jobs)
        gpus = gpu_count()
        parallel = max(min(self.options.parallel, len(jobs)), 1)
        stop, running, lock = threading.Event(), set(), threading.Lock()
        slots = list(range(parallel))

        def started(proc):
            with lock:
                running.add(proc)
            if stop.is_set():
                proc.terminate()

        def one(job):
            if stop.is_set():
                return
            with lock:
                slot = slots.pop()
                # The last run, started once others ended, would train alone on its share.
                last = job is jobs[-1] and len(jobs) > parallel
            report(job.name, None)
            try:
                extra = {**device_env(slot, gpus, self.options.gpus_per_run, parallel),
                         **cpu_env(slot, parallel, gpus, last)}
                report(job.name, run_job(job, {**env, **extra}, show=parallel == 1,
                                         muted=stop, started=started))
            finally:
                with lock:
                    slots.append(slot)

        with ThreadPoolExecutor(max_workers=parallel) as pool:
            futures = [pool.submit(one, job) for job in jobs]
            try:
                for future in futures:
                    future.result()
            except KeyboardInterrupt:
                stop.set()
                with lock:
                    for proc in running:
                        if proc.poll() is None:
                            proc.terminate()
                pool.shutdown(wait=True, cancel_futures=True)
                raise


class _Tee:
    """Text written to a stream (stdout, stderr), copied into a run's log; keeps the last
    4096 characters."""

    def __init__(self, stream, log):
        self.stream, self.log, self.tail = stream, log, ""

    def write(self, text: str) -> int:
        self.log.write(text.encode(errors="replace"))
        self.tail = (self.tail + text)[-4096:]
        return self.stream.write(text)

    def flush(self) -> None:
        self.log.flush()
        self.stream.flush()

    def __getattr__(self, name):  # isatty, encoding, fileno...: the terminal's
        return getattr(self.stream, name)


@contextlib.contextmanager
def _environment(env: dict[str, str]):
    """Within: `env` added to this process's environment."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def runs_show_their_bars(executor: str, parallel: int) -> bool:
    """Whether a sweep's runs draw their own progress bars where the sweep writes (else the
    sweep's bar shows their step, loss and tokens/s): one local run at a time, or runs in the
    sweep's process writing to a terminal (the two bars of one process, written to a file,
    are a stream of cursor escapes)."""
    return (executor == "local" and parallel == 1) or (
        executor == "inprocess" and sys.stderr.isatty())


def run_here(job: Job, env: dict[str, str]) -> Outcome:
    """Run `job`'s commands in order in this process: each `posjax COMMAND ...` is the
    function the `posjax` command line calls (posjax.launch.cli.main, looked up by name as `run_job`
    names it to its child: the CLI sits above the executors), so a breakpoint() anywhere in
    training stops here. Output goes to this terminal and to WORKDIR/log.txt, as a child's
    does under `run_job`.
    KeyboardInterrupt (Ctrl-C) propagates after the command saved what it could."""
    begin, workdir = time.perf_counter(), Path(job.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    main = importlib.import_module("posjax.launch.cli").main
    with open(workdir / "log.txt", "ab") as log, _environment(env):
        for command in job.commands:
            log.write(f"$ {shlex.join(command)}\n".encode())
            log.flush()
            if command[1] == "train" and not runs_show_their_bars("inprocess", 1):
                command = [*command, "--noprogress"]
            tee = _Tee(sys.stderr, log)
            with contextlib.redirect_stderr(tee), contextlib.redirect_stdout(
                    _Tee(sys.stdout, log)):
                code = main(list(command[1:]))
            if code in INTERRUPT_CODES:
                raise KeyboardInterrupt
            if code:
                lines = [ln for ln in tee.tail.replace("\r", "\n").splitlines() if ln.strip()]
                return Outcome("failed", lines[-1] if lines else f"exit code {code}",
                               time.perf_counter() - begin)
    return Outcome("done", None, time.perf_counter() - begin)


@EXECUTORS.register("inprocess")
class InProcess(Executor):
    """This process, one run after another (--parallel is not used): for debugging, a
    breakpoint in a model, encoding or loss is reached from `posjax sweep`. Each run trains
    as its `posjax train` command does, into the same directory with the same checkpoints and
    result files, so a sweep resumes whichever executor ran it before. A failed run does not
    stop the others; Ctrl-C marks the run in flight interrupted and stops the sweep."""

    on_this_machine = True

    def check(self):
        """This process can always run posjax."""

    def run(self, jobs, env, report):
        import jax

        for job in jobs:
            report(job.name, None)
            try:
                outcome = run_here(job, env)
            except KeyboardInterrupt:
                report(job.name, Outcome("interrupted", None, 0.0))
                raise
            finally:
                # A run's compiled programs go with it, as a child process's do when it
                # exits: a long sweep would otherwise hold every run's executables (and
                # their memory maps) in this one process.
                jax.clear_caches()
            report(job.name, outcome)


def _reachable(address: str) -> None:
    """A one-line error unless HOST:PORT answers (other address forms are Ray's to check)."""
    if "://" in address or address == "auto":
        return
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except (OSError, ValueError):
        raise ConfigError(
            f"cannot reach a Ray cluster at --ray_address={address}: start one there with "
            "`ray start --head`, or leave the flag out to start a local one"
        ) from None


def _require(module: str, extra: str) -> None:
    """A one-line error naming the install when the optional `module` is missing (found
    without importing it: importing Ray alone starts its logging)."""
    if importlib.util.find_spec(module) is None:
        raise ConfigError(
            f"--executor={extra} needs {module}, which is not installed: "
            f"pip install 'posjax[{extra}]'"
        )


# Ray's one-machine switch (named for Windows and macOS, honoured everywhere): off, Ray keeps
# a node and a loopback address on 127.0.0.1; on, it rewrites both to this machine's outward
# interface, where a cluster started on 127.0.0.1 is not listening.
RAY_ONE_MACHINE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def ray_token(environ: Mapping[str, str], home: Path) -> tuple[str | None, str]:
    """(the auth token Ray presents or None, where it is), looked up where Ray looks: the
    RAY_AUTH_TOKEN variable, else the file RAY_AUTH_TOKEN_PATH names, else
    HOME/.ray/auth_token."""
    if environ.get("RAY_AUTH_TOKEN"):
        return environ["RAY_AUTH_TOKEN"].strip(), "the RAY_AUTH_TOKEN variable"
    path = Path(environ.get("RAY_AUTH_TOKEN_PATH") or home / ".ray" / "auth_token")
    return (path.read_text().strip() or None) if path.is_file() else None, str(path)


def ray_environment(address: str | None, environ: Mapping[str, str],
                    home: Path) -> dict[str, str]:
    """The variables the sweep's Ray driver adds to `environ` to reach `address` (None: the
    local cluster it starts).

    A local cluster (no address, or a loopback one) stays on 127.0.0.1. Ray presents its
    token only to a cluster it starts or finds itself, yet one that `ray start` began on a
    machine with a token file requires it; so the driver presents the token it has to the
    cluster at an address too (one without token auth ignores it). A RAY_AUTH_MODE the user
    set is kept."""
    env = {}
    host = address.rpartition(":")[0].strip("[]") if address else LOOPBACK_HOSTS[0]
    if host in LOOPBACK_HOSTS:
        env[RAY_ONE_MACHINE] = "0"
    if address and "RAY_AUTH_MODE" not in environ and ray_token(environ, home)[0]:
        env["RAY_AUTH_MODE"] = "token"
    return env


def connect_gcs(address: str) -> None:
    """Connect once to the Ray cluster's GCS at HOST:PORT, as ray.init does first; on failure
    exit with one line, Ray's error class and message. Run in a child process
    (`_check_connects`): Ray's C++ client writes a warning to its process's stderr for every
    failed try, and ray.init tries 20 times."""
    from ray._raylet import GcsClient

    try:
        GcsClient(address=address)
    except Exception as error:  # noqa: BLE001 (the class is the verdict the parent reads)
        sys.exit(f"{type(error).__name__}: {str(error).splitlines()[0]}")


def _auth_fix(environ: Mapping[str, str], home: Path) -> str:
    """Why the cluster turned this machine's Ray token away, and the fix."""
    mode = environ.get("RAY_AUTH_MODE", "token")
    if mode != "token":
        return f"RAY_AUTH_MODE={mode} keeps this machine from presenting one: unset it"
    token, where = ray_token(environ, home)
    if token is None:
        return (f"none was found (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, {where}): write the "
                f"cluster's token (`ray get-auth-token` on its head node) to {where}")
    return (f"the one in {where} is not the cluster's: replace it with the cluster's token "
            "(`ray get-auth-token` on its head node), or point RAY_AUTH_TOKEN_PATH at a file "
            "holding that")


def _check_connects(address: str, environ: Mapping[str, str], home: Path) -> None:
    """A one-line error unless the Ray cluster at HOST:PORT lets this machine's driver in."""
    if "://" in address or address == "auto":
        return
    env = {**environ, **ray_environment(address, environ, home)}
    probe = subprocess.run(
        [sys.executable, "-c", "import sys; from posjax.launch.executors import connect_gcs; "
         "connect_gcs(sys.argv[1])", address], env=env, capture_output=True, text=True,
        check=False)
    if probe.returncode == 0:
        return
    verdict = (probe.stderr.strip().splitlines() or [f"exit code {probe.returncode}"])[-1]
    if verdict.startswith("AuthenticationError"):
        raise ConfigError(f"the Ray cluster at --ray_address={address} requires an auth "
                          f"token, and {_auth_fix(env, home)}")
    raise ConfigError(f"cannot connect to the Ray cluster at --ray_address={address} "
                      f"({verdict}): give the head node's GCS address, the one "
                      "`ray start --head` printed")


@EXECUTORS.register("ray")
class Ray(Executor):
    """One Ray task per run, with its CPUs and GPUs (TPU chips on a TPU cluster: the same
    --gpus_per_run) requested, on the cluster at
    --ray_address (a new local one, on 127.0.0.1, without it). Ray retries a failed run
    --retries times; each attempt resumes from the run's checkpoints."""

    reads = frozenset({"retries", "cpus_per_run", "gpus_per_run", "ray_address"})

    def check(self):
        _require("ray", "ray")
        if self.options.ray_address:
            _reachable(self.options.ray_address)
            _check_connects(self.options.ray_address, os.environ, Path.home())

    def run(self, jobs, env, report):
        address = self.options.ray_address
        # Set before Ray is imported: it reads them once.
        os.environ.update(ray_environment(address, os.environ, Path.home()))
        import ray

        with warnings.catch_warnings():
            # JAX's warning at every fork: Ray forks only to exec its own processes
            warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called",
                                    category=RuntimeWarning)
            try:
                ray.init(address=address or "local", include_dashboard=False,
                         log_to_driver=False, configure_logging=False)
            except ConnectionError as error:  # an OSError, yet not the disk's nor a folder's
                fix = (f"check that `ray status --address={address}` reaches it from here"
                       if address else "see the logs under Ray's temp dir (RAY_TMPDIR, "
                       "/tmp/ray)")
                raise ConfigError(f"Ray: {str(error).splitlines()[0]}: {fix}") from None
            try:
                self._run(ray, jobs, env, report)
            finally:
                ray.shutdown()

    def _run(self, ray, jobs, env, report):
        task = ray.remote(_ray_task).options(
            num_cpus=self.options.cpus_per_run, max_retries=self.options.retries,
            retry_exceptions=True, **self._accelerators(ray.cluster_resources()))
        # Each task gives its run's name here when a worker starts it: a run Ray still queues
        # is pending in sweep.json, not running.
        started = ray.remote(num_cpus=0)(StartLog).remote()
        pending = {task.remote(job, env, started): job for job in jobs}
        try:
            while pending:
                ray.wait(list(pending), num_returns=1, timeout=RAY_POLL_S)
                _report_news(ray, ray.get(started.take.remote()), pending, report)
        except KeyboardInterrupt:
            for ref in pending:
                ray.cancel(ref)
            for ref, job in pending.items():
                report(job.name, _ray_outcome(ray, ref))
            raise

    def _accelerators(self, resources: dict) -> dict:
        """The task options that request the run's GPUs, or TPU chips on a TPU cluster."""
        if resources.get("GPU"):
            return {"num_gpus": self.options.gpus_per_run}
        if resources.get("TPU"):
            return {"resources": {"TPU": self.options.gpus_per_run}}
        return {}


# Seconds between two looks at which of a Ray sweep's runs have started.
RAY_POLL_S = 1.0


class StartLog:
    """A Ray actor's state: the names of the runs whose task started since the last `take`.
    A task tells it without waiting for the answer: a task blocked in `ray.get` gives its
    CPUs back to Ray, which would start a queued run beside it."""

    def __init__(self):
        self.names: list[str] = []

    def add(self, name: str) -> None:
        self.names.append(name)

    def take(self) -> list[str]:
        names, self.names = self.names, []
        return names


def _report_news(ray, starts: list[str], pending: dict, report) -> None:
    """Report the runs of `pending` (ref: job) that ended since the last look, taken out of
    it, then those that started (`starts`, their names taken from the StartLog): a run that
    took up an ended run's worker is reported after that end, so sweep.json never shows both
    running. The starts are read first, so every end that freed a worker for one is seen. A
    start told after its run's end was reported (the task does not wait for its word to
    arrive) is dropped."""
    done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
    for ref in done:
        name = pending.pop(ref).name
        if name in starts:  # started and ended since the last look
            report(name, None)
            starts = [other for other in starts if other != name]
        report(name, _ray_outcome(ray, ref))
    waiting = {job.name for job in pending.values()}
    for name in dict.fromkeys(starts):
        if name in waiting:
            report(name, None)


class RunFailed(RuntimeError):
    """A run's command failed on a worker; Ray retries the task on it."""


def _ray_task(job: Job, env: dict[str, str], started) -> Outcome:
    """`job` on a Ray worker, its name first given to the `started` StartLog actor (not
    waited for); a failed run raises, for Ray to retry it."""
    started.add.remote(job.name)
    outcome = run_job(job, env)
    if outcome.status == "failed":
        raise RunFailed(outcome.error)
    return outcome


def _ray_outcome(ray, ref) -> Outcome:
    try:
        return ray.get(ref)
    except ray.exceptions.TaskCancelledError:
        return Outcome("interrupted", None, 0.0)
    except ray.exceptions.RayTaskError as error:
        cause = error.cause if isinstance(error.cause, RunFailed) else error
        return Outcome("failed", str(cause).strip().splitlines()[-1], 0.0)


def _slurm_job(job: Job, env: dict[str, str]):
    """The callable a SLURM array task runs. submitit requeues a Checkpointable as it is on
    preemption or timeout, which suits a run that resumes from its checkpoints."""
    import submitit

    class SlurmJob(submitit.helpers.Checkpointable):
        def __call__(self, job: Job, env: dict[str, str]) -> Outcome:
            return run_job(job, env)

    return SlurmJob(), job, env


@EXECUTORS.register("slurm")
class Slurm(Executor):
    """A SLURM job array through submitit: one task per run, --slurm_partition,
    --slurm_time_min, --cpus_per_run and --gpus_per_run per task, at most --parallel at
    a time; --slurm_cluster=local runs the tasks with submitit's local executor instead,
    submitted one by one to keep --parallel (`_submit_windowed`).
    Interrupting the sweep leaves submitted jobs running; `posjax sweep --status` sees them
    finish."""

    reads = frozenset({"parallel", "retries", "cpus_per_run", "gpus_per_run",
                       "slurm_partition", "slurm_time_min", "slurm_cluster"})

    def check(self):
        _require("submitit", "slurm")
        if self.options.slurm_cluster == "slurm" and not shutil.which("sbatch"):
            raise ConfigError("--executor=slurm: no SLURM here (sbatch not found): run on a "
                              "SLURM login node, or use --slurm_cluster=local to try it locally")

    def run(self, jobs, env, report):
        import submitit

        executor = self._executor(submitit, jobs)
        if self.options.slurm_cluster == "local":  # its array starts every task at once
            _submit_windowed(lambda job: executor.submit(*_slurm_job(job, env)), jobs,
                             max(self.options.parallel, 1), report)
            return
        with executor.batch():  # one array job
            submitted = [executor.submit(*_slurm_job(job, env)) for job in jobs]
        for job in jobs:
            report(job.name, None)
        for job, handle in zip(jobs, submitted, strict=True):
            report(job.name, _slurm_outcome(handle))

    def _executor(self, submitit, jobs):
        cluster = self.options.slurm_cluster
        folder = Path(jobs[0].workdir).parent.parent / "slurm"
        executor = submitit.AutoExecutor(folder=folder, cluster=cluster,
                                         slurm_max_num_timeout=self.options.retries)
        executor.update_parameters(
            timeout_min=self.options.slurm_time_min, cpus_per_task=self.options.cpus_per_run,
            slurm_array_parallelism=max(self.options.parallel, 1), name="posjax")
        if cluster == "slurm":
            executor.update_parameters(slurm_gpus_per_task=self.options.gpus_per_run)
            if self.options.slurm_partition:
                executor.update_parameters(slurm_partition=self.options.slurm_partition)
        return executor


def _submit_windowed(submit: Callable[[Job], Any], jobs: list[Job], parallel: int, report,
                     poll_s: float = 1.0) -> None:
    """`jobs` submitted one at a time, at most `parallel` unfinished at once, each reported
    running when submitted and done when its handle is: the limit slurm_array_parallelism
    sets on SLURM, which submitit's local executor does not keep (it started every task)."""
    pending, running = list(jobs), []
    while pending or running:
        while pending and len(running) < parallel:
            job = pending.pop(0)
            running.append((job, submit(job)))
            report(job.name, None)
        finished = [(job, handle) for job, handle in running if handle.done()]
        for job, handle in finished:
            running.remove((job, handle))
            report(job.name, _slurm_outcome(handle))
        if not finished:
            time.sleep(poll_s)


def _slurm_outcome(handle) -> Outcome:
    try:
        return handle.result()
    except Exception as error:  # noqa: BLE001 (submitit wraps the job's failure)
        lines = [ln for ln in str(error).splitlines() if ln.strip()]
        return Outcome("failed", lines[-1] if lines else type(error).__name__, 0.0)
