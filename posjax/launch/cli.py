"""`posjax train | sweep | extrapolate | plot | report | analyze | list`: a thin layer over
the library; `posjax COMMAND --help` describes each.

Configs are given the ml_collections way: `--config=configs/lm.py:ARGS` loads the file and calls
its `get_config(ARGS)`, and `--config.a.b=v` overrides one field (a typo is an error).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import re
import shlex
import signal
import sys
import textwrap
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

import ml_collections
from absl import flags

from posjax import fileio, registry, runlock
from posjax.config import check_each_once, configured, load_config_module, load_user_module, shown
from posjax.errors import (
    ConfigError,
    did_you_mean,
    in_user_code,
    missing_folder,
    os_error_line,
    unknown,
)
from posjax.launch import discover, hostenv


@dataclasses.dataclass(frozen=True)
class Parsed:
    """A command's command line: its flags, its positional args and its --config (FILE:ARG)
    with the --config.a.b=v overrides, as given."""

    flags: flags.FlagValues
    positional: list[str]
    config_spec: str | None
    overrides: list[str]

    @property
    def spec(self) -> str:
        """--config's FILE:ARG, which the command needs: a one-line error when missing."""
        if self.config_spec is None:
            raise ConfigError("--config is required, e.g. --config=configs/lm.py:smoke "
                              "(posjax list configs)")
        return self.config_spec

    @functools.cached_property
    def config(self) -> ml_collections.ConfigDict:
        return configured(self.spec, self.overrides)


def _flags(argv: Sequence[str], define: Callable[[flags.FlagValues], None], *,
           config: bool, required: Sequence[str] = (),
           alternatives: dict[str, list[str]] | None = None) -> Parsed:
    """The one parser of every command: `argv` (without the command) into the flags `define`
    defines, positional args and, where the command takes a `config`, --config=FILE:ARG and
    its overrides (a bad flag or value is a one-line ConfigError)."""
    if config and argv and argv[-1] == "--config":  # it vanished: "--workdir is required"
        raise ConfigError("--config gives no value: give FILE:ARGS, e.g. "
                          "--config=configs/lm.py:smoke (posjax list configs)")
    if config:  # "--config FILE:ARG" reads as "--config=FILE:ARG", as absl reads "--workdir DIR"
        argv = [f"--config={arg}" if before == "--config" else arg
                for before, arg in zip(["", *argv], argv, strict=False) if arg != "--config"]
    given = [a for a in argv if config and a.startswith(("--config=", "--config."))]
    if "--config=" in given:
        raise ConfigError("--config= gives no value: give FILE:ARGS, e.g. "
                          "--config=configs/lm.py:smoke (posjax list configs)")
    fv = flags.FlagValues()
    define(fv)
    try:
        positional = fv(["posjax", *(a for a in argv if a not in given)])[1:]
    except flags.Error as e:
        line = str(e).splitlines()[0]
        # absl's "flag --trials=abc: invalid literal for int() with base 10: 'abc'"
        line = re.sub(r"^flag (--[\w.]+=.*?): invalid literal for int\(\) with base 10: .*$",
                      r"\1 is not a whole number: give one, e.g. 4", line)
        # and "flag --force=maybe: ('Non-boolean argument to boolean flag', 'maybe')"
        line = re.sub(r"^flag --([\w.]+)(=.*?): \('Non-boolean argument to boolean flag'.*$",
                      r"--\1\2 is not true or false: give --\1 or --no\1", line)
        unknown_flag = re.match(r"Unknown command line flag '([^']*)'", line)
        if unknown_flag:  # absl's own hint where one is near, else the flags there are
            own = sorted(f"--{name}" for name in fv)
            line = (f"unknown flag --{unknown_flag[1]}"
                    f"{did_you_mean('--' + unknown_flag[1], own)}; valid: {', '.join(own)}")
            if config and (instead := _as_config_arg(unknown_flag[1], argv, given)):
                line = f"unknown flag --{unknown_flag[1]}: {instead}"
        raise ConfigError(line) from None
    for name in fv:  # "--workdir=" would quietly mean the current folder, "--only=" every run
        _check_not_empty(fv[name], required=name in required,
                         instead=(alternatives or {}).get(name, []))
    specs = [a.split("=", 1)[1] for a in given if a.startswith("--config=")]
    overrides = [a for a in given if a.startswith("--config.")]
    keys = [a.partition("=")[0] for a in given]
    if twice := next((key for key in keys if keys.count(key) > 1), None):  # the last won
        values = [a.partition("=")[2] for a in given if a.partition("=")[0] == twice]
        raise ConfigError(f"{twice} is given twice ({' and '.join(values)}), and the last "
                          "would win without a word: give it once")
    return Parsed(fv, positional, specs[-1] if specs else None, overrides)


def _as_config_arg(name: str, argv: Sequence[str], given: Sequence[str]) -> str | None:
    """Where `--name` (unknown to a command that takes --config) is a config arg (the config
    file's, or a model, train or eval field's or an encoding hyperparameter's name): how to
    give it in --config's arg, with the value typed; else None."""
    from posjax import encoders
    from posjax.config.args import with_pair
    from posjax.config.fields import field_section

    spec = next((a.split("=", 1)[1] for a in reversed(given) if a.startswith("--config=")),
                "configs/lm.py")
    path, _, arg = spec.partition(":")
    try:
        defaults = getattr(load_config_module(path), "DEFAULTS", {})
    except ConfigError:  # the file's own error comes when the command reads it
        defaults = {}
    hparams = {key for encoding in encoders.names() for key in encoders.hparams(encoding)}
    if name not in defaults and not field_section(name) and name not in hparams:
        return None
    typed = next((a[2:] for a in argv if a.startswith(f"--{name}=")), name)
    return (f"{name} is a config arg, not a flag: give it in --config's arg, "
            f"--config={path}:{with_pair(arg, typed)}")


# extrapolate's flags whose empty value means none, over the run's config.eval value.
EMPTY_IS_NONE = ("rope_scaling", "learned_extension")


def _check_not_empty(flag, required: bool = False, instead: Sequence[str] = ()) -> None:
    """A flag given an empty value, or a list flag an empty item ("--lengths=128,,512"), is a
    one-line ConfigError: either would quietly mean something else (a default, one value
    fewer); a `required` one cannot be left out, one with alternatives (`instead`) only for
    one of them."""
    value = flag.value
    if not flag.present or not isinstance(value, (str, list)) or flag.name in EMPTY_IS_NONE:
        return
    if value in ("", []) or (isinstance(flag, flags.MultiFlag) and "" in value):
        other = " or ".join(f"--{name}" for name in instead)
        raise ConfigError(f"--{flag.name}= gives no value: give one" + (
            "" if required else f", or leave it out and give {other}" if other
            else ", or leave the flag out"))
    if isinstance(value, list) and "" in value:
        raise ConfigError(f"--{flag.name}={','.join(value)} has an empty value: write each "
                          "value once, with one comma between two")


def _define_cluster(fv):
    flags.DEFINE_string("coordinator", None, "several processes: process 0's HOST:PORT "
                        "(with --num_processes and --process_id)", flag_values=fv)
    flags.DEFINE_integer("num_processes", None, "several processes: how many",
                         flag_values=fv, lower_bound=1)
    flags.DEFINE_integer("process_id", None, "several processes: this one's index, "
                         "0..num_processes-1", flag_values=fv, lower_bound=0)


def _cluster(fv):
    from posjax.train.distributed import Cluster

    return Cluster(fv.coordinator, fv.num_processes, fv.process_id)


def _define_train(fv):
    flags.DEFINE_string("workdir", None, "run directory (re-running resumes)", flag_values=fv)
    flags.DEFINE_boolean("force", False, "resume even if the config changed (a model and "
                         "optimizer state of the checkpoint's shapes, with steps left to "
                         "train)", flag_values=fv)
    flags.DEFINE_boolean("progress", True, "show a progress bar", flag_values=fv)
    flags.DEFINE_list("seeds", [], "train these train.seed values in one process (as "
                      "--seed_steps says), each in --workdir with {seed} replaced, e.g. "
                      "--seeds=0,1,2 --workdir='runs/rope,seed={seed}' (posjax plot averages "
                      "folders named NAME,seed=K); --seeds=3 is seed 3 alone", flag_values=fv)
    flags.DEFINE_string("seed_steps", "vmap", "how --seeds are stepped: vmap (one batched "
                        "program) or in_turn (the lone run's program on each seed after the "
                        "other: each seed bit for bit its lone run)", flag_values=fv)
    flags.DEFINE_boolean("extrapolate", False, "then evaluate each run as posjax extrapolate "
                         "does, in this process", flag_values=fv)
    _define_cluster(fv)
    _define_import(fv)


class _EvaluateTrainedSayingWhere:
    """`evaluate_trained`, then its table (as `posjax extrapolate` prints it) and the files
    it wrote, one line each (process 0's): the trainer's Scorer for `posjax train
    --extrapolate`."""

    def __call__(self, experiment, workdir, step: int, params) -> dict:
        from posjax.eval import format_table
        from posjax.eval.evaluation import evaluate_trained, written_files
        from posjax.results import smoke
        from posjax.train import distributed

        pictures = _Pictures()
        result = evaluate_trained(experiment, workdir, step, params, draw=pictures)
        if distributed.is_primary():
            print(smoke.noted(format_table(result), [result]), flush=True)
            for path in written_files(result, workdir) + pictures.paths:
                print(f"posjax train: wrote {path}", flush=True)
        return result

    def scored(self, experiment, workdir) -> bool:
        """Whether the run's result scores its last step (not a step before --force trained
        it on); read, so that a damaged result is one line, not taken for a score."""
        from posjax.eval.evaluation import trained_result_path

        result = fileio.read_json(trained_result_path(experiment, workdir))
        return isinstance(result, dict) and result.get("step") == experiment.total_steps

    def check(self, experiment) -> None:
        from posjax.eval.evaluation import check_trained

        check_trained(experiment)


class _Pictures:
    """An evaluation's `draw` (posjax.eval.evaluation.Drawer): a result's pictures, drawn next
    to its file (posjax.results: a retrieval result's heatmap); `paths`, those drawn."""

    def __init__(self):
        self.paths: list[Path] = []

    def __call__(self, result: dict, path: Path) -> None:
        from posjax.results import plots

        self.paths += plots.draw_result(result, path)


def cmd_train(parsed: Parsed):
    from posjax.eval import methods
    from posjax.eval.during import DuringTraining
    from posjax.experiment import Experiment
    from posjax.train import distributed, trainer

    fv = parsed.flags
    _import_own_code(fv)  # before the config names what they register
    evaluate = _EvaluateTrainedSayingWhere() if fv.extrapolate else None
    evals = DuringTraining(parsed.config) or None  # config.evals, scored while training
    seeds = _numbers("seeds", fv.seeds, int, 0, "a seed >= 0", "0,1,2")
    if len(seeds) == 1 and seeds[0] > 1:  # the config arg's seeds=3 is three seeds
        print(f"posjax train: --seeds={seeds[0]} trains seed {seeds[0]} alone; {seeds[0]} "
              f"seeds are --seeds={','.join(map(str, range(seeds[0])))}", file=sys.stderr)
    if seeds and fv.num_processes:
        raise ConfigError("--seeds trains in one process: drop --num_processes, or train "
                          "each seed alone")
    if fv.seed_steps != "vmap" and not seeds:
        raise ConfigError(f"--seed_steps={fv.seed_steps} steps the seeds of --seeds: give "
                          "--seeds=0,1,... too, or drop it")
    if not seeds and trainer.SEED_FIELD in fv.workdir:  # a folder named "rope_{seed}"
        raise ConfigError(f"--workdir={fv.workdir} has {trainer.SEED_FIELD}, which --seeds "
                          "fills (one run per seed): give --seeds=0,1,..., or drop "
                          f"{trainer.SEED_FIELD} from --workdir")
    if seeds and parsed.config.train.seed:
        raise ConfigError(f"--seeds={','.join(fv.seeds)} gives each run its train.seed, which "
                          f"would replace the config's train.seed={parsed.config.train.seed}: "
                          "drop one of them")
    # the devices are joined first: the check's shapes use them
    distributed.initialize(_cluster(fv), auto=bool(parsed.config.train.distributed))
    methods.check_config(Experiment.from_config(parsed.config))
    try:
        if seeds:
            summaries = trainer.train_seeds(parsed.config, fv.workdir, seeds, force=fv.force,
                                            progress=fv.progress, evaluate=evaluate,
                                            evals=evals, seed_steps=fv.seed_steps)
        else:
            summaries = {None: trainer.train(parsed.config, fv.workdir, force=fv.force,
                                             progress=fv.progress, cluster=_cluster(fv),
                                             evaluate=evaluate, evals=evals)}
    except trainer.TrainingDiverged as e:
        print(f"posjax train: error: {e}", file=sys.stderr)
        return 1
    for workdir, summary in summaries.items():
        for stage in summary.get("stages", []):
            print(*[f"{workdir}:"] * bool(workdir), *(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in stage.items()))
        if "diverged" in summary:  # one seed of a program of seeds (posjax train --seeds)
            print(f"posjax train: error: {workdir}: {summary['diverged']}", file=sys.stderr)
    if distributed.is_primary():  # process 0 writes
        written = [shlex.quote(str(workdir or fv.workdir)) for workdir in summaries]
        folders = " ".join(written)
        one = written[0] if len(written) == 1 else "RUNDIR"  # --seeds trains several
        first = "" if fv.extrapolate else (
            f"evaluate with posjax extrapolate --workdir={one} (or train with --extrapolate), "
            "then ")
        print(f"posjax train: results in {folders} (config.json, metrics.jsonl, stages.json, "
              f"checkpoints/); {first}compare runs with posjax plot {folders} "
              "OTHER_RUNDIR...")
    return int(any("diverged" in s for s in summaries.values()))


def _define_sweep(fv):
    flags.DEFINE_string("workdir", None, "sweep directory", flag_values=fv)
    flags.DEFINE_integer("parallel", 1, "runs at a time", flag_values=fv, lower_bound=1)
    flags.DEFINE_string("only", None, "glob over run names, e.g. 'encoding=rope*'",
                        flag_values=fv)
    flags.DEFINE_multi_string("grid", [], "KEY=V1,V2: sweep these values of a config arg "
                              "instead of the config file's own sweep(); repeat for a "
                              "cartesian product, e.g. --grid=theta=1e4,5e5 "
                              "--grid=seq_len=64,128", flag_values=fv)
    flags.DEFINE_boolean("print_commands", False, "record the runs in sweep.json, print one "
                         "command per unfinished run (absolute paths) and exit", flag_values=fv)
    flags.DEFINE_boolean("status", False, "print every run's status and exit", flag_values=fv)
    flags.DEFINE_boolean("extrapolate", True, "evaluate each finished run", flag_values=fv)
    flags.DEFINE_boolean("vmap_seeds", False, "with seeds=N: train a point's N seeds in one "
                         "program (posjax train --seeds), vmapped unless --seed_steps says "
                         "otherwise", flag_values=fv)
    flags.DEFINE_string("seed_steps", "vmap", "with --vmap_seeds: how a point's seeds step in "
                        "their program, vmap or in_turn (posjax train --seed_steps)",
                        flag_values=fv)
    flags.DEFINE_string("executor", "local", "where runs execute: local (child processes) | "
                        "inprocess (this process, one run after another: a debugger's "
                        "breakpoint reaches the trainer; JAX_DISABLE_JIT=1 the jitted step) | "
                        "ray | slurm", flag_values=fv)
    flags.DEFINE_integer("retries", 0, "ray: retries of a failed run; slurm: requeues after "
                         "timeout or preemption", flag_values=fv, lower_bound=0)
    flags.DEFINE_integer("cpus_per_run", 1, "ray / slurm: CPUs per run", flag_values=fv,
                         lower_bound=1)
    flags.DEFINE_integer("gpus_per_run", 1, "GPUs per run where there are GPUs (TPU chips "
                         "on a Ray TPU cluster)", flag_values=fv, lower_bound=0)
    flags.DEFINE_string("ray_address", None, "ray: the cluster's HOST:PORT (default: start a "
                        "local Ray)", flag_values=fv)
    flags.DEFINE_string("slurm_partition", None, "slurm: partition", flag_values=fv)
    flags.DEFINE_integer("slurm_time_min", 60, "slurm: time limit per run, minutes",
                         flag_values=fv, lower_bound=1)
    flags.DEFINE_enum("slurm_cluster", "slurm", ["slurm", "local"], "slurm: 'local' runs the "
                      "job array with submitit's local executor", flag_values=fv)
    _define_import(fv)


def cmd_sweep(parsed: Parsed):
    """Every `--config.a.b=v` applies to every run; returns 1 if any run failed or was
    stopped on its own (it is not finished: the sweep's re-run resumes it)."""
    from posjax.launch import executors, sweep

    fv = parsed.flags
    given = {f.name for f in dataclasses.fields(executors.Options) if fv[f.name].present}
    runs_nothing = "status" if fv.status else "print_commands" if fv.print_commands else None
    # --status reads the folder alone; --print_commands also reads the runs' own flags
    unread = sorted(given | {name for name in ("executor", "print_commands", *(
        ("only", "extrapolate", "vmap_seeds") if runs_nothing == "status" else ()))
                             if fv[name].present and name != runs_nothing})
    if runs_nothing and unread:
        raise ConfigError(f"--{unread[0]} is not read with --{runs_nothing}, which runs "
                          "nothing: leave it out")
    executors.check_flags(fv.executor, given)
    _check_seed_steps(fv)
    if fv.status:
        sweep.status_cli(fv.workdir, parsed.config_spec, fv.grid)
        return 0
    config_file, _, base_arg = parsed.spec.partition(":")
    # before the config names what they register; a re-run without --import takes the
    # files the sweep recorded
    imports = fv["import"].value or sweep.recorded_imports(fv.workdir)
    _import_own_code(fv, imports)
    runs = sweep.expand(config_file, base_arg, fv.grid)  # each run's get_config, once
    if parsed.overrides:  # a typo would otherwise fail every run, one at a time
        sweep.check_overrides(runs, parsed.overrides)
    options = executors.Options(**{f.name: getattr(fv, f.name)
                                   for f in dataclasses.fields(executors.Options)})
    index = sweep.run_cli(
        parsed.spec, fv.workdir, only=fv.only, print_commands=fv.print_commands,
        overrides=parsed.overrides, extrapolate=fv.extrapolate,
        executor=fv.executor, options=options, runs=runs, grid=fv.grid,
        seed_steps=fv.seed_steps if fv.vmap_seeds else None, imports=imports,
    )
    runs = index.get("runs", {}).values()
    if not fv.print_commands and any(r["status"] == "done" for r in runs):
        from posjax.results import plots

        results = plots.sweep_results(fv.workdir)
        if results:
            print(plots.results_table(results))
            print(f"plots: posjax plot {shlex.quote(fv.workdir)}")  # a command to paste
    if not fv.print_commands:
        sweepdir = Path(fv.workdir).resolve()
        print(f"results in {sweepdir / 'runs'} (one folder per run), statuses in "
              f"{sweepdir / 'sweep.json'}", flush=True)
    unfinished = sweep.unfinished_lines(index.get("runs", {}))
    for line in [] if fv.print_commands else unfinished:  # last: a log's closing lines
        print(line, file=sys.stderr)
    return int(bool(unfinished))


def _check_seed_steps(fv) -> None:
    """A sweep's --seed_steps: a known way (trainer.SEED_STEPS), given with --vmap_seeds, not
    with --status."""
    if not fv["seed_steps"].present:
        return
    if fv.status:
        raise ConfigError("--seed_steps is not read with --status, which runs nothing: leave "
                          "it out")
    from posjax.train.trainer import check_seed_steps

    check_seed_steps(fv.seed_steps)
    if not fv.vmap_seeds:
        raise ConfigError(f"--seed_steps={fv.seed_steps} steps the seeds --vmap_seeds trains "
                          "in one program: add --vmap_seeds, or drop --seed_steps")


def _define_extrapolate(fv):
    flags.DEFINE_string("workdir", None, "trained run directory (or --pretrained)",
                        flag_values=fv)
    flags.DEFINE_string("pretrained", None, "a Hugging Face snapshot directory (config.json, "
                        "*.safetensors, tokenizer.json) to score instead of a run: llama, "
                        "mistral, qwen2 or gpt_neox, trained at its config's "
                        "original_max_position_embeddings (rope_scaling) or "
                        "max_position_embeddings", flag_values=fv)
    flags.DEFINE_string("text_glob", None, "score every file this glob matches, read with "
                        "the model's tokenizer (default: a run's own data; for --pretrained "
                        "the embedded corpus, Python's standard library); --output names its "
                        "file (needed with --workdir; with --pretrained a second text replaces "
                        "the first's without it)", flag_values=fv)
    flags.DEFINE_list("lengths", [], "evaluation lengths (default 1x..16x the training length; "
                      "a retrieval task leaves out those too short for one trial)",
                      flag_values=fv)
    flags.DEFINE_enum("protocol", None, ["nonoverlapping", "sliding"], "windowing protocol",
                      flag_values=fv)
    flags.DEFINE_integer("stride", None, "sliding-window stride (default: half the training "
                         "length)", flag_values=fv, lower_bound=1)
    _define_rope_scaling(fv)
    flags.DEFINE_integer("max_tokens", None, "scored tokens per length (default: the run's "
                         "config.eval.max_tokens; --pretrained: that of posjax's configs)",
                         flag_values=fv, lower_bound=1)
    flags.DEFINE_string("attention", None, "the kernel that scores a run, in place of its "
                        "model.attention (posjax list attention): the same scores up to "
                        "rounding, chunked's O(L) memory past what dense reaches",
                        flag_values=fv)
    flags.DEFINE_string("learned_extension", None,
                        "encoding that extends a learned table past its length, e.g. "
                        "hierarchical ('' or none for none; default: the run's config.eval)",
                        flag_values=fv)
    flags.DEFINE_string("output", None, "output file (default: WORKDIR/extrapolation.json, "
                        "named by what it measured: _sliding-sSTRIDE, _METHOD (yarn:2 as "
                        "_yarn-2), _ext-NAME added, retrieval_TASK.json for --eval=TASK; "
                        "--pretrained: the same names in $POSJAX_RESULTS_DIR/pretrained/NAME/, "
                        "POSJAX_RESULTS_DIR defaulting to ~/posjax_results and NAME the "
                        "snapshot directory's name); the command prints where it wrote",
                        flag_values=fv)
    flags.DEFINE_string("eval", None, "evaluation (posjax list evaluations): passkey, needle, "
                        "mqar, flipflop write retrieval_NAME.json and a heatmap .png; default: "
                        "the run's own (text or task)", flag_values=fv)
    flags.DEFINE_list("depths", [], "retrieval: depths of the key, 0 (start) .. 1 (end) "
                      "(default: the task's grid)", flag_values=fv)
    flags.DEFINE_integer("group_factor", None, "text: lengths share compiled row lengths "
                         "train_len * F**i (1: each length alone; default: the run's "
                         "config.eval.group_factor); changes no score beyond float rounding",
                         flag_values=fv, lower_bound=1)
    flags.DEFINE_integer("trials", None, "retrieval: trials per (length, depth) cell "
                         "(default 10)", flag_values=fv, lower_bound=1)
    flags.DEFINE_string("split", None, "match (a doc_match fine-tune): the split scored "
                        "(default test; validation to choose settings without the test split)",
                        flag_values=fv)
    flags.DEFINE_integer("batch_size", None, "task and retrieval evaluations: rows per batch "
                         "(default: config.eval.batch_size / 8)", flag_values=fv, lower_bound=1)
    flags.DEFINE_boolean("progress", True, "say where an evaluation that takes a while is, "
                         "length by length; --noprogress prints only the table",
                         flag_values=fv)
    _define_cluster(fv)
    _define_import(fv)


def _define_rope_scaling(fv):
    flags.DEFINE_string("rope_scaling", None,
                        "length extension at evaluation: linear | ntk | dynamic | yarn | llama3 "
                        "[:factor] | logn | rerope[:window] | leaky_rerope[:window:k] "
                        "| self_extend[:window:group] | sinks[:tokens:window] (+ to combine; "
                        "+global_only: on the layers without a sliding window only), "
                        "or a Hugging Face rope_scaling JSON block (also longrope); on "
                        "--pretrained a map (linear..llama3, a block) replaces the snapshot's "
                        "own rope_scaling block ('' or none: no method, a snapshot's own "
                        "block still applying; linear:1 scores it without; default: the run's "
                        "config.eval)",
                        flag_values=fv)


def _define_import(fv):
    flags.DEFINE_multi_string("import", [], "a Python file of your own code, imported first: "
                              "the evaluations, encodings and pretrained families it registers "
                              "(a run's own config file's are imported already)",
                              flag_values=fv)


def _import_own_code(fv, paths: Sequence[str] | None = None) -> None:
    """Import the files of --import (`_define_import`), or `paths`, each registering its
    code."""
    for path in fv["import"].value if paths is None else paths:
        with registry.loading(path):
            load_user_module(path, "--import")


def _numbers(name: str, texts: Sequence[str], convert: type, minimum: float, what: str,
             example: str) -> list:
    """Numbers from a list flag, each >= minimum and given once, or a one-line ConfigError
    naming the bad one (a value twice would be scored, trained or drawn twice)."""
    values = []
    for text in texts:
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not value >= minimum or not math.isfinite(value):
            raise ConfigError(f"--{name}={','.join(texts)}: {text!r} is not {what}; e.g. "
                              f"--{name}={example}")
        values.append(value)
    check_each_once(f"--{name}", values, ",".join(texts))
    return values


# extrapolate's flags that apply to --workdir (a trained run) only.
_RUN_ONLY = ("learned_extension", "attention", "coordinator", "num_processes", "process_id")


def _scored(fv) -> str:
    """"workdir" or "pretrained": the one of them given, its flags checked."""
    if (fv.workdir is None) == (fv.pretrained is None):
        raise ConfigError(("give one of --workdir and --pretrained, not both" if fv.workdir
                           else "--workdir or --pretrained is required") +
                          f"; usage: {COMMANDS['extrapolate'].usage}")
    if not fv.pretrained:
        return "workdir"
    for name in _RUN_ONLY:
        if fv[name].value is not None:
            raise ConfigError(f"--{name} applies to --workdir runs only, not to --pretrained: "
                              "drop it")
    return "pretrained"


def cmd_extrapolate(parsed: Parsed):
    from posjax.eval import evaluate, format_table
    from posjax.eval.evaluation import written_files
    from posjax.results import smoke
    from posjax.train import distributed

    fv = parsed.flags
    _import_own_code(fv)
    pictures = _Pictures()
    common = dict(lengths=_numbers("lengths", fv.lengths, int, 1, "a whole number >= 1",
                                   "128,256,512") or None, protocol=fv.protocol,
                  stride=fv.stride, rope_scaling=fv.rope_scaling, max_tokens=fv.max_tokens,
                  output=fv.output, evaluation=fv.eval, trials=fv.trials,
                  batch_size=fv.batch_size, group_factor=fv.group_factor, split=fv.split,
                  depths=_numbers(
                      "depths", fv.depths, float, 0, "a fraction from 0 to 1", "0,0.5,1") or None)
    if _scored(fv) == "pretrained":
        from posjax.pretrained import files
        from posjax.pretrained.extrapolate import evaluate_pretrained, output_dir

        result = evaluate_pretrained(fv.pretrained, text_glob=fv.text_glob,
                                     progress=fv.progress, draw=pictures, **common)
        folder = output_dir(files.snapshot(fv.pretrained), fv.output)
    else:
        from posjax.pretrained.extrapolate import text_kind

        text = functools.partial(text_kind, fv.text_glob) if fv.text_glob else None
        result = evaluate(fv.workdir, learned_extension=fv.learned_extension,
                          cluster=_cluster(fv), text=text, attention=fv.attention,
                          progress=fv.progress, draw=pictures, **common)
        folder = fv.workdir
    # A stop from here on says the result was written (runlock.written).
    written = (written_files(result, folder, fv.output) + pictures.paths
               if distributed.is_primary() else [])
    print(smoke.noted(format_table(result), [result]))
    for path in written:  # process 0 wrote them
        print(f"wrote {path}")


# What the re-run of an interrupted command does: train and sweep resume from checkpoints;
# an evaluation writes its result only when every length is scored, so it starts again.
INTERRUPTED_FIX = {
    "train": "re-run the same command to resume",
    "sweep": "re-run the same command to resume",
    "extrapolate": "nothing was written; re-run the same command to score again",
}


def _define_plot(fv):
    flags.DEFINE_string("output", None, "output directory (default: the sweep or run "
                        "directory given, or the folder that holds the ones given, where they "
                        "sit side by side or under the current folder)", flag_values=fv)
    _define_import(fv)


def cmd_plot(parsed: Parsed):
    from posjax.results import plots

    if not parsed.positional:
        raise ConfigError(f"give a sweep or run directory, or a result file; usage: "
                          f"{COMMANDS['plot'].usage}")
    _import_own_code(parsed.flags)
    for path in plots.plot_sweep(parsed.positional, output=parsed.flags.output):
        print(path)


def _define_report(fv):
    flags.DEFINE_boolean("check", False, "only list the generated tables, quoted numbers "
                         "and plots that differ from the raw results (exit 1 if any), of one "
                         "study folder or several in one process", flag_values=fv)
    flags.DEFINE_string("output", None, "run folders: where the plots and table go (default: "
                        "as posjax plot)", flag_values=fv)


def cmd_report(parsed: Parsed):
    """Regenerate a study's plots and generated README tables from its raw results, or
    compare run folders as a sweep's runs are compared (their plots, then their table)."""
    from posjax.results import plots, report
    from posjax.results.values import is_study

    paths, fv = parsed.positional, parsed.flags
    if not paths:
        raise ConfigError(f"give a study folder or run folders; usage: "
                          f"{COMMANDS['report'].usage}")
    missing = next((path for path in paths if not Path(path).is_dir()), None)
    if missing is not None:
        # a study named as from the checkout, given from another folder
        there = Path(__file__).resolve().parents[2] / missing
        if not Path(missing).is_absolute() and is_study(there):
            raise ConfigError(f"{missing} does not exist here (did you mean {there}, the "
                              "study in posjax's checkout?): give its path")
        raise missing_folder(missing, "give a study folder (experiments/NAME) or run folders")
    study = len(paths) == 1 and is_study(paths[0])
    if fv.check and fv["output"].present:
        raise ConfigError("--output is not read with --check, which writes nothing: drop it")
    if fv.check:
        return _check_studies(paths)
    if fv.output is not None and study:
        raise ConfigError("--output applies to run folders; a study's report is written into "
                          "its own folder: drop --output")
    written = (report.report(paths[0], report.checkout_root(paths[0])) if study
               else plots.plot_sweep(paths, output=fv.output))
    if not study:
        print(plots.results_table(plots.sweep_results(paths)))
    for path in written:
        print(path)


def _check_studies(paths: Sequence[str]) -> int:
    """`report --check` of one study folder or several: each one's plots, then every page
    that quotes them (its README, the checkout's README and docs/), each page once and each
    study's values computed once, however many of the studies a page quotes. 1 if anything
    differs from the raw results (a line each on stderr), else 0 and a line per study."""
    from posjax.results import report
    from posjax.results.values import is_study

    for path in paths:
        if not is_study(path):
            raise ConfigError(f"--check takes study folders (experiments/NAME, with "
                              f"results/sweep.json or values.py), and {path} is none: drop it, "
                              "or drop --check to compare run folders")
        if not (Path(path) / "README.md").is_file():
            raise ConfigError(f"{path} has no README.md, which --check compares with its "
                              f"raw results: write one, or draw its plots with posjax report "
                              f"{path}")
    cache: dict = {}  # each study's values computed once for all the pages
    checked: set[Path] = set()
    problems = []
    for path in paths:
        root = report.checkout_root(path)
        problems += report.runs_without_folders(path) or report.stale_plots(path)
        for page in report.pages(path, root):
            if page.resolve() not in checked:
                checked.add(page.resolve())
                problems += report.check(page, root, cache)
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        for path in paths:
            print(f"{path}: every generated table, quoted number, claim and plot matches "
                  "its raw results")
    return int(bool(problems))


def _define_analyze(fv):
    flags.DEFINE_integer("dim", 128, "head dimension d", flag_values=fv, lower_bound=2)
    flags.DEFINE_list("theta", ["10000"], "one or more rotary bases", flag_values=fv)
    flags.DEFINE_integer("max_distance", 4096, "largest relative distance", flag_values=fv,
                         lower_bound=1)
    flags.DEFINE_integer("train_len", 512, "training length (critical dimension)",
                         flag_values=fv)
    flags.DEFINE_string("output", "runs/decay", "output path; .png, .md and .json are added (a "
                        "path ending in one of them counts as without it)",
                        flag_values=fv)


def cmd_analyze(parsed: Parsed):
    from posjax.results import analysis

    what, fv = parsed.positional, parsed.flags
    analyses = {"decay": analysis.decay_report}
    if not what:
        raise ConfigError(f"give an analysis: posjax analyze {' | '.join(analyses)}")
    if what[0] not in analyses:
        raise unknown("analysis", what[0], analyses)
    if len(what) > 1:  # it named the valid first word as unknown
        raise ConfigError(f"posjax analyze takes one analysis, got {' '.join(what)}: drop "
                          f"{what[1]!r} (its options are flags: --theta=10000,500000)")
    thetas = _numbers("theta", fv.theta, float, 1.0 + 1e-9, "a rotary base > 1",
                      "10000,500000")
    if Path(fv.output.strip()).name in ("", "..") or fv.output.endswith(os.sep):
        raise ConfigError(f"--output={fv.output!r} names no file: give a path such as "
                          "--output=runs/decay (.png, .md and .json are added)")
    output = Path(fv.output)  # a suffix it writes anyway is dropped, not doubled
    if output.suffix in (".png", ".md", ".json"):
        output = output.with_suffix("")
    if output.is_dir():  # its files would land beside it, named after it
        raise ConfigError(f"--output={fv.output} is a folder: give the files' path without "
                          f"their suffix, e.g. --output={output / 'decay'}")
    for path in analyses[what[0]](dim=fv.dim, thetas=thetas, max_distance=fv.max_distance,
                                  train_len=fv.train_len, output=str(output)):
        print(path)


def _define_list(fv):
    flags.DEFINE_string("config", None, "a config file of your own (FILE, or FILE:ARGS with "
                        "the args left unread), loaded first: the encodings, datasets, ... it "
                        "registers are listed with posjax's", flag_values=fv)
    _define_import(fv)


def cmd_list(parsed: Parsed):
    what = parsed.positional
    if len(what) > 1:
        raise ConfigError(f"give one topic: posjax list [{'|'.join(discover.LISTINGS)}]")
    own = ()
    _import_own_code(parsed.flags)
    if parsed.flags.config:
        path = parsed.flags.config.partition(":")[0]
        with registry.loading(path):
            own = ((Path(path), load_config_module(path)),)
    print(discover.listing(what[0], own) if what else discover.topics())


@dataclasses.dataclass(frozen=True)
class Command:
    run: Callable[[Parsed], int | None]
    define: Callable[[flags.FlagValues], None]
    usage: str
    summary: str
    example: str

    @property
    def takes_config(self) -> bool:
        """Whether it takes --config=FILE:ARGS and its --config.a.b=V overrides."""
        return "--config=FILE:ARGS" in self.usage

    @property
    def required(self) -> list[str]:
        """The flags its usage names outside brackets, other than --config (which `sweep
        --status` does without) and alternatives (A|B, which the command checks): --workdir."""
        return [word[2:].split("=")[0] for word in self.usage.split()[2:]
                if word.startswith("--") and not word.startswith("--config=")
                and "|" not in word]

    @property
    def alternatives(self) -> dict[str, list[str]]:
        """{flag: the flags its usage offers instead of it (A|B)}: extrapolate's --workdir
        and --pretrained."""
        found = {}
        for word in self.usage.split()[2:]:
            if word.startswith("--") and "|" in word:
                names = [part[2:].split("=")[0] for part in word.split("|")]
                found.update({name: [n for n in names if n != name] for name in names})
        return found

    @property
    def takes_positional(self) -> bool:
        """Whether its usage names an argument that is no flag (a directory, a topic)."""
        return any(not word.startswith(("--", "[--", "[flags]"))
                   for word in self.usage.split()[2:])

    def parse(self, argv: Sequence[str]) -> Parsed:
        """`argv` (without the command) parsed by `_flags`; a stray argument is an error."""
        parsed = _flags(argv, self.define, config=self.takes_config, required=self.required,
                        alternatives=self.alternatives)
        for name in self.required:
            if parsed.flags[name].value is None:
                raise ConfigError(f"--{name} is required; usage: {self.usage}")
        if parsed.positional and not self.takes_positional:
            raise ConfigError(f"unexpected argument {parsed.positional[0]!r}; usage: "
                              f"{self.usage}")
        return parsed


_CONFIG_HELP = ("config file and its arg, FILE:KEY=VALUE,...; --config.a.b=VALUE overrides "
                "one field (posjax list configs)")
COMMANDS = {
    "train": Command(
        cmd_train, _define_train, "posjax train --config=FILE:ARGS --workdir=DIR [flags]",
        "Train one run (--seeds: several seeds of it in one program); re-running the same "
        "command resumes it from its last checkpoint.",
        "posjax train --config=configs/lm.py:encoding=rope,smoke --workdir=runs/rope"),
    "sweep": Command(
        cmd_sweep, _define_sweep, "posjax sweep --config=FILE:ARGS --workdir=DIR [flags]",
        "Train and evaluate every run of the config file's sweep(), of --grid's values, or "
        "of one config's seeds=N; re-running skips finished runs and resumes interrupted "
        "ones.",
        "posjax sweep --config=configs/lm.py:study=main,smoke --workdir=runs/main "
        "--parallel=2"),
    "extrapolate": Command(
        cmd_extrapolate, _define_extrapolate,
        "posjax extrapolate --workdir=RUNDIR|--pretrained=DIR [flags]",
        "Evaluate a trained run, or a pretrained Hugging Face model (--pretrained), at "
        "lengths past its training length: perplexity (text), accuracy per size (tasks) or, "
        "with --eval=passkey|needle|mqar|flipflop, retrieval accuracy per (length, depth) "
        "cell with a heatmap.",
        "posjax extrapolate --workdir=runs/rope --lengths=128,256,512 "
        "--rope_scaling=yarn:4"),
    "plot": Command(
        cmd_plot, _define_plot, "posjax plot SWEEPDIR|RUNDIR|RESULT.json... [--output=DIR]",
        "Draw the plots and table comparing the runs of a sweep, of run folders (runs trained "
        "one by one: posjax plot runs/rope runs/alibi), of a folder of runs (posjax plot "
        "runs) or of result files written with posjax extrapolate --output, each a run named "
        "by its file, from their results.",
        "posjax plot runs/rope runs/alibi"),
    "report": Command(
        cmd_report, _define_report, "posjax report EXPERIMENT_DIR|RUNDIR... [flags]",
        "Regenerate a study's plots (its sub-studies' too: folders in it with their own "
        "results/), README tables and quoted numbers from its raw results, and check the "
        "claims its pages mark (<!-- c A < B -->); "
        "given run folders (or a sweep, or a folder of runs), draw their plots as posjax plot "
        "does and print their table.",
        "posjax report experiments/main --check"),
    "analyze": Command(
        cmd_analyze, _define_analyze, "posjax analyze decay [flags]",
        "RoPE's long-range decay bound and critical dimension for one or more bases.",
        "posjax analyze decay --theta=10000,500000 --train_len=512"),
    "list": Command(
        cmd_list, _define_list,
        f"posjax list [{'|'.join(discover.LISTINGS)}] [--config=FILE]",
        "List the encodings (what each computes and its source, sites, hyperparameters), "
        "the datasets (their config.data fields), the evaluations, the config files (args "
        "with defaults), the model, train and eval fields (defaults and meanings), the "
        "studies or the attention ways; without a topic, the topics.",
        "posjax list encodings"),
}


def help_text(name: str) -> str:
    """`posjax NAME --help`: usage, what it does, every flag with its default, an example."""
    command = COMMANDS[name]
    fv = flags.FlagValues()
    command.define(fv)
    lines = [f"usage: {command.usage}", "", *textwrap.wrap(command.summary, 96), ""]
    # sweep --status reads the folder's own sweep.json, and needs no --config
    config_needed = "required, but not with --status" if "status" in fv else "required"
    rows = [("--config", _CONFIG_HELP, config_needed)] if command.takes_config else []
    for flag_name in fv:
        flag = fv[flag_name]
        rows.append((f"--{flag_name}", flag.help, "required" if flag_name in command.required
                     else f"default: {shown(flag.default)}"))
    if rows:
        lines.append("flags:")
        for flag, text, default in rows:
            lines.append(f"  {flag} ({default})")
            lines += textwrap.wrap(" ".join(text.split()), 92, initial_indent="      ",
                                   subsequent_indent="      ")
        lines.append("")
    lines += ["example:", f"  {command.example}"]
    return "\n".join(lines)


def overview() -> str:
    """`posjax --help`: the usage line and every command with what it does (its summary's
    first clause)."""
    width = max(map(len, COMMANDS))
    # Each summary's first clause: the rest (how re-running resumes, ...) is in COMMAND --help.
    return "\n".join([
        f"usage: posjax {{{'|'.join(COMMANDS)}}} [flags]", "", "commands:",
        *(f"  {name:<{width}}  {command.summary.split('; ')[0].rstrip('.')}"
          for name, command in COMMANDS.items()),
        "", "posjax COMMAND --help: its flags, their defaults and an example"])


def _print_help(text: str) -> None:
    print(text, flush=True)


# How to install the backend a JAX_PLATFORMS name asks for, at the pinned jax (the CUDA build:
# the gpu extra, pinned by constraints-gpu.txt); any other name: JAX's guide.
_CUDA_INSTALL = ("pip install -c constraints.txt -c constraints-gpu.txt -e '.[gpu]' in the "
                 "checkout (CUDA 13: NVIDIA driver 580 or newer)")
JAX_PLATFORM_INSTALLS = {
    "cuda": _CUDA_INSTALL,
    "gpu": f"NVIDIA: {_CUDA_INSTALL}; AMD: JAX's ROCm plugin",
    "tpu": "pip install -c constraints.txt 'jax[tpu]'",
}
_JAX_INSTALL_GUIDE = "see https://docs.jax.dev/en/latest/installation.html"
# JAX_PLATFORMS names that stand for any of several backends.
_PLATFORM_ALIASES = {"gpu": {"cuda", "rocm"}}


def _not_started(requested: Sequence[str], started: Sequence[str]) -> list[str]:
    """The JAX_PLATFORMS names in `requested` that no backend in `started` stands for."""
    return [name for name in requested
            if not ({name} | _PLATFORM_ALIASES.get(name, set())) & set(started)]


def _unavailable_platform() -> ConfigError | None:
    """JAX_PLATFORMS naming a backend that does not start here, as a one-line error; None when
    the variable is unset or every backend it names starts. Called after a command failed:
    checking before would start JAX's backends ahead of a multi-process run's
    jax.distributed.initialize. Whether jax.devices() works proves nothing: JAX keeps the
    backends that started before one failed, so `cpu,tpu` would then seem to work."""
    requested = [name for name in os.environ.get("JAX_PLATFORMS", "").lower().split(",")
                 if name]
    if not requested:
        return None
    import jax
    from jax.extend import backend

    try:
        if not _not_started(requested, [name.lower() for name in backend.backends()]):
            return None
    except (RuntimeError, AssertionError):  # JAX's words for a backend that failed to start
        pass
    jax.config.update("jax_platforms", None)  # every backend that starts here, to list them
    backend.clear_backends()
    available = sorted(name.lower() for name in backend.backends())
    missing = _not_started(requested, available)
    if not missing:
        return None
    return ConfigError(f"JAX_PLATFORMS={','.join(requested)}: {missing[0]} is not available "
                       f"here (available: {', '.join(available)}); unset JAX_PLATFORMS or "
                       f"install it: {JAX_PLATFORM_INSTALLS.get(missing[0], _JAX_INSTALL_GUIDE)}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (2: a bad flag or config, 1: the run failed).

    From the command line (argv None) the process first re-executes itself with huge-page
    malloc and keeps to the cores a sweep gave it (`posjax.launch.hostenv`), and a stop
    signal after the command leaves the process its code (`_ignore_stops_in_teardown`); a
    caller passing argv keeps its process as it is, and gets `runlock.stopped_code()` back
    where the command line's process ends with it (`_exit_interrupted`).
    """
    code = _command(argv)
    if argv is None:
        _ignore_stops_in_teardown()
    return code


def _ignore_stops_in_teardown() -> None:
    """From here the command's work is done and written: stop signals are ignored while the
    interpreter tears down (a second or so under JAX), so the process ends with the
    command's own exit code. A Python handler would not do: finalisation puts the default
    action back before its slowest part, where a SIGTERM then killed the process (rc 143,
    as if the work were lost)."""
    for signum in runlock.STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def _command(argv: Sequence[str] | None) -> int:
    """`main`'s work: the command's exit code."""
    argv_given = argv is not None
    if not argv_given:
        hostenv.outputs_may_close()
        hostenv.reexec_with_huge_pages()
        hostenv.pin_to_cpus(os.environ)
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        _print_help(overview())
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command in COMMANDS and (given := next((a for a in rest if a.startswith(
            ("--help=", "--helpfull="))), None)):  # absl called it an unknown flag --help
        print(f"posjax {command}: error: {given.partition('=')[0]} takes no value: posjax "
              f"{command} {given.partition('=')[0]}", file=sys.stderr)
        return 2
    if command in COMMANDS and {"-h", "--help", "--helpfull"} & set(rest):
        full = "--helpfull" in rest and COMMANDS[command].takes_config
        _print_help(help_text(command) + ("\n\n" + discover.fields() if full else ""))
        return 0
    runlock.die_with_parent()
    interrupted = f"posjax {command}: interrupted: " + INTERRUPTED_FIX.get(
        command, "re-run the same command")
    try:
        with runlock.interruptible(interrupted, f"posjax {command}", then_ignored=not argv_given):
            if command not in COMMANDS:
                raise unknown("command", command, COMMANDS)
            return COMMANDS[command].run(COMMANDS[command].parse(rest)) or 0
    except ConfigError as e:
        runlock.close_bars()
        print(f"posjax {command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        said = isinstance(stop, runlock.Interrupted) and str(stop)
        print(f"posjax {command}: {said}" if said else interrupted, file=sys.stderr)
        if argv_given:
            return runlock.stopped_code()
        _exit_interrupted()
    except OSError as e:  # disk full, a folder gone read-only mid-run: what, where, the fix
        runlock.close_bars()
        print(f"posjax {command}: error: {os_error_line(e)}", file=sys.stderr)
        return 2
    except Exception as e:
        runlock.close_bars()
        platform_error = _unavailable_platform()
        if platform_error:
            print(f"posjax {command}: error: {platform_error}", file=sys.stderr)
            return 2
        from posjax.train import distributed

        if distributed.peer_failed(e):  # exits at once, see posjax.train.distributed.leave
            distributed.leave(f"posjax {command}: error: another process of this run stopped "
                              f"({distributed.peer_cause(e)}): re-run every "
                              "process's command to resume from the last checkpoint")
        traceback.print_exc()
        # The last line is what a sweep records and shows: the error itself, not the note
        # JAX appends after it about the frames it filtered out, and the line of the user's
        # own code it came from (an encoding of theirs), if any.
        print(f"posjax {command}: failed: {error_line(e)}{in_user_code(e)}", file=sys.stderr)
        return 1


def _exit_interrupted() -> NoReturn:
    """End an interrupted command-line process with `runlock.stopped_code()`, its work
    already cleaned up (checkpoints waited for, files closed): first the computations it left
    running on the devices are waited for, then the process ends without the interpreter's
    teardown, which segfaulted under JAX's client and its threads (rc 139 after the
    interrupted line, for most SIGTERMs during `posjax extrapolate` at long lengths on a
    CPU)."""
    jax = sys.modules.get("jax")
    for array in jax.live_arrays() if jax is not None else ():
        with contextlib.suppress(Exception):  # a failed computation leaves nothing to wait for
            array.block_until_ready()
    _end_process(runlock.stopped_code())


def _end_process(code: int) -> NoReturn:
    """Flush the output and end the process with `code`, without the interpreter's teardown."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe takes nothing more
            stream.flush()
    os._exit(code)


def error_line(error: BaseException) -> str:
    """`Type: message` of an exception, on one line (its message's first line)."""
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


if __name__ == "__main__":
    sys.exit(main())
