"""One run over several processes, on JAX's own multi-process runtime (`jax.distributed`).

    posjax train ... --coordinator=HOST:PORT --num_processes=N --process_id=I

starts process I of N (every process runs the same command with its own I; process 0's host
serves the coordinator at PORT). On SLURM, a TPU pod or another cluster JAX recognises,
`--config.train.distributed=true` alone lets `jax.distributed.initialize` read the
process count and index from the environment it sets.

Each process feeds its own devices: it reads its own shards of the training data
(`Experiment.train_iterator`), builds its rows of every global batch, and saves its own
data-iterator position in each checkpoint.
Only process 0 writes the run's files (config.json, metrics.jsonl, TensorBoard, results);
every process takes part in the collective checkpoint saves and restores.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import re
import socket
import sys
import threading
import time
from typing import NoReturn

import jax
import numpy as np
from jax.experimental import multihost_utils

from posjax import runlock
from posjax.errors import ConfigError

# Seconds without a heartbeat before the coordinator declares a process dead and the others
# stop (JAX's default is 100): a killed process ends the run promptly, resumably.
HEARTBEAT_TIMEOUT_S = 20


@dataclasses.dataclass(frozen=True)
class Cluster:
    """Where this process sits among the run's processes (all None: one process, or read
    from the environment when `auto`)."""

    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None

    def __post_init__(self):
        given = [v is not None for v in dataclasses.astuple(self)]
        if any(given) and not all(given):
            raise ConfigError("--coordinator, --num_processes and --process_id go together: "
                              "give all three (or none, for one process)")
        if all(given):
            host, _, port = self.coordinator.rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(f"--coordinator={self.coordinator} is not HOST:PORT, e.g. "
                                  "127.0.0.1:12355")
            if self.num_processes < 1 or not 0 <= self.process_id < self.num_processes:
                raise ConfigError(
                    f"--process_id={self.process_id} with --num_processes="
                    f"{self.num_processes}: ids run from 0 to num_processes - 1")

    @property
    def explicit(self) -> bool:
        return self.coordinator is not None


ONE_PROCESS = Cluster()


def initialize(cluster: Cluster = ONE_PROCESS, *, auto: bool = False) -> None:
    """Join the run's processes before any use of the devices: with `cluster` given
    explicitly, or (`auto`) through jax.distributed's own detection of SLURM, TPU pods and
    the like. Neither: one process, nothing to join. Then JAX's backends start
    (`start_backends`). Idempotent."""
    if (cluster.explicit or auto) and not jax.distributed.is_initialized():
        if cluster.explicit and cluster.process_id == 0:
            _check_port_free(cluster.coordinator)
        _join(cluster)
    start_backends()


def join_timeout_s() -> float:
    """Seconds a process waits for the others to join (POSJAX_JOIN_TIMEOUT_S, default 300,
    jax.distributed's own)."""
    return float(os.environ.get("POSJAX_JOIN_TIMEOUT_S", 300))


def _join(cluster: Cluster) -> None:
    """jax.distributed.initialize in a thread of its own, so that this one takes a stop
    signal (the command's one line) and ends a wait past `join_timeout_s` in one line:
    inside JAX's C++ client neither Ctrl-C nor SIGTERM is seen, and its own time-out aborts
    the process with a stack dump."""
    timeout, failed = join_timeout_s(), []
    where = (f"process {cluster.process_id} of {cluster.num_processes} at "
             f"{cluster.coordinator}" if cluster.explicit else "the cluster's processes")

    def join():
        try:
            jax.distributed.initialize(
                coordinator_address=cluster.coordinator, num_processes=cluster.num_processes,
                process_id=cluster.process_id, heartbeat_timeout_seconds=HEARTBEAT_TIMEOUT_S,
                initialization_timeout=int(timeout) + 60)
        except BaseException as e:  # raised here, in the caller's thread
            failed.append(e)

    thread = threading.Thread(target=join, name="posjax-join", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    try:
        print(f"posjax: joining the run as {where} (waiting up to {timeout:.0f} s for every "
              "process)", file=sys.stderr, flush=True)
        while thread.is_alive():
            thread.join(0.2)
            runlock.check_stop()
            if thread.is_alive() and time.monotonic() > deadline:
                leave(f"posjax: the run's processes did not all join within {timeout:.0f} s "
                      f"({where}): start every process's command, with the same "
                      "--coordinator and --num_processes and each its own --process_id, then "
                      "re-run them")
    except KeyboardInterrupt:  # a normal exit would wait on, then abort, in JAX's client
        leave("posjax: interrupted while joining the run's processes, before any work: "
              "re-run the command", runlock.stopped_code())
    if failed:
        raise failed[0]


def _check_port_free(coordinator: str) -> None:
    """Process 0 serves the coordinator at HOST:PORT: a one-line ConfigError where that port
    is taken on this host (JAX's "Failed to start RPC server" traceback, the others left
    waiting)."""
    host, _, port = coordinator.rpartition(":")
    with socket.socket(socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT, as gRPC
        try:
            probe.bind((host.strip("[]"), int(port)))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise ConfigError(f"--coordinator={coordinator}: port {port} is in use on this "
                                  "host: give every process another free port") from None


def start_backends() -> None:
    """Start JAX's backends with stop signals held until they are up (runlock.deferred): a
    SIGTERM that landed inside their start (between JAX's TPU probe starting its warning
    Timer and the try that cancels it) left that thread to hold the exit for 60 s, then print
    "TPU backend initialization is taking more than 60 seconds" after the interrupted line."""
    with runlock.deferred():
        jax.devices()


def is_primary() -> bool:
    """Whether this process writes the run's files (process 0)."""
    return jax.process_index() == 0


def every_process(ok: bool) -> bool:
    """Whether `ok` holds on every process of the run (this process's `ok` when alone); a
    collective, so every process must call it."""
    if jax.process_count() == 1:
        return ok
    return bool(multihost_utils.process_allgather(np.asarray(ok)).all())


# What a collective or the coordination service reports when another process has died.
_PEER_FAILURE = ("Gloo", "Connection reset", "Connection refused", "heartbeat",
                 "CoordinationService", "Barrier failed", "DEADLINE_EXCEEDED")


def peer_failed(error: BaseException) -> bool:
    """Whether `error` says another process of a multi-process run has stopped."""
    if jax.process_count() == 1:
        return False
    # Collectives raise it as JaxRuntimeError, ValueError (orbax's barriers), or wrapped.
    while error is not None:
        if any(marker in str(error) for marker in _PEER_FAILURE):
            return True
        error = error.__cause__ or error.__context__
    return False


def peer_cause(error: BaseException, width: int = 200) -> str:
    """`error`'s first line, readable in one line: a prefix the runtime repeats once per
    layer it passed ("Error dispatching computation: " four times) said once, and a line
    past `width` cut between words."""
    lines = str(error).strip().splitlines()
    line = re.sub(r"([^:]+: )\1+", r"\1", lines[0]) if lines else type(error).__name__
    return line if len(line) <= width else line[:width].rsplit(" ", 1)[0] + " ..."


def leave(message: str, status: int = 1) -> NoReturn:
    """Print `message` and exit now with `status`. A normal exit would wait in the runtime's
    shutdown barrier for the dead process until the heartbeat timeout, then abort with a
    stack dump; the last complete checkpoint is on disk either way, and a half-written one
    is never renamed into place."""
    print(message, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
