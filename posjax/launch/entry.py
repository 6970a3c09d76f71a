"""The `posjax` command's entry point (pyproject's console script, `python -m posjax`).

It re-executes the process with its start-up settings (`posjax.launch.hostenv`) before it
imports the command line, whose imports (JAX, flax, grain, TFDS) take seconds that a
re-execution after them would pay twice.
"""

from __future__ import annotations

from posjax.launch import hostenv


def main() -> int:
    hostenv.reexec_with_huge_pages()
    from posjax.launch import cli

    return cli.main()
