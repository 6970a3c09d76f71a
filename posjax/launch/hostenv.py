"""Start-up settings of the host C library, which it reads only when a process starts.

XLA:CPU mallocs each train step's scratch (about 0.8 GB for the base model at seq_len 512,
batch 8) and frees it again; the kernel then faults the next step's scratch in 4 KiB pages,
a quarter of the step's CPU time on this project's 2-core machine. With glibc's
`glibc.malloc.hugetlb=1` tunable (glibc >= 2.35) malloc asks for transparent huge pages,
which cuts those faults about 200-fold and the step time by a third
(experiments/bench/README.md). The `posjax` command and the benchmarks re-execute themselves
once with it; an explicit GLIBC_TUNABLES setting of `glibc.malloc.hugetlb` is kept as it is
(set `glibc.malloc.hugetlb=0` to measure without).
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping

HUGE_PAGES = "glibc.malloc.hugetlb=1"


def with_huge_pages(environ: Mapping[str, str]) -> dict[str, str] | None:
    """`environ` plus the huge-page malloc tunable, or None when there is nothing to add
    (already set either way, or not a glibc Linux host)."""
    tunables = environ.get("GLIBC_TUNABLES", "")
    if ("glibc.malloc.hugetlb" in tunables or platform.system() != "Linux"
            or platform.libc_ver()[0] != "glibc"):
        return None
    return {**environ, "GLIBC_TUNABLES": ":".join(filter(None, (tunables, HUGE_PAGES)))}


def reexec_with_huge_pages() -> None:
    """Replace this process by the same command with huge-page malloc, if it lacks it.

    Call first thing in a program's entry point, before any work that would be lost.
    """
    env = with_huge_pages(os.environ)
    if env is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
