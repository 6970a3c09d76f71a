"""`python -m posjax ...` is the `posjax` command."""

from posjax.launch.entry import main

raise SystemExit(main())
