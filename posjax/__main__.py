"""`python -m posjax ...` is the `posjax` command."""

from posjax.launch.cli import main

raise SystemExit(main())
