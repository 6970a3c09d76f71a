"""The `posjax` command's entry point (pyproject's console script, `python -m posjax`).

It re-executes the process with its start-up settings (`posjax.launch.hostenv`) before it
imports the command line, whose imports (JAX, flax, grain, TFDS) take seconds that a
re-execution after them would pay twice. A stop signal during those imports ends it in one
line (`runlock.stop_while_starting`).
"""

from __future__ import annotations

import sys

from posjax import runlock
from posjax.launch import hostenv


def main() -> int:
    hostenv.outputs_may_close()
    hostenv.reexec_with_huge_pages()
    runlock.stop_while_starting(sys.argv[1] if len(sys.argv) > 1 else "")
    from posjax.launch import cli

    return cli.main()
