"""Start-up settings of the host C library, which it reads only when a process starts.

XLA:CPU mallocs each train step's scratch (about 0.8 GB for the base model at seq_len 512,
batch 8) and frees it again; the kernel then faults the next step's scratch in 4 KiB pages,
a quarter of the step's CPU time on this project's 2-core machine. With glibc's
`glibc.malloc.hugetlb=1` tunable (glibc >= 2.35) malloc asks for transparent huge pages,
which cuts those faults about 200-fold and the step time by a third
(experiments/bench/README.md). The `posjax` command and the benchmarks re-execute themselves
once with it (scripts/_venv.sh exports it for run.sh and test.sh, whose commands then start
once); an explicit GLIBC_TUNABLES setting of `glibc.malloc.hugetlb` is kept as it is
(set `glibc.malloc.hugetlb=0` to measure without).

A run that shares the machine's CPU cores with others (`posjax sweep --parallel=N` with no
GPU) is pinned to its own cores by POSJAX_CPUS before it computes anything, so XLA's thread
pool, sized from the cores the process may use, takes only those rather than every run
starting a thread per core of the machine (the main job timed both ways:
experiments/bench/README.md).

Output nobody reads is no reason to stop: a command started with stdout or stderr closed
(`>&-`), or whose reader leaves early (`posjax train ... | head -1`), goes on with that
output sent to /dev/null (`outputs_may_close`).
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from collections.abc import Mapping

HUGE_PAGES = "glibc.malloc.hugetlb=1"
CPUS = "POSJAX_CPUS"  # "0,1": the cores this process may run on


def with_huge_pages(environ: Mapping[str, str]) -> dict[str, str] | None:
    """`environ` plus the huge-page malloc tunable, or None when there is nothing to add
    (already set either way, or not a glibc Linux host)."""
    tunables = environ.get("GLIBC_TUNABLES", "")
    if ("glibc.malloc.hugetlb" in tunables or platform.system() != "Linux"
            or platform.libc_ver()[0] != "glibc"):
        return None
    return {**environ, "GLIBC_TUNABLES": ":".join(filter(None, (tunables, HUGE_PAGES)))}


class _ReaderMayLeave:
    """A text stream (sys.stdout, sys.stderr) whose reader may go: the first write or flush
    that meets a closed pipe points the stream's file descriptor at /dev/null, where the
    rest of the command's output goes, and returns as if written."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._reader_left()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._reader_left()

    def _reader_left(self) -> None:
        os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())
        with contextlib.suppress(OSError):  # what the buffer held goes to /dev/null too
            self._stream.flush()

    def __getattr__(self, name):  # fileno, isatty, encoding, buffer...: the stream's
        return getattr(self._stream, name)


def outputs_may_close() -> None:
    """Give a command's stdout and stderr /dev/null in place of a descriptor closed at
    start, and `_ReaderMayLeave` for a reader that leaves later. Call first thing in a
    command-line entry point (it replaces sys.stdout and sys.stderr)."""
    for fd, name in ((1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is None:  # started with the descriptor closed
            os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
            setattr(sys, name, open(fd, "w", closefd=False))  # noqa: SIM115 (for the process)
        if not isinstance(getattr(sys, name), _ReaderMayLeave):
            setattr(sys, name, _ReaderMayLeave(getattr(sys, name)))


def reexec_with_huge_pages() -> None:
    """Replace this process by the same command with huge-page malloc, if it lacks it.

    Call first thing in a program's entry point, before any work that would be lost.
    """
    env = with_huge_pages(os.environ)
    if env is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def cpu_groups(cores: list[int], workers: int) -> list[list[int]]:
    """`cores` dealt to `workers` runs at a time: disjoint groups of sizes differing by at
    most one; with more workers than cores, worker k shares core k % len(cores)."""
    if workers > len(cores):
        return [[cores[k % len(cores)]] for k in range(workers)]
    size, extra = divmod(len(cores), workers)
    starts = [k * size + min(k, extra) for k in range(workers + 1)]
    return [cores[starts[k]:starts[k + 1]] for k in range(workers)]


def pin_to_cpus(environ: Mapping[str, str]) -> None:
    """Keep this process, and every thread it starts from now on, to the cores POSJAX_CPUS
    names; nothing where it is unset or the platform cannot pin (not Linux)."""
    cores = environ.get(CPUS, "")
    if not cores or not hasattr(os, "sched_setaffinity"):
        return
    allowed = sorted(os.sched_getaffinity(0))
    try:
        os.sched_setaffinity(0, {int(core) for core in cores.split(",")})
    except (ValueError, OSError):
        print(f"posjax: {CPUS}={cores} names no cores this process may use "
              f"({','.join(map(str, allowed))}): unset it, or give some of those, "
              "comma-separated", file=sys.stderr)
        raise SystemExit(2) from None  # a bad setting's exit code, as every refusal's
