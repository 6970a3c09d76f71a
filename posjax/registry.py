"""Everything users name in a config or a file: encodings (`encoding=`), data kinds
(`dataset=`), model kinds (`model.kind=`), attention kernels (`model.attention=`),
evaluations, pretrained families (config.json's `model_type`), executors.

Each is a `Registry`; a package that holds entries imports every module in it
(`import_package_modules`), so a new module's entries register without an import line.

A user's own code (a config file, or the modules it imports) registers entries the same way.
While a user's file loads, the folders its own modules live in are on sys.path
(`add_import_roots`: its folder, its project's root, posjax's checkout), so config files
import each other (`from configs.lm import get_config`) and their helpers without set-up.
A file loaded inside `loading(path)` (posjax does so for every --config file) that registers
anything is one of the process's `user_files()`; training records them in the run's
config.json ("imports") and every later command on the run imports them again
(`import_files`, from posjax.config.read_config_json), so the names they registered
resolve there too. Names a notebook or script (__main__) registers have no file to record:
training warns where a run uses one and records it (`from_main`; config.json's "from_main"),
so a later command that lacks it names it. Re-executing a file re-registers its
definitions: an entry replaced by one of the same module and qualified name is a
redefinition, not a clash.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import pkgutil
import re
import sys
from pathlib import Path

from posjax.errors import ConfigError, did_you_mean, module_not_found, raised_in, unknown

# What a registered name may hold: an arg's `k=v,k=v` and a layer pattern's `a+b(c)*2`
# split at the other characters.
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")

# The files being loaded (innermost last), those whose loading registered an entry, and
# those `import_files` has executed in this process.
_loading: list[str] = []
_registering: dict[str, None] = {}
_imported: set[str] = set()
# name -> what (the registry's word) of the entries a notebook or script (__main__)
# registered outside any loaded file: no later command can import them (`from_main`).
_from_main: dict[str, str] = {}
# Every Registry made, for `registered`.
_REGISTRIES: list[Registry] = []


class Registry(dict):
    """name -> entry: a class (`register(name)` decorator) or any object (`add`).

    what: how errors name an entry ("encoding", "model.kind", ...); attribute: the class
    attribute that receives a registered class's name; own: where a user's own entry is
    registered, said when a name is like none of the entries.
    """

    def __init__(self, what: str, attribute: str = "name", own: str = ""):
        super().__init__()
        self.what = what
        self.attribute = attribute
        # where a user's own entry comes from, said of a name like none of the entries
        self.own = own
        # names that mean something elsewhere in posjax, with where they go (`refer`)
        self.referred: dict[str, str] = {}
        _REGISTRIES.append(self)

    def refer(self, name: str, where: str) -> None:
        """Make a lookup of `name`, which is not an entry but means something elsewhere (a
        recurrent layer's token in the encoding registry), say `where` it goes."""
        self.referred[name] = where

    def add(self, name: str, entry):
        """Make `entry` available as `name` (once), a name an arg can hold (letters, digits,
        `_` and `-`); returns it."""
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise ValueError(f"{self.what} name {name!r} cannot be typed in a config arg or a "
                             "flag: use letters, digits, '_' and '-' only, not starting with '-'")
        alike = [other for other in self if other != name and other.lower() == name.lower()]
        if alike:
            raise ValueError(f"{self.what} {name!r} differs from {alike[0]!r} only in case, "
                             "which a reader (and a suggestion) takes for the same name: give "
                             "it another name")
        if name in self and not _redefinition(self[name], entry):
            first = getattr(self[name], "__module__", None) or ""
            raise ValueError(f"{self.what} {name!r} registered twice" + (
                " (posjax's own: give yours another name)" if first.startswith("posjax.")
                else f" (first by {first})" if first else ""))
        self[name] = entry
        if _loading:
            _registering.setdefault(_loading[-1])
        elif getattr(entry, "__module__", None) == "__main__":
            _from_main[name] = self.what
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
        if name not in self and name in self.referred:
            raise ConfigError(f"{self.what} {name!r} does not exist: {self.referred[name]}")
        if name not in self:
            error = unknown(self.what, name, self)
            if self.own and not did_you_mean(name, self):
                error = ConfigError(f"{error}; one of your own: {self.own}")
            raise error
        return self[name]


def import_package_modules(package: str, path) -> None:
    """Import every module of `package` (its `__path__`), in name order, so each registers
    its entries."""
    for module in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        importlib.import_module(f"{package}.{module.name}")


def _redefinition(old, new) -> bool:
    """Whether `new` is `old` defined again: another object of the same module and qualified
    name (a config file executed a second time in one process)."""
    key = ("__module__", "__qualname__")
    return old is not new and all(
        getattr(old, k, None) is not None and getattr(old, k, None) == getattr(new, k, None)
        for k in key)


@contextlib.contextmanager
def loading(path):
    """Within: entries registered are the user file `path`'s (`user_files`)."""
    resolved = str(Path(path).resolve())
    _loading.append(resolved)
    _imported.add(resolved)
    try:
        yield
    finally:
        _loading.pop()


# What marks a project's root folder: its modules import from there.
PROJECT_MARKS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")


# posjax's checkout (an editable install's): where its configs/ folder is.
CHECKOUT = Path(__file__).resolve().parents[1]


def posjax_configs() -> Path | None:
    """The folder of posjax's own config files (configs/lm.py, ...), None where posjax is
    installed without them."""
    return CHECKOUT / "configs" if (CHECKOUT / "configs").is_dir() else None


def import_roots(path) -> list[str]:
    """The folders a user's file at `path` imports its own modules from: the file's folder,
    the root of the project holding it (the nearest folder above with one of PROJECT_MARKS)
    and the posjax checkout's root where it has configs/, so `from configs.lm import
    get_config` works in a config file anywhere."""
    folder = Path(path).resolve().parent
    project = next((p for p in (folder, *folder.parents)
                    if any((p / mark).exists() for mark in PROJECT_MARKS)), None)
    roots = [folder, project, CHECKOUT if posjax_configs() else None]
    return list(dict.fromkeys(str(root) for root in roots if root is not None))


def add_import_roots(path) -> list[str]:
    """Append `import_roots(path)` to sys.path (each once, and after the installed packages,
    so none shadows them); returns them, for errors to name."""
    roots = import_roots(path)
    sys.path.extend(root for root in roots if root not in sys.path)
    return roots


def user_files() -> list[str]:
    """The files loaded in this process (`loading`) that registered entries, absolute, in
    loading order: what a run records as its "imports"."""
    return list(_registering)


def from_main(names) -> list[list[str]]:
    """Of `names`, the entries ([what, name]: ["encoding", "x"]) that a notebook or the
    script run as __main__ registered outside a loaded file: a run that uses one records no
    file to import it from (it records these: config.json's "from_main"), so a later command
    on the run finds it only where the same code registered it again."""
    return [[_from_main[name], name] for name in names if name in _from_main]


def registered(what: str, name: str) -> bool:
    """Whether the registry of `what` ("encoding") holds `name` now."""
    return any(r.what == what and name in r for r in _REGISTRIES)


def entry_text(entry) -> str:
    """"encoding 'x'" for the entry [what, name] (`from_main`)."""
    return f"{entry[0]} {entry[1]!r}"


def import_files(paths, owner, needed=()) -> None:
    """Import each of `paths` (files of the user's own code a run recorded) once per process,
    so the names they register resolve; `owner` (the run) is named in the one-line
    ConfigError when a file is gone or raises. A file gone is passed over where every entry
    of `needed` ((what, name): the run's encoding, ...) is registered already (a moved file
    given with --import)."""
    for path in paths:
        resolved = str(Path(path).resolve())
        if resolved in _imported:
            continue
        if not Path(resolved).is_file():
            if needed and all(registered(*entry) for entry in needed):
                continue
            raise ConfigError(
                f"{owner} was trained with code registered in {path} (config.json's "
                "\"imports\"), which does not exist: put the file back there, or give the "
                "file that registers it now with --import=FILE")
        roots = add_import_roots(resolved)
        spec = importlib.util.spec_from_file_location(Path(resolved).stem, resolved)
        module = importlib.util.module_from_spec(spec)
        where = f"{owner} imports {path} (config.json's \"imports\")"
        with loading(resolved):
            try:
                spec.loader.exec_module(module)
            except ModuleNotFoundError as e:  # a module it found when the run trained
                raise module_not_found(where, e, roots) from e
            except Exception as e:
                raise ConfigError(f"{where}: loading it raised {raised_in(e)}; fix it "
                                  "there") from e


_PACKAGE = Path(__file__).resolve().parent


def source_file(cls: type) -> str | None:
    """The file that defines `cls` where it is not one of posjax's own modules (None too for
    a class defined in a notebook or script, whose source has no file)."""
    # its methods name the file (a config file's module is loaded from its path under a
    # name sys.modules may not hold, or holds for another file); else its module's file
    text = next((f.__code__.co_filename for f in vars(cls).values() if hasattr(f, "__code__")),
                getattr(sys.modules.get(cls.__module__), "__file__", None) or "")
    path = Path(text).resolve()
    return str(path) if path.is_file() and not path.is_relative_to(_PACKAGE) else None


def code_sha1(classes) -> str | None:
    """12 hex digits of the contents of the source files outside posjax that define
    `classes` (a user's own encoding, data kind or evaluation: docs/extending.md), wherever
    those files lie (a file moved and given with --import is the same code); None where all
    are posjax's."""
    digests = sorted({hashlib.sha1(Path(path).read_bytes()).hexdigest()
                      for cls in classes if (path := source_file(cls)) is not None})
    return hashlib.sha1("".join(digests).encode()).hexdigest()[:12] if digests else None
