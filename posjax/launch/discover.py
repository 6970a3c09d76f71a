"""What a user can ask for, listed: `posjax list encodings | datasets | evaluations |
configs | fields | studies | attention | pretrained`.

Each listing is built from the code itself (the encoder, data kind and evaluation
registries, each config file's DEFAULTS and docstring, configlib's field tables, each study's
README title and commands.sh), so it cannot drift.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

from posjax.errors import unknown

# The repository the package was installed from (an editable install); configs/ and
# experiments/ are looked up in the working directory first.
REPO = Path(__file__).resolve().parents[2]


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().split("\n")[0].strip()


def _summary(doc: str | None) -> str:
    """The first paragraph of a docstring, on one line."""
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def _wrapped(label: str, items: list[str]) -> list[str]:
    return textwrap.wrap(f"{label}: " + (", ".join(items) or "-"), 96,
                         initial_indent="    ", subsequent_indent="        ")


def _folder(name: str) -> Path:
    """posjax's own folder `name` (configs, experiments), by the short path where the
    command runs in the checkout; a folder of that name elsewhere (a user's project's
    configs/) is not posjax's."""
    here, ours = Path(name), REPO / name
    return here if here.is_dir() and here.resolve() == ours.resolve() else ours


def encodings() -> str:
    """Every registered encoding: what it computes, its source, sites and hyperparameters."""
    from posjax import encoders

    lines = []
    for name in encoders.names():
        encoding = encoders.get(name)
        lines += [name, *textwrap.wrap(_summary(_own_doc(type(encoding))), 96,
                                       initial_indent="    ", subsequent_indent="    "),
                  f"    sites: {', '.join(encoding.sites()) or 'none'}",
                  *_wrapped("hyperparameters", [f"{key}={value!r}" for key, value
                                                in encoders.hparams(name).items()])]
    return "\n".join(lines)


def _own_doc(cls: type) -> str:
    """The class's docstring; for one without (dataclasses then write its signature), a
    line asking for one."""
    doc = cls.__doc__ or ""
    if not doc or doc.startswith(f"{cls.__name__}("):
        return ("(no docstring: say what it computes and cite its source in the class's "
                "docstring)")
    return doc


def _scorer(cls) -> str:
    """The evaluation a kind names: a name, or one its config picks (a property)."""
    if isinstance(cls.evaluation, str):
        return f"the {cls.evaluation!r} evaluation"
    return _summary(cls.evaluation.__doc__).rstrip(".").lower()


def datasets() -> str:
    """The common config.data fields, then every data kind with the fields it declares."""
    from posjax import data

    def fields(declared) -> list[str]:
        return [f"    {key} = {field.default!r}: {field.meaning}"
                for key, field in declared.items()]

    lines = ["config.data fields every dataset reads", *fields(data.kinds.COMMON_FIELDS)]
    for name in sorted(data.kinds.names()):
        cls = data.kinds.kind_class(name)
        lines += [name, *_wrapped("what", [_summary(cls.__doc__)]),
                  f"    scored by {_scorer(cls)}",
                  *fields(data.kinds.declared_fields(cls))]
    lines += ["any other name: a prepared TFDS text dataset (lm1b, pg19, c4, wikipedia, ...)",
              *fields(data.kinds.declared_fields(data.TextData))]
    return "\n".join(lines)


def evaluations() -> str:
    """Every evaluation `posjax extrapolate --eval=NAME` runs, with its options."""
    from posjax.eval import EVALUATIONS

    lines = []
    for name, cls in sorted(EVALUATIONS.items()):
        lines += [name, *_wrapped("what", [_summary(cls.describe(name))]),
                  *_wrapped("options", [f"--{option}" for option in cls.options])]
    return "\n".join(lines)


# The first thing to run: two tiny runs (`smoke`) trained, evaluated and compared.
QUICK_START = (
    "quick start: tiny runs (the bare word smoke in the arg), seconds each on a CPU; their",
    "numbers check the set-up, not the encodings:",
    "    posjax sweep --config=configs/lm.py:study=smoke,smoke --workdir=runs/smoke",
    "  or one run at a time, then the comparison:",
    "    posjax train --config=configs/lm.py:encoding=rope,smoke --workdir=runs/rope "
    "--extrapolate",
    "    posjax train --config=configs/lm.py:encoding=alibi,smoke --workdir=runs/alibi "
    "--extrapolate",
    "    posjax plot runs/rope runs/alibi",
)
SMOKE_ARG = "smoke"


def _config_files() -> list[tuple[Path, object]]:
    from posjax.config import load_config_module

    return [(path, load_config_module(str(path)))
            for path in sorted(_folder("configs").glob("*.py"))]


def _studies_of(path: Path, module) -> list[str]:
    """The studies a config file's sweep runs by name (its STUDIES: study=NAME), each with
    its run count; none for a file without named studies."""
    counts = {}
    for name, study in getattr(module, "STUDIES", {}).items():
        calls = []
        study(lambda **keys: calls.append(keys))  # noqa: B023  (called at once)
        counts[name] = len(calls)
    if not counts:
        return []
    return _wrapped(f"studies (posjax sweep --config={path}:study=NAME[,{SMOKE_ARG}] "
                    "--workdir=DIR), runs each",
                    [f"{name} ({count})" for name, count in counts.items()])


def configs(own: Sequence[tuple[Path, object]] = ()) -> str:
    """Every config file: its summary, its args with defaults, its sizes and studies.

    own: the (path, module) of the user's config files, listed first."""
    lines = list(QUICK_START)
    given = {path.resolve() for path, _ in own}  # one of posjax's given: listed once, first
    for path, module in [*own, *(f for f in _config_files() if f[0].resolve() not in given)]:
        defaults = getattr(module, "DEFAULTS", {})
        sizes = list(getattr(module, "SIZES", {}))
        lines += [f"{path}", *textwrap.wrap(_summary(module.__doc__), 96, initial_indent="    ",
                                            subsequent_indent="    ")]
        if not hasattr(module, "DEFAULTS"):
            lines.append("    args: those its get_config(arg) reads (it declares no DEFAULTS)")
        else:
            lines += _wrapped("args, with defaults (plus any hyperparameter of the encoding"
                              + (", and any model, train or eval field by name: posjax list "
                                 "fields" if getattr(module, "FIELDS_AS_ARGS", False) else "")
                              + ")", [f"{key}={value!r}" for key, value in defaults.items()])
        if sizes:
            quick = ("the bare word smoke is size=smoke, the one for a quick try"
                     if "smoke" in sizes else "the bare word smoke runs a tiny schedule at "
                     "toy size, for a quick try")
            lines += _wrapped(f"sizes (size=NAME; {quick})", sizes)
        elif SMOKE_ARG in defaults:
            lines.append("    quick try: the bare word smoke in the arg (a tiny schedule)")
        lines += _studies_of(path, module) or [
            f"    sweep: {'yes' if hasattr(module, 'sweep') else 'no'}"]
    return "\n".join(lines)


def fields() -> str:
    """Every field of the model, train and eval sections: its default and what it means.

    The first line says that a config file sets its own values (configs/lm.py's, as its
    get_config gives them), and where a run's are."""
    from posjax import config as configlib

    path = _folder("configs") / "lm.py"
    lm = configlib.load_config_module(str(path)).get_config("")
    lines = [f"The base config's defaults. A config file sets its own over them ({path}'s "
             f"default size: d_model {lm.model.d_model}, {lm.model.num_layers} layers, "
             f"learning rate {lm.train.learning_rate:g}), and each run's config.json records "
             "the values it trained with."]
    for section, declared in (("model", configlib.MODEL_FIELDS),
                              ("train", configlib.TRAIN_FIELDS),
                              ("eval", configlib.EVAL_FIELDS)):
        lines += [f"config.{section} (--config.{section}.KEY=VALUE overrides one)",
                  *(f"    {key} = {field.default!r}: {field.meaning}"
                    for key, field in declared.items())]
        if section == "model":
            lines += [f"    {key} = None ({kind.__name__}): {meaning}"
                      for key, (kind, meaning) in configlib.MODEL_PLACEHOLDERS.items()]
    return "\n".join([
        *lines,
        "config.evals: named entries scored while a run trains, each type=EVALUATION, "
        "every_steps=N and the evaluation's options (posjax list evaluations); configs/lm.py's "
        "arg evals=text@100+passkey@200 adds them",
        "config.data: posjax list datasets; config.encoding: the encoding's hyperparameters, "
        "posjax list encodings"])


def studies() -> str:
    """Every study folder and how to reproduce it, and the config files' named studies.

    A study folder shows its README title and its commands.sh; a config file with STUDIES
    shows each study=NAME with its run count."""
    lines = [*QUICK_START, "study folders (experiments/):"]
    for folder in sorted(p for p in _folder("experiments").iterdir() if p.is_dir()):
        readme, commands = folder / "README.md", folder / "commands.sh"
        title = next((line.lstrip("# ").strip() for line in readme.read_text().splitlines()
                      if line.startswith("# ")), "") if readme.exists() else ""
        lines += [f"{folder}", f"    {title}"]
        if commands.exists():
            lines.append(f"    reproduce: bash {commands}")
    for path, module in _config_files():
        found = _studies_of(path, module)
        lines += [f"{path}", *found] if found else []
    return "\n".join(lines)


def attention() -> str:
    """Every attention kernel (model.attention): its sites, where it runs and what fits it."""
    from posjax import attention as kernels

    lines = []
    for name, kernel in kernels.IMPLS.items():
        sites = "every site" if kernel.sites is None else ", ".join(sorted(kernel.sites))
        fits = ", ".join(kernels.encodings_carried_by(name))
        sink = "yes" if kernel.carries_sink else f"no ({kernel.why_no_sink})"
        window = "yes" if kernel.carries_window else f"no ({kernel.why_no_window})"
        softcap = "yes" if kernel.carries_softcap else f"no ({kernel.why_no_softcap})"
        lines += [name, f"  carries: {sites}",
                  *(f"  {f.site}: only as {f.what} (Encoding.{f.method})"
                    for f in kernel.forms),
                  f"  runs: {kernel.where}",
                  *textwrap.wrap(f"sink logit (model.sink_logit): {sink}", 92,
                                 initial_indent="  ", subsequent_indent="    "),
                  *textwrap.wrap(f"sliding window (model.window): {window}", 92,
                                 initial_indent="  ", subsequent_indent="    "),
                  *textwrap.wrap(f"logit cap (model.attn_softcap): {softcap}", 92,
                                 initial_indent="  ", subsequent_indent="    "),
                  *textwrap.wrap(f"encodings: {fits}", 92, initial_indent="  ",
                                 subsequent_indent="    ")]
    return "\n".join(lines)


def pretrained() -> str:
    """Every Hugging Face model_type `posjax extrapolate --pretrained` loads: what it builds."""
    from posjax.pretrained import FAMILIES

    lines = ["posjax extrapolate --pretrained=DIR scores a local snapshot (docs/pretrained.md)"]
    for name, family in FAMILIES.items():
        accepted = "; ".join(f"{key}: {', '.join(map(str, values))}"
                             for key, values in family.checked.items())
        lines += [name, *textwrap.wrap(family.about, 92, initial_indent="  ",
                                       subsequent_indent="    "),
                  *([f"  accepted {accepted}"] if accepted else [])]
    return "\n".join(lines)


LISTINGS = {"encodings": encodings, "datasets": datasets, "evaluations": evaluations,
            "configs": configs, "fields": fields, "studies": studies, "attention": attention,
            "pretrained": pretrained}


def listing(what: str, own_configs: Sequence[tuple[Path, object]] = ()) -> str:
    """The listing of topic `what`; `own_configs`, the (path, module) of config files the
    user gave, join posjax's in `configs`."""
    if what not in LISTINGS:
        raise unknown("listing", what, LISTINGS)
    return configs(own_configs) if what == "configs" else LISTINGS[what]()


def topics() -> str:
    """`posjax list` without a topic: each topic with what its listing shows."""
    width = max(map(len, LISTINGS))
    return "\n".join(["usage: posjax list TOPIC, one of:",
                      *(f"  {name:<{width}}  {_first_line(show.__doc__)}"
                        for name, show in LISTINGS.items()), "", *QUICK_START])
