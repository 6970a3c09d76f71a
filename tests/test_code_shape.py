"""The shape of the code itself: short functions, and kind names compared nowhere.

A model kind and a data kind are each one registered class (posjax.models.register,
posjax.data.register); code that branches on their names instead would have to change with
every new kind. Functions stay short enough to read at once. Both hold for the package and for
the scripts and study folders beside it (scripts/, experiments/).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from posjax import data, models

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("posjax", "scripts", "experiments")
MAX_FUNCTION_LINES = 60
# Functions that read top to bottom by design, with their own limit: the training loop, in one
# function with sections as big_vision's train.py (issue 48).
LONGER_BY_DESIGN = {"train_loop": 90}
# Registry modules may name their own kinds (the fallback for result files written before a
# result recorded which evaluation made it).
REGISTRIES = {"posjax/eval/evaluation.py"}


def _modules():
    return sorted(path for folder in FOLDERS for path in (ROOT / folder).rglob("*.py"))


def _code_lines(node: ast.FunctionDef) -> int:
    """Lines of a function without its docstring."""
    lines = node.end_lineno - node.lineno + 1
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        lines -= body[0].end_lineno - body[0].lineno + 1
    return lines


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_function_is_longer_than_the_limit(path):
    tree = ast.parse(path.read_text())
    long = [f"{node.name} ({_code_lines(node)} lines)" for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and _code_lines(node) > LONGER_BY_DESIGN.get(node.name, MAX_FUNCTION_LINES)]
    assert not long, f"{path.name}: split {', '.join(long)}"


def _kind_names() -> set[str]:
    return {*models.KINDS, *data.kinds.names(), "text", "task"}


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_kind_names_are_not_compared_outside_the_registries(path):
    if str(path.relative_to(ROOT)) in REGISTRIES:
        return
    names = _kind_names()
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if isinstance(side, ast.Constant) and side.value in names:
                    found.append(f"line {node.lineno}: {side.value!r}")
    assert not found, f"{path.name} branches on kind names: {', '.join(found)}"


def _data_imports(path: Path, modules: set[str]) -> set[str]:
    """The posjax.data modules `path` imports (anywhere in it, functions included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "posjax.data":
            found |= {alias.name for alias in node.names if alias.name in modules}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("posjax.data."):
            found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found |= {alias.name.split(".")[2] for alias in node.names
                      if alias.name.startswith("posjax.data.")}
    return found & modules


def _import_order(graph: dict[str, set[str]]) -> list[str]:
    """The modules of `graph` (module -> the modules it imports), each after those it imports;
    an assertion error naming the cycle where there is one."""
    order: list[str] = []
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        if state.get(module) == "done":
            return
        assert state.get(module) != "open", f"import cycle: {' -> '.join([*path, module])}"
        state[module] = "open"
        for imported in sorted(graph[module]):
            visit(imported, [*path, module])
        state[module] = "done"
        order.append(module)

    for module in sorted(graph):
        visit(module, [])
    return order


def test_the_data_package_reads_top_down():
    """No posjax.data module imports one that imports it back, directly or through others
    (kinds and sources imported each other: issue 29)."""
    folder = ROOT / "posjax" / "data"
    modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    order = _import_order({m: _data_imports(folder / f"{m}.py", modules) for m in modules})
    assert order.index("sources") < order.index("kinds")


# posjax's layers, lowest first, each named: a module imports from its own layer and those
# below it only, wherever the import stands (one inside a function is an import all the same).
# The Experiment resolves a config into things and knows nothing of training; the train
# package (steps, optimizer, checkpoints, sharding, processes, the training loop) sits below
# the evaluations that score with it, and the reporting that turns their result files into
# pictures and tables sits above those. The launch shell (cli, sweep, executors, discovery,
# the start-up environment) is on top. The benchmarks live outside the package (benchmarks/).
LAYERS = {
    "foundations": ("errors", "registry", "fileio", "runlock", "provenance", "records"),
    "encoders": ("encoders",),
    "attention": ("attention",),
    "models": ("models",),
    "data": ("data",),
    "config": ("config",),
    "experiment": ("experiment",),
    "train": ("train",),
    "scoring": ("eval", "pretrained"),
    "reporting": ("results",),
    "launch": ("launch", "__main__"),
}
LAYER_OF = {unit: level for level, units in enumerate(LAYERS.values()) for unit in units}
LAYER_NAME = {unit: name for name, units in LAYERS.items() for unit in units}


def _unit(module: str) -> str:
    """The layer unit of a dotted posjax module name: its top-level package or module."""
    return module.split(".")[1]


def _posjax_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of each posjax module `path` imports; `from P import n` counts as P.n
    (n may be a submodule)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("posjax"):
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names
                      if alias.name.startswith("posjax.")]
    return found


PACKAGE_MODULES = sorted((ROOT / "posjax").rglob("*.py"))


@pytest.mark.parametrize("path", PACKAGE_MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_run_down_the_layers(path):
    """No module imports one of a higher layer (experiment.py imported five train modules
    while the trainer imported it: issue 33)."""
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    if name == "posjax.__init__":
        return
    own = _unit(name)
    assert own in LAYER_OF, f"{own} is in no layer: add it to LAYERS in {Path(__file__).name}"
    upward = []
    for line, module in _posjax_imports(path):
        unit = _unit(module)
        assert unit in LAYER_OF, f"{unit} is in no layer: add it to LAYERS"
        if LAYER_OF[unit] > LAYER_OF[own]:
            upward.append(f"line {line}: {module} ({LAYER_NAME[unit]} is above "
                          f"{LAYER_NAME[own]})")
    assert not upward, f"{path.name} imports up the layers: {'; '.join(upward)}"


# Units that import nothing from another below them: reporting reads a result's kind from its
# file and draws every picture, importing nothing from the evaluations that wrote it (issue 48).
APART = {"results": ("eval",)}


@pytest.mark.parametrize("path", [p for p in PACKAGE_MODULES if p.parent.name in APART
                                  or p.stem in APART],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_reporting_imports_nothing_from_the_evaluations(path):
    own = _unit(".".join(path.relative_to(ROOT).with_suffix("").parts))
    found = [f"line {line}: {module}" for line, module in _posjax_imports(path)
             if _unit(module) in APART.get(own, ())]
    assert not found, f"{path.name} imports {', '.join(APART[own])}: {'; '.join(found)}"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """posjax module -> the posjax modules it imports (anywhere in it, functions included);
    `from P import n` is the module P.n where there is one, else P. A package's __init__
    importing its own modules (to register them) is not an edge: they import the package
    back for its registry by design."""
    modules = {_module_name(p): p for p in PACKAGE_MODULES}

    def resolve(name: str) -> str:
        while name not in modules and "." in name:
            name = name.rsplit(".", 1)[0]
        return name

    graph = {}
    for module, path in modules.items():
        imported = {resolve(name) for _, name in _posjax_imports(path)}
        graph[module] = {m for m in imported if m in modules and m != module
                         and not (path.name == "__init__.py" and m.startswith(module + "."))}
    return graph


def test_no_modules_import_each_other_in_a_circle():
    """No posjax module imports one that imports it back, directly or through others, in any
    package (eval's plots, heatmap and retrieval imported each other round: issue 39)."""
    _import_order(_import_graph())


def test_the_results_code_loads_no_jax_and_no_config():
    """scripts/collect_results.py imports the plots, and `posjax report` reads results: a
    wrong folder's one line waits for no jax, grain, TFDS or scipy to load."""
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys; from posjax.results import heatmap, plots, report, "
         "values; print(sorted(m for m in ('jax', 'posjax.config', 'grain', 'scipy') "
         "if m in sys.modules))"], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
