"""Every command the README and docs/ show in their fenced bash blocks works as shown: the cheap
ones (help, listings, the decay analysis, a study's check, a script's --help) run here; the
others are parsed as posjax parses them (the command, every flag, the config file with its
arg and overrides, a sweep's runs and grid, an evaluation's name and method) and every path in
the checkout they name exists. What cannot run here is named below with the reason. Also: the
download commands against the pinned `hf` CLI, the CUDA install line against
constraints-gpu.txt, the GPU check's time stated once and as its script sets it, and no issue
a reader cannot see."""

from __future__ import annotations

import copy
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from posjax import encoders, fileio
from posjax.config import config_json, overridden
from posjax.eval import evaluation, methods
from posjax.experiment import Experiment
from posjax.launch import cli, sweep

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# The checkout's folders: a path under one of them that a command names must exist (runs/,
# models/, /data/... are what the commands write or the reader brings).
CHECKOUT = ("configs/", "scripts/", "experiments/", "tests/", "docs/", "benchmarks/", "posjax/")
# What runs here, by its words after `posjax`: help, listings and the decay analysis.
RUN_HERE = (("list",), ("analyze",))

# What is only parsed, and why: by a word (or part of one) of its flags and args...
NOT_RUN_FLAGS = {
    "--pretrained=models/": "needs a snapshot downloaded from the Hugging Face Hub",
    "--executor=ray": "needs Ray (pip install 'posjax[ray]') and a cluster",
    "--executor=slurm": "needs SLURM (pip install 'posjax[slurm]')",
    "--coordinator=": "starts several processes that wait for each other",
    "--config.train.distributed=true": "joins the processes a SLURM job or a TPU pod starts",
    "size=gpu": "sized for a GPU",
    "my_config.py": "the reader's own file (docs/extending.md's block above it, followed by "
                    "tests/test_extending.py; `posjax list` runs here with it)",
}
# ... else by the command itself (posjax's subcommand, the script, the module).
NOT_RUN = {
    "scripts/run.sh": "installs .venv and trains the main job (minutes; the GPU form needs one)",
    "scripts/test.sh": "runs the whole suite",
    "scripts/collect_results.py": "copies the runs of a sweep the page trains first: its help "
                                  "runs here, the page's steps in tests/test_sweep.py",
    "scripts/gpu_check.sh": "needs an NVIDIA GPU",
    "train": "trains for seconds to hours: the smoke form runs in tests/test_train.py",
    "sweep": "trains every run of a sweep: smoke sweeps run in tests/test_sweep.py",
    "extrapolate": "scores a run the page's train command writes first",
    "plot": "draws runs the page's commands train first (tests/test_report.py)",
    "report": "regenerates a study's files: its check, `posjax report --check`, runs on every "
              "page in tests/test_report.py",
}


@dataclass(frozen=True)
class Command:
    page: str
    text: str  # as shown, continuation lines joined
    argv: tuple[str, ...]  # from the program on: posjax ..., bash scripts/..., python -m ...

    def __str__(self):
        return f"{self.page}: {self.text}"


def _logical_lines(block: str):
    """The block's commands, continuation lines and quoted newlines joined, comments dropped."""
    buffer = ""
    for line in block.splitlines():
        buffer += line
        if buffer.endswith("\\"):
            buffer = buffer[:-1]
            continue
        try:
            words = shlex.split(buffer, comments=True)
        except ValueError:  # a quote open across lines (a JSON block)
            buffer += "\n"
            continue
        if words:
            yield " ".join(words), words
        buffer = ""


SEPARATORS = ("&&", "||", "|", "&", ";")
SCRIPT_FOLDERS = ("scripts/", "benchmarks/")  # `python scripts/X.py ...`: the script's --help runs


def _simple_commands(words: list[str]):
    """`words` cut at the shell's separators into commands, env assignments and launchers
    (srun, a loop's do) dropped; a command inside a flag's value (--command="... posjax ...")
    too. A loop's variable ($i) reads as its first value, 0."""
    part: list[str] = []
    for word in [*words, ";"]:
        if "posjax " in word and "=" in word:
            yield from _simple_commands(shlex.split(word.split("=", 1)[1]))
            continue
        if word not in SEPARATORS and not word.endswith(";"):
            part.append(word.replace("$i", "0"))
            continue
        if word.endswith(";") and word != ";":  # `for i in 0 1; do`
            part.append(word[:-1])
        while part and (re.fullmatch(r"\w+=\S*", part[0]) or part[0] in ("srun", "do")):
            part.pop(0)
        if part:
            yield part
        part = []


def _program(words: list[str]) -> tuple[str, ...] | None:
    if words[0] == "posjax":
        return tuple(words)
    if words[0] == "bash" and len(words) > 1 and words[1].startswith("scripts/"):
        return tuple(words)
    if words[0].startswith("python") and words[1:2] == ["-m"] and words[2].startswith("posjax"):
        return tuple(words)
    if words[0].startswith("python") and words[1:2] and words[1].startswith(SCRIPT_FOLDERS):
        return tuple(words)
    return None


def page_commands(program: str | None = None) -> list[Command]:
    """Every command of the pages' bash blocks (or those of `program`: hf, ...)."""
    found = []
    for page in PAGES:
        for block in re.findall(r"```(?:bash|sh)\n(.*?)```", page.read_text(), re.S):
            for text, words in _logical_lines(block):
                for simple in _simple_commands(words):
                    argv = tuple(simple) if program else _program(simple)
                    if argv and (program is None or argv[0] == program):
                        found.append(Command(str(page.relative_to(ROOT)), text, argv))
    return found


COMMANDS = page_commands()
# Folders a page's own commands write before a later command there names them: the study
# folder of `python scripts/collect_results.py SWEEP STUDY`.
WRITTEN = {(c.page, c.argv[3]) for c in COMMANDS
           if c.argv[0].startswith("python") and c.argv[1:2] == ("scripts/collect_results.py",)}


def _words(command: Command) -> tuple[str, ...]:
    """The command's words after its program: posjax's subcommand on, the script on, the
    module on."""
    return command.argv[2:] if command.argv[1:2] == ("-m",) else command.argv[1:]


def _runs_here(command: Command) -> bool:
    words = _words(command)
    return command.argv[0] == "posjax" and (
        "--help" in words or any(words[:len(run)] == run for run in RUN_HERE))


def _why_not_run(command: Command) -> str | None:
    """Why `command` is only parsed here (NOT_RUN_FLAGS, NOT_RUN), None if no reason is
    given."""
    words = _words(command)
    return next((reason for key, reason in NOT_RUN_FLAGS.items()
                 if any(key in word for word in words[1:])), NOT_RUN.get(words[0]))


def _checkout_paths(argv) -> list[str]:
    """The paths inside the checkout that `argv` names, as words or flag values."""
    values = [word.split("=", 1)[-1].split(":", 1)[0] for word in argv]
    return [v for v in values if v.startswith(CHECKOUT)]


def test_the_pages_show_commands_of_every_kind():
    programs = {c.argv[0] if c.argv[0] != "posjax" else c.argv[1] for c in COMMANDS}
    assert {"train", "sweep", "extrapolate", "plot", "report", "analyze", "list",
            "bash"} <= programs, programs
    assert len(COMMANDS) > 80


@pytest.mark.parametrize("command", COMMANDS, ids=str)
def test_every_command_parses_and_names_only_paths_that_exist(command, monkeypatch, tmp_path,
                                                              my_config):
    """The subcommand, its flags and --config (file, arg keys, overrides) as posjax reads
    them, and what each command checks before any work; the cheap ones run."""
    missing = [p for p in _checkout_paths(command.argv) if not (ROOT / p).exists()
               and (command.page, p) not in WRITTEN]
    assert not missing, f"{command}: {missing} not in the checkout"
    monkeypatch.chdir(ROOT)
    if command.argv[0].startswith("python") and command.argv[1].startswith(SCRIPT_FOLDERS):
        # python scripts/X.py: it exists and takes --help
        done = subprocess.run([sys.executable, command.argv[1], "--help"], cwd=ROOT,
                              capture_output=True, text=True)
        assert done.returncode == 0 and "usage:" in done.stdout, (command, done.stderr)
        return
    if command.argv[0] == "bash":
        script = ROOT / command.argv[1]
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0, command
        return
    if command.argv[0] != "posjax":  # python -m posjax.MODULE: it exists and takes --help
        module = __import__(command.argv[2], fromlist=["main"])
        with pytest.raises(SystemExit) as done:
            module.main(["--help"])
        assert done.value.code == 0, command
        return
    name, args = command.argv[1], list(command.argv[2:])
    assert name in cli.COMMANDS, f"{command}: no command {name!r}"
    if _runs_here(command):  # in tmp_path: what it writes (decay.png, ...) lands there
        monkeypatch.chdir(tmp_path)
        if "--config=my_config.py" in args:  # the file as docs/extending.md shows it
            (tmp_path / "my_config.py").write_text(my_config)
        try:
            assert cli.main([name, *args]) == 0, command
        finally:
            encoders._REGISTRY.pop("sandwich_ext", None)
        return
    if "my_config.py" in " ".join(args):
        return  # NOT_RUN_FLAGS says why
    for run in re.findall(r"pretrained=(runs/[^,\s]+)", " ".join(args)):
        _trained_earlier(command, run, tmp_path, monkeypatch)
    parsed = cli.COMMANDS[name].parse(args)
    if name == "train":
        Experiment.from_config(parsed.config)
    elif name == "sweep" and parsed.config_spec:
        config_file, _, arg = parsed.spec.partition(":")
        for run in sweep.expand(config_file, arg, parsed.flags.grid):
            overridden(copy.deepcopy(run.config), parsed.overrides)
    elif name == "extrapolate":
        fv = parsed.flags
        cli._scored(fv)
        if fv.eval:
            evaluation.EVALUATIONS.lookup(fv.eval)
        lengths = [int(n) for n in fv.lengths] or [16384]
        methods.apply_methods(encoders.get("rope"), fv.rope_scaling, 4096, max(lengths))
    elif name in ("plot", "report"):
        assert parsed.positional, command


def _trained_earlier(command: Command, run: str, tmp_path: Path, monkeypatch) -> None:
    """The config.json of `run` that a `posjax train --workdir=RUN` earlier on the command's
    page writes, in tmp_path, which becomes the folder the command runs in (the checkout's
    folders linked into it)."""
    earlier = next(c for c in COMMANDS if c.page == command.page and c.argv[1] == "train"
                   and f"--workdir={run}" in c.argv)
    config = cli.COMMANDS["train"].parse(list(earlier.argv[2:])).config
    fileio.write_json(tmp_path / run / "config.json", config_json(config))
    for folder in CHECKOUT:
        (tmp_path / folder).symlink_to(ROOT / folder)
    monkeypatch.chdir(tmp_path)


def test_what_cannot_run_here_says_why():
    assert [str(c) for c in COMMANDS if not _runs_here(c) and not _why_not_run(c)] == []


# --- downloads, the GPU install, the GPU check's time, issues ----------------------------


def _hf_help() -> str:
    hf = Path(sys.executable).with_name("hf")
    if not hf.exists():
        pytest.skip("the hf CLI (huggingface_hub) is not installed in this environment")
    return subprocess.run([str(hf), "download", "--help"], capture_output=True, text=True,
                          check=True).stdout


def test_the_download_commands_take_the_pinned_hf_clis_flags():
    """docs/pretrained.md's downloads, against `hf download --help` of the huggingface_hub
    that constraints.txt pins: each option exists and takes one value (more patterns are
    more --include flags: a second word would be read as a file name, and file names make
    hf ignore --include)."""
    pinned = re.search(r"^huggingface_hub==(\S+)", (ROOT / "constraints.txt").read_text(), re.M)
    assert pinned, "constraints.txt pins huggingface_hub"
    options = set(re.findall(r"(--[a-z][a-z-]*)", _hf_help()))
    downloads = page_commands("hf")
    assert downloads and not page_commands("huggingface-cli")
    for command in downloads:
        assert command.argv[1] == "download", command
        positional = []
        words = iter(command.argv[3:])  # after hf download REPO_ID
        for word in words:
            if word.startswith("--"):
                assert word.split("=")[0] in options, f"{command}: hf has no {word}"
                if "=" not in word:
                    next(words)
            else:
                positional.append(word)
        assert not positional, f"{command}: {positional} would be file names"


def test_the_cuda_install_line_matches_constraints_gpu():
    """What posjax prints where JAX_PLATFORMS asks for a GPU it lacks: the gpu extra under both
    constraint files, no -U, and the CUDA major version the pins are of."""
    line = cli.JAX_PLATFORM_INSTALLS["cuda"]
    assert "-c constraints.txt -c constraints-gpu.txt" in line and "-U" not in line
    assert "'.[gpu]'" in line
    pins = set(re.findall(r"^jax-cuda(\d+)-", (ROOT / "constraints-gpu.txt").read_text(), re.M))
    extra = re.search(r'^gpu = \["jax\[cuda(\d+)\]"\]', (ROOT / "pyproject.toml").read_text(),
                      re.M)
    assert pins == {extra.group(1)} and f"CUDA {extra.group(1)}" in line
    assert all("-U" not in text and "cuda12" not in text
               for text in cli.JAX_PLATFORM_INSTALLS.values())


def test_the_gpu_checks_time_is_stated_once_as_its_script_sets_it():
    """The README says how long one call of scripts/gpu_check.sh takes at most, as the
    script's DEADLINE_S default sets it; no other page states a time for it."""
    script = (ROOT / "scripts" / "gpu_check.sh").read_text()
    deadline = int(re.search(r'DEADLINE_S="\$\{DEADLINE_S:-(\d+)\}"', script).group(1))
    assert f"(default {deadline} s: {deadline // 60} min a call at most)" in script
    stated = [(page.name, line) for page in PAGES for line in page.read_text().splitlines()
              if "gpu_check.sh" in line and re.search(r"\d+\s*min", line)]
    assert stated == [("README.md", next(
        line for line in (ROOT / "README.md").read_text().splitlines()
        if line.startswith("bash scripts/gpu_check.sh")))]
    assert f"{deadline // 60} min a call at most" in stated[0][1]


def test_the_gpu_check_shows_its_usage_on_help_anywhere():
    """`bash scripts/gpu_check.sh --help` printed the no-GPU refusal and exited 2 (after
    creating its virtual environment): its usage lived only in the script's comments."""
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("The GPU check: on a machine with one NVIDIA GPU")
    assert "STAGES=" in done.stdout and "Results: experiments/bench/" in done.stdout
    wrong = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "speed_b16"],
                           capture_output=True, text=True, timeout=60)
    assert (wrong.returncode, wrong.stderr) == (2, "gpu_check: it takes no arguments "
                                                "(STAGES=... and DEADLINE_S=... are "
                                                "variables; --help shows them)\n")


def test_the_pages_cite_no_issue_a_reader_cannot_see():
    """The README, docs/ and every study's README (the front page links them all)."""
    studies = sorted((ROOT / "experiments").glob("**/README.md"))
    cited = [f"{page.relative_to(ROOT)}: {line.strip()}" for page in [*PAGES, *studies]
             for line in page.read_text().splitlines()
             if re.search(r"\bissues?\b", re.sub(r"\S+://\S+", "", line), re.I)]
    assert cited == []


def test_the_walk_from_a_command_to_a_loss_names_code_that_exists():
    """docs/extending.md's reading path: each `posjax/....py` it cites exists, and each
    function it names in a step (`name`, `module.name` or `Class.name`) is defined in one of
    that step's files or in the module it names."""
    page = (ROOT / "docs" / "extending.md").read_text()
    walk = page.split("### Reading the code")[1].split("\n## ")[0]
    not_code = {"get_config", "local", "inprocess", "report"}  # the config file's; words
    modules = {p.stem: p for p in (ROOT / "posjax").rglob("*.py")}
    checked = []
    for step in re.split(r"\n(?=\d\. |A result file|A breakpoint)", walk):
        files = [ROOT / f for f in re.findall(r"`(posjax/[\w/]+\.py)`", step)]
        assert all(f.is_file() for f in files), step
        for name in re.findall(r"`([A-Za-z_][\w]*(?:\.[a-z_]\w*)?)`", step):
            owner, _, function = name.rpartition(".")
            if (function in not_code or function in ("json", "md", "png")  # a file's name
                    or owner == "jax" or not re.fullmatch(r"[a-z_]+", function)):
                continue
            where = [modules[owner]] if owner in modules else files
            assert any(re.search(rf"^\s*def {function}\b", f.read_text(), re.M)
                       for f in where), f"{name} is defined in none of {where}"
            checked.append(name)
    assert {"cmd_sweep", "sweep.expand", "trainer.train", "train_loop", "_train_stages",
            "_Program.advance", "Experiment.from_config", "train_step", "loss_fn",
            "auto_impl", "Evaluation.write"} <= set(checked)


def test_no_studys_extrapolate_writes_its_output_over_a_runs_own_file(tmp_path):
    """experiments/extrapolation/commands.sh gave --output="$d/extrapolation_sliding.json",
    a run file's name in the run's folder, which extrapolate refuses: the script stopped at
    its first run. Each study's extrapolate --output passes the check extrapolate makes."""
    from posjax.errors import ConfigError
    from posjax.eval.evaluation import check_output

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    checked = 0
    for script in sorted((ROOT / "experiments").glob("*/commands.sh")):
        for _, words in _logical_lines(script.read_text()):
            for command in _simple_commands(words):
                given = dict(w[2:].split("=", 1) for w in command if w.startswith("--")
                             and "=" in w)
                if command[:2] != ["posjax", "extrapolate"] or "output" not in given:
                    continue
                workdir = given.get("workdir", "")
                output = given["output"].replace(workdir, str(run)) if workdir else given[
                    "output"]
                try:
                    check_output(output, run if workdir else tmp_path)
                except ConfigError as refused:
                    pytest.fail(f"{script.relative_to(ROOT)}: {refused}")
                checked += 1
    assert checked


# Each Python block of the docs that a reader pastes into a file of their own: whole (not a
# step of a list, indented) and needing nothing the reader brings (a snapshot's folder).
PYTHON_BLOCKS = [(page.name, block) for page in PAGES
                 for block in re.findall(r"^```python\n(.*?)^```", page.read_text(), re.S | re.M)
                 if not block.startswith(" ") and "path/to/" not in block]


@pytest.mark.parametrize("page, block", PYTHON_BLOCKS,
                         ids=[f"{page}:{block.split('register(')[-1][:20]}"
                              for page, block in PYTHON_BLOCKS])
def test_each_python_block_of_the_docs_runs_pasted_into_a_file_of_its_own(page, block,
                                                                           tmp_path):
    """docs/extending.md's model kind used nnx and jnp without importing them: pasted as
    the page says, it stopped in NameError."""
    source = tmp_path / "pasted.py"
    source.write_text(block)
    done = subprocess.run([sys.executable, str(source)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, f"{page}:\n{block}\n{done.stderr[-2000:]}"
