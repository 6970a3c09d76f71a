"""Everything users name in a config or a file: encodings (`encoding=`), data kinds
(`dataset=`), model kinds (`model.kind=`), attention kernels (`model.attention=`),
evaluations, pretrained families (config.json's `model_type`), executors.

Each is a `Registry`; a package that holds entries imports every module in it
(`import_package_modules`), so a new module's entries register without an import line.
"""

from __future__ import annotations

import importlib
import pkgutil

from posjax.errors import unknown


class Registry(dict):
    """name -> entry: a class (`register(name)` decorator) or any object (`add`).

    what: how errors name an entry ("encoding", "model.kind", ...); attribute: the class
    attribute that receives a registered class's name.
    """

    def __init__(self, what: str, attribute: str = "name"):
        super().__init__()
        self.what = what
        self.attribute = attribute

    def add(self, name: str, entry):
        """Make `entry` available as `name` (once); returns it."""
        if name in self:
            raise ValueError(f"{self.what} {name!r} registered twice")
        self[name] = entry
        return entry

    def register(self, name: str):
        """Class decorator: make the class available as `name` (once)."""

        def wrap(cls):
            self.add(name, cls)
            setattr(cls, self.attribute, name)
            return cls

        return wrap

    def lookup(self, name: str):
        """The entry registered as `name`; unknown names list the valid ones in one line."""
        if name not in self:
            raise unknown(self.what, name, self)
        return self[name]


def import_package_modules(package: str, path) -> None:
    """Import every module of `package` (its `__path__`), in name order, so each registers
    its entries."""
    for module in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        importlib.import_module(f"{package}.{module.name}")
