"""The suite itself: a test file does not inherit the compiled programs of the files before,
and its processes share one accelerator."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

MAPS = Path("/proc/self/maps")

FIRST = textwrap.dedent("""
    import jax, jax.numpy as jnp
    from pathlib import Path

    def test_compiles_many_programs(tmp_path_factory):
        for n in range(1, 61):
            jax.jit(lambda x: jnp.sin(x) * 2.0 + 1.0)(jnp.ones(n)).block_until_ready()
        held = len(Path("/proc/self/maps").read_text().splitlines())
        (tmp_path_factory.getbasetemp() / "held").write_text(str(held))
""")

SECOND = textwrap.dedent("""
    from pathlib import Path

    def test_starts_without_them(tmp_path_factory):
        before = int((tmp_path_factory.getbasetemp() / "held").read_text())
        now = len(Path("/proc/self/maps").read_text().splitlines())
        assert now < before - 100, (before, now)
""")


@pytest.mark.skipif(not MAPS.exists(), reason="counts memory maps in /proc (Linux)")
def test_a_later_test_file_holds_none_of_an_earlier_files_programs(tmp_path):
    # 60 programs of one file hold ~200 memory maps; the suite's own conftest drops them
    # when the file ends, so a worker stays far below the kernel's limit per process.
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_a_first.py").write_text(FIRST)
    (tmp_path / "test_b_second.py").write_text(SECOND)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-n", "0", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "2 passed" in result.stdout


def test_the_suites_processes_allocate_accelerator_memory_on_demand():
    """scripts/test.sh's workers share one GPU with POSJAX_DEVICE=gpu: each preallocating
    75 % of it (JAX's default), a second process runs out of memory (JAX's GPU memory notes)."""
    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    child = subprocess.run([sys.executable, "-c", "import os; print(os.environ["
                            "'XLA_PYTHON_CLIENT_PREALLOCATE'])"], capture_output=True, text=True)
    assert child.stdout.strip() == "false"  # the processes the tests start inherit it


def test_the_files_the_suite_hands_out_first_exist():
    """tests/conftest.py's SLOWEST_FILES orders the files the workers get: a name left there
    after its file was renamed would put that file back in xdist's order, unnoticed."""
    from conftest import SLOWEST_FILES

    assert [name for name in SLOWEST_FILES if not Path(__file__).with_name(name).exists()] == []
    assert len(set(SLOWEST_FILES)) == len(SLOWEST_FILES)
