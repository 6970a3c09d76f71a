"""One argument parser for the benchmark scripts: the flags they share, checked alike."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

# Where a --quick run writes unless --json says otherwise (runs/ is git-ignored).
QUICK_FOLDER = "runs/bench_quick"


class Parser(argparse.ArgumentParser):
    """--repeats, --processes and --json (the output path) for every benchmark; --sections
    when `sections` names the script's sections (an add_names flag), --quick when `quick`
    gives its settings ({flag: value}, for the flags not given), --child
    (internal: the run a fresh process of the script makes) when `child` is set."""

    def __init__(self, doc: str, *, output: str, repeats: int = 3, processes: int = 1,
                 processes_help: str = "fresh processes, one after another, each with "
                                           "--repeats rounds",
                 sections: tuple[str, ...] = (), default_sections: str | None = None,
                 quick: dict | None = None, child: bool = False):
        super().__init__(description=doc.split("\n")[0])
        self.quick = dict(quick or {})
        self.names: dict[str, tuple[str, tuple[str, ...]]] = {}
        self.add_argument("--repeats", type=int, default=repeats,
                          help="timed rounds (visits) per case in each process")
        self.add_argument("--processes", type=int, default=processes, help=processes_help)
        self.outputs: dict[str, str] = {}  # dest -> default path: a committed record's
        self.add_output("--json", output, "output path (written atomically)")
        if sections:
            self.add_names("--sections", sections, what="section", default=default_sections)
        if self.quick:
            settings = " ".join(f"--{key}={value}" for key, value in self.quick.items())
            self.add_argument("--quick", action="store_true",
                              help=f"a short check: {settings} (unless given)")
        if child:
            self.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def add_output(self, flag: str, default: str, help: str) -> None:
        """A flag naming a file the script writes, default `default` (a committed record):
        with --quick and the flag not given, the file of that name in QUICK_FOLDER."""
        action = self.add_argument(flag, default=default, help=(
            f"{help}; with --quick, default {QUICK_FOLDER}/{Path(default).name}, beside no "
            "committed record"))
        self.outputs[action.dest] = default

    def add_names(self, flag: str, valid, *, what: str, default: str | None = None,
                  help: str | None = None) -> None:
        """A comma-separated flag (default: every valid name) whose names must each be one of
        `valid`; another is one error naming it as `what` and listing the valid ones."""
        valid = tuple(valid)
        action = self.add_argument(flag, default=default or ",".join(valid),
                                   help=f"{help or 'comma-separated'}, of: {','.join(valid)}")
        self.names[action.dest] = (what, valid)

    def parse_args(self, args=None, namespace=None):
        # The flags --quick sets get a marker as default while parsing, so a flag given on
        # the command line keeps its value even when it equals the default.
        unset, defaults = object(), {key: self.get_default(key) for key in self.quick}
        self.set_defaults(**dict.fromkeys([*self.quick, *self.outputs], unset))
        try:
            parsed = super().parse_args(args, namespace)
        finally:
            self.set_defaults(**defaults, **self.outputs)
        for key, default in defaults.items():
            if getattr(parsed, key) is unset:
                setattr(parsed, key, self.quick[key] if parsed.quick else default)
        quick = getattr(parsed, "quick", False)
        for dest, default in self.outputs.items():  # a quick check replaces no record
            if getattr(parsed, dest) is unset:
                setattr(parsed, dest, str(Path(QUICK_FOLDER) / Path(default).name) if quick
                        else default)
        for dest, (what, valid) in self.names.items():
            for name in getattr(parsed, dest).split(","):
                if name not in valid:
                    self.error(f"unknown {what} {name!r}; valid: {', '.join(valid)}")
        for flag in ("repeats", "processes"):  # a median of no visit is no measurement
            if getattr(parsed, flag, 1) < 1:
                self.error(f"--{flag}={getattr(parsed, flag)} must be at least 1")
        return parsed


def at_least(low: int):
    """An argparse type: a whole number >= `low` (a step count of 0 is no measurement, a
    batch of 0 rows trains none), else the flag's one-line error."""
    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{value} must be at least {low}")
        return value

    return whole


def sizes_list(text: str) -> str:
    """An argparse type: comma-separated whole numbers >= 1 (matrix sizes), kept as given."""
    for size in text.split(","):
        at_least(1)(size)
    return text


def run_script(main) -> None:
    """Run a benchmark script's `main` and exit with its code; a ConfigError from posjax (a
    flag's value it refused: an unknown encoding or size, a length of 0) is one line naming
    the script, exit 2, and Ctrl-C one line, exit 130 (each result file is written whole or
    not at all), not a traceback."""
    from posjax.errors import ConfigError

    try:
        code = main()
    except ConfigError as error:
        print(f"{Path(sys.argv[0]).name}: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        print(f"{Path(sys.argv[0]).name}: interrupted: every file it wrote is whole (a "
              "section in flight writes nothing); re-run the same command to measure",
              file=sys.stderr)
        raise SystemExit(130) from None
    raise SystemExit(code or 0)


def check_peer_installed(sections: str, peer_sections: tuple[str, ...]) -> None:
    """Before any section runs: SystemExit(2) with one line where a chosen section (of the
    comma-separated `sections`) is one of `peer_sections`, which train x-transformers, and
    torch or x-transformers is not installed (it was a traceback once that section began)."""
    chosen = [name for name in sections.split(",") if name in peer_sections]
    missing = [module for module in ("torch", "x_transformers")
               if importlib.util.find_spec(module) is None]
    if chosen and missing:
        print(f"{Path(sys.argv[0]).name}: error: section {chosen[0]} trains x-transformers, and "
              f"{missing[0]} is not installed: pip install -c constraints.txt -e '.[bench]', or "
              f"leave {chosen[0]} out of --sections", file=sys.stderr)
        raise SystemExit(2)
