"""The start-up environment `posjax` re-executes itself with."""

import os
import platform
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from posjax import provenance
from posjax.launch import hostenv

ROOT = Path(__file__).resolve().parents[1]

glibc_linux = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")


@glibc_linux
def test_adds_huge_pages_and_keeps_other_tunables():
    env = hostenv.with_huge_pages({"PATH": "/bin", "GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})
    assert env == {"PATH": "/bin",
                   "GLIBC_TUNABLES": "glibc.malloc.arena_max=2:" + hostenv.HUGE_PAGES}
    assert hostenv.with_huge_pages({})["GLIBC_TUNABLES"] == hostenv.HUGE_PAGES


def test_an_explicit_setting_is_kept():
    assert hostenv.with_huge_pages({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}) is None


@glibc_linux
def test_reexec_restarts_the_same_command_once_with_huge_pages():
    code = ("import os, sys; from posjax.launch import hostenv; hostenv.reexec_with_huge_pages(); "
            "print(os.environ['GLIBC_TUNABLES'], sys.argv[1:])")
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    out = subprocess.run([sys.executable, "-c", code, "a", "b"], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == f"{hostenv.HUGE_PAGES} ['a', 'b']"


@glibc_linux
def test_the_posjax_command_reexecutes_before_it_imports_the_command_line():
    """The command's imports (JAX, grain, TFDS: seconds) come after the re-execution, so a
    process started without the tunable pays them once, not twice."""
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "posjax", "--help"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    imports = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert sum(line.endswith(" posjax.launch.entry") for line in imports) == 2  # two processes
    assert sum(line.endswith(" posjax.launch.cli") for line in imports) == 1


def test_the_console_script_is_the_entry_that_reexecutes_first():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"posjax": "posjax.launch.entry:main"}


@glibc_linux
@pytest.mark.parametrize(("given", "exported"), [
    (None, hostenv.HUGE_PAGES),
    ("glibc.malloc.arena_max=2", "glibc.malloc.arena_max=2:" + hostenv.HUGE_PAGES),
    ("glibc.malloc.hugetlb=0", "glibc.malloc.hugetlb=0"),
])
def test_the_setup_scripts_export_what_posjax_would_reexecute_with(given, exported):
    """scripts/_venv.sh (run.sh, test.sh) exports the tunable, so no command re-executes."""
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    env.update({"GLIBC_TUNABLES": given} if given else {})
    out = subprocess.run(["bash", "-c", 'source scripts/_venv.sh && echo "$GLIBC_TUNABLES"'],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == exported

def test_allowed_cores_is_the_affinity_where_there_is_one(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {1, 3}, raising=False)
    assert provenance.allowed_cores() == 2
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert provenance.allowed_cores() == 8


def test_cpu_groups_deal_the_cores_out_evenly():
    assert hostenv.cpu_groups([0, 1], 2) == [[0], [1]]
    assert hostenv.cpu_groups([0, 1, 2, 3, 4], 2) == [[0, 1, 2], [3, 4]]
    assert hostenv.cpu_groups(list(range(16)), 7) == [
        [0, 1, 2], [3, 4, 5], [6, 7], [8, 9], [10, 11], [12, 13], [14, 15]]
    assert hostenv.cpu_groups([0, 1], 3) == [[0], [1], [0]]  # more runs than cores share


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux only")
def test_a_process_keeps_to_the_cores_it_is_given():
    core = min(os.sched_getaffinity(0))
    code = ("import os; from posjax.launch import hostenv; hostenv.pin_to_cpus(os.environ); "
            "print(sorted(os.sched_getaffinity(0)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, hostenv.CPUS: str(core)}).stdout
    assert out.strip() == f"[{core}]"
    env = {k: v for k, v in os.environ.items() if k != hostenv.CPUS}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env).stdout
    assert out.strip() == str(sorted(os.sched_getaffinity(0)))  # unset: left as it was


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux only")
@pytest.mark.parametrize("cores", ["x", "100000", "0,,1"])
def test_cores_that_cannot_be_kept_to_are_refused_in_one_line(cores):
    code = "import os; from posjax.launch import hostenv; hostenv.pin_to_cpus(os.environ)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, hostenv.CPUS: cores})
    assert done.returncode == 2  # 1 was a crash's code, where docs/cli.md promises 2
    assert done.stderr.strip().splitlines() == [
        f"posjax: POSJAX_CPUS={cores} names no cores this process may use "
        f"({','.join(map(str, sorted(os.sched_getaffinity(0))))}): unset it, or give some "
        "of those, comma-separated"]


@pytest.mark.parametrize(("budget", "arg"), [
    ({}, "study=main,seeds=3,batch_size=8"),
    ({"STEPS": "250", "BATCH": "16"}, "study=main,seeds=3,steps=250,batch_size=16"),
    ({"STEPS": "1000", "BATCH": "4"}, "study=main,seeds=3,steps=1000,batch_size=4")])
def test_run_sh_trains_600_steps_of_8_rows_unless_steps_or_batch_is_given(tmp_path, budget,
                                                                             arg):
    """run.sh's STEPS and BATCH reach the sweep's config arg; unset, the study's 600 steps
    of 8 rows. `posjax` is a bash function here that records its arguments and trains nothing."""
    log = tmp_path / "posjax.log"
    env = {k: v for k, v in os.environ.items() if k not in ("STEPS", "SEEDS", "BATCH")}
    env.update({"BASH_FUNC_posjax%%": f'() {{ echo "$*" >> {log}; }}', "PARALLEL": "2"},
               **budget)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "extrapolation.md").write_text("| table |\n")
    done = subprocess.run(["bash", "scripts/run.sh", str(tmp_path / "out")], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=True)
    sweep = next(line for line in log.read_text().splitlines() if line.startswith("sweep "))
    assert sweep.split()[1] == f"--config=configs/lm.py:{arg}"
    assert done.stdout.strip() == "| table |"


_WRITES_AFTER_ITS_READER_LEFT = """
import sys
from posjax.launch import hostenv
hostenv.outputs_may_close()
for line in range(100_000):  # far more than a pipe holds: its reader is gone by then
    print(line, flush=line % 1000 == 0)
    print(line, file=sys.stderr)
open(sys.argv[1], "w").write("done")
"""


def test_output_whose_reader_leaves_goes_to_dev_null_and_the_command_goes_on(tmp_path):
    """`posjax train ... 2>&1 | head -1` stopped training at its first step, rc 0."""
    proc = subprocess.Popen([sys.executable, "-c", _WRITES_AFTER_ITS_READER_LEFT,
                             str(tmp_path / "done")], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    assert proc.stdout.readline() == b"0\n"  # head -1
    proc.stdout.close()
    assert proc.wait(timeout=60) == 0
    assert (tmp_path / "done").read_text() == "done"


@pytest.mark.parametrize("closed", ["1", "1,2"])
def test_a_command_started_with_its_output_closed_runs(tmp_path, closed):
    """`posjax list encodings >&-` was a traceback (sys.stdout is None), rc 1."""
    fds = [int(fd) for fd in closed.split(",")]
    # The shell closes them (a preexec_fn would fork this multithreaded JAX process).
    closing = " ".join(f"{fd}>&-" for fd in fds)
    done = subprocess.run(["bash", "-c", f'exec "$0" -m posjax list encodgins {closing}',
                           sys.executable], cwd=ROOT,
                          stderr=subprocess.PIPE if fds == [1] else None)
    assert done.returncode == 2  # its one line, unread where stderr is closed too
    if fds == [1]:
        assert done.stderr.decode().startswith("posjax list: error: unknown listing")
