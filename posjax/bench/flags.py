"""One argument parser for the benchmark scripts: the flags they share, checked alike."""

from __future__ import annotations

import argparse


class Parser(argparse.ArgumentParser):
    """--repeats, --processes and --json (the output path) for every benchmark; --sections
    when `sections` names the script's sections (checked against them), --quick when `quick`
    gives its settings ({flag: value}, for the flags not given), --child
    (internal: the run a fresh process of the script makes) when `child` is set."""

    def __init__(self, doc: str, *, output: str, repeats: int = 3, processes: int = 1,
                 processes_help: str = "fresh processes, one after another, each with "
                                           "--repeats rounds",
                 sections: tuple[str, ...] = (), default_sections: str | None = None,
                 quick: dict | None = None, child: bool = False):
        super().__init__(description=doc.split("\n")[0])
        self.sections, self.quick = tuple(sections), dict(quick or {})
        self.add_argument("--repeats", type=int, default=repeats,
                          help="timed rounds (visits) per case in each process")
        self.add_argument("--processes", type=int, default=processes, help=processes_help)
        self.add_argument("--json", default=output, help="output path (written atomically)")
        if self.sections:
            self.add_argument("--sections", default=default_sections or ",".join(sections),
                              help="comma-separated: " + ",".join(sections))
        if self.quick:
            settings = " ".join(f"--{key}={value}" for key, value in self.quick.items())
            self.add_argument("--quick", action="store_true",
                              help=f"a short check: {settings} (unless given)")
        if child:
            self.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def parse_args(self, args=None, namespace=None):
        # The flags --quick sets get a marker as default while parsing, so a flag given on
        # the command line keeps its value even when it equals the default.
        unset, defaults = object(), {key: self.get_default(key) for key in self.quick}
        self.set_defaults(**dict.fromkeys(self.quick, unset))
        try:
            parsed = super().parse_args(args, namespace)
        finally:
            self.set_defaults(**defaults)
        for key, default in defaults.items():
            if getattr(parsed, key) is unset:
                setattr(parsed, key, self.quick[key] if parsed.quick else default)
        for key in parsed.sections.split(",") if self.sections else ():
            if key not in self.sections:
                self.error(f"unknown section {key!r}; valid: {', '.join(self.sections)}")
        return parsed
