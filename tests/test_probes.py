"""The probes of issue 50 that a new user ran into: each one now works or refuses in one line.

Fast: runs are fabricated (a config.json and result files), or a command is refused before it
trains or evaluates anything.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import matplotlib.font_manager
import numpy as np
import pytest
import safetensors.numpy

from posjax import encoders, fileio
from posjax.config.files import configured
from posjax.config.saved import config_json
from posjax.data import retrieval, tokenizers
from posjax.encoders.base import Dims
from posjax.errors import ConfigError
from posjax.eval import methods
from posjax.eval import retrieval as retrieval_eval
from posjax.launch import cli
from posjax.pretrained import extrapolate as pretrained_extrapolate
from posjax.pretrained import files as pretrained_files
from posjax.results import glyphs, plots

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "pretrained"


def _text_run(folder: Path) -> None:
    """A causal-LM run folder with a text result (as `posjax train --extrapolate` leaves)."""
    fileio.write_json(folder / "config.json", {"data": {"tokenizer": "bytes"}})
    fileio.write_json(folder / "extrapolation.json", {
        "evaluation": "text", "report": "text", "protocol": "nonoverlapping", "stride": None,
        "method": "none", "train_len": 32, "encoding": {"name": "rope"},
        "lengths": [{"length": n, "ppl": 2.0 * n / 32, "loss": math.log(2.0),
                     "bucket_size": 32, "bucket_loss": [math.log(2.0)]} for n in (32, 64)]})


def _task_run(folder: Path) -> None:
    """A text_image run folder with a task result."""
    fileio.write_json(folder / "config.json", {"data": {"dataset": "text_image"}})
    fileio.write_json(folder / "extrapolation.json", {
        "evaluation": "task", "report": "task", "protocol": "task", "stride": None,
        "dataset": "text_image", "method": "none", "train_len": 3,
        "encoding": {"name": "rope"},
        "lengths": [{"length": n, "acc": 0.5, "seq_acc": 0.25} for n in (2, 3, 4)]})


@pytest.mark.parametrize("runs", [("B", "TI"), ("TI", "B")])
def test_plot_of_a_text_and_a_task_run_writes_each_report_to_its_own_files(
        tmp_path, monkeypatch, capsys, runs):
    """`posjax plot B TI --output=mix`: the task report no longer overwrites the text one,
    whichever run comes first."""
    _text_run(tmp_path / "B")
    _task_run(tmp_path / "TI")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["plot", *runs, "--output=mix"]) == 0
    written = capsys.readouterr().out.split()
    assert len(written) == len(set(written)), written
    assert {"mix/extrapolation.md", "mix/task_extrapolation.md",
            "mix/task_extrapolation.png"} <= set(written)
    assert "| B |" in (tmp_path / "mix" / "extrapolation.md").read_text()
    assert "| TI |" in (tmp_path / "mix" / "task_extrapolation.md").read_text()


def test_a_plot_into_a_folder_of_an_earlier_plot_removes_only_that_plots_other_files(
        tmp_path, monkeypatch, capsys, one_error_line):
    """`posjax plot B TI --output=mix`, then `posjax plot B --output=mix`: the task table and
    picture of the first plot would sit beside the second's as if of its runs; they go, with
    one line naming them, and a file posjax plot did not write stays."""
    _text_run(tmp_path / "B")
    _task_run(tmp_path / "TI")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["plot", "B", "TI", "--output=mix"]) == 0
    (tmp_path / "mix" / "notes.md").write_text("mine")
    capsys.readouterr()
    assert cli.main(["plot", "B", "--output=mix"]) == 0
    line = one_error_line()
    assert line == ("posjax plot: removed task_extrapolation.md, task_extrapolation.png from "
                    "mix: an earlier plot into it wrote them, and these results have none")
    assert sorted(p.name for p in (tmp_path / "mix").iterdir()) == [
        ".posjax_plots.json", ".posjax_plots.lock", "extrapolation.md", "extrapolation.png",
        "notes.md", "position_loss.png"]
    assert cli.main(["plot", "B", "--output=mix"]) == 0  # the same plot again: nothing to say
    assert capsys.readouterr().err == ""


def test_a_plot_into_a_folder_of_another_comparison_says_whose_it_replaced(tmp_path,
                                                                          monkeypatch, capsys):
    """`posjax plot runs/a runs/b`, then `posjax plot runs/c runs/d`: both into runs/, the
    second replaced the first comparison without a word."""
    for name in "abcd":
        _text_run(tmp_path / "runs" / name)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["plot", "runs/a", "runs/b"]) == 0
    assert cli.main(["plot", "runs/a", "runs/b", "runs/c"]) == 0  # a, b still in it
    capsys.readouterr()
    assert cli.main(["plot", "runs/c", "runs/d"]) == 0
    assert capsys.readouterr().err.strip() == (
        "posjax plot: replaced the plots in runs of a, b, c (an earlier plot of other runs); "
        "give --output=FOLDER to keep each comparison")


def _untrained_run(folder: Path, spec: str) -> Path:
    """A run folder holding only the config.json that `posjax train --config=SPEC` writes:
    enough for every refusal that comes before a checkpoint is read."""
    folder.mkdir(parents=True)
    fileio.write_json(folder / "config.json", config_json(configured(spec, [])))
    return folder


@pytest.mark.parametrize(("config", "arg"), [("lm.py", "eval_max_factor"),
                                           ("retrieval.py", "max_factor")])
@pytest.mark.parametrize("factor", [0, -3])
def test_an_evaluation_factor_below_1_is_refused_in_the_args_words(tmp_path, one_error_line, config,
                                                                   arg, factor):
    """`eval_max_factor=0` trained with no evaluation lengths; `posjax extrapolate` then
    blamed a max_tokens and a length of 512 the user never chose."""
    assert cli.main(["train", f"--config={CONFIGS}/{config}:smoke,{arg}={factor}",
                     f"--workdir={tmp_path / 'R'}"]) == 2
    assert one_error_line().endswith(
        f"{arg}={factor} gives no evaluation length: give 1 or more (the lengths double from "
        f"the training length up to {arg} times it)")
    assert not (tmp_path / "R").exists()


@pytest.mark.parametrize("name", ["config.json", "stages.json"])
def test_plotting_a_runs_own_json_file_is_one_line(tmp_path, one_error_line, name):
    """`posjax plot RUN/config.json` ended in a KeyError 'protocol' traceback."""
    run = _untrained_run(tmp_path / "R", f"{CONFIGS}/lm.py:smoke")
    fileio.write_json(run / "stages.json", {"stages": [], "final_step": 0})
    assert cli.main(["plot", str(run / name), f"--output={tmp_path / 'out'}"]) == 2
    assert one_error_line() == (
        f"posjax plot: error: {run / name} is not a result file (posjax extrapolate writes "
        "those, naming their evaluation): give its folder, or a result file")
    assert not (tmp_path / "out").exists()


def test_passkey_at_lengths_all_shorter_than_its_prompt_is_refused(tmp_path, one_error_line):
    run = _untrained_run(tmp_path / "B", f"{CONFIGS}/lm.py:smoke")
    assert cli.main(["extrapolate", f"--workdir={run}", "--eval=passkey",
                     "--lengths=16,64"]) == 2
    line = one_error_line()
    assert "--lengths=16,64: every length is too short for one passkey trial" in line
    need = int(line.rsplit("--lengths=", 1)[1].split()[0])
    probe = retrieval.get_probe("passkey", configured(f"{CONFIGS}/lm.py:smoke", []).data)
    tokenizer = tokenizers.ByteTokenizer()
    assert retrieval_eval._fits(probe, need, tokenizer, None)  # the length named fits
    assert not retrieval_eval._fits(probe, need - 1, tokenizer, None)
    assert not (run / "retrieval_passkey.json").exists()
    # no --lengths typed: the run's own lengths are named as such, not as a flag
    saved = fileio.read_json(run / "config.json")
    fileio.write_json(run / "config.json", {**saved, "eval": {**saved["eval"],
                                                                 "lengths": [16, 32]}})
    assert cli.main(["extrapolate", f"--workdir={run}", "--eval=passkey"]) == 2
    assert one_error_line().startswith(
        "posjax extrapolate: error: the run's default lengths (16,32: config.eval.lengths, or "
        "1x-16x its training length): every length is too short for one passkey trial")


def test_passkey_on_a_text_image_run_is_refused(tmp_path, one_error_line):
    run = _untrained_run(tmp_path / "TI", f"{CONFIGS}/text_image.py:smoke")
    assert cli.main(["extrapolate", f"--workdir={run}", "--eval=passkey"]) == 2
    assert "tokenizer cannot spell the prompt" in one_error_line()


def test_an_interleaved_mrope_section_it_cannot_keep_is_refused():
    """text_image.py:smoke,interleaved=true,section=2+2+4 trained with the pairs turned 4+2+2:
    now refused, naming what it would turn; a section interleaving keeps is accepted."""
    dims = Dims(32, 2, 16, 64)  # 8 pairs: at most 3 h and 2 w interleaved
    with pytest.raises(ConfigError, match=r"section='2\+2\+4' with interleaved=True would "
                                          r"turn 4\+2\+2 pairs by t\+h\+w, not 2\+2\+4: .* or "
                                          r"interleaved=False$"):
        encoders.get("mrope", section="2+2+4", interleaved=True).check(dims)
    encoders.get("mrope", section="3+3+2", interleaved=True).check(dims)
    encoders.get("mrope", section="2+2+4").check(dims)  # contiguous sections keep any split


def test_an_empty_test_grid_sizes_is_one_line(tmp_path, one_error_line):
    assert cli.main(["train", f"--config={CONFIGS}/text_image.py:smoke,test_grid_sizes=",
                     f"--workdir={tmp_path / 'run'}"]) == 2
    assert one_error_line().endswith(
        "config arg test_grid_sizes= gives no value: give one or more joined by + "
        "(test_grid_sizes=A+B), or leave it out")


def test_self_extend_on_an_ssmax_run_names_what_the_user_gave():
    """The refusal named rerope_window=32, a setting the user never gave."""
    with pytest.raises(ConfigError) as refused:
        methods.apply_methods(encoders.get("ssmax"), "self_extend:32:4", 128, 512)
    line = str(refused.value)
    assert line.startswith("--rope_scaling=self_extend:32:4: self_extend scores by ReRoPE's "
                           "two-pass attention, which ssmax runs cannot take")
    assert "rerope_window" not in line and "\n" not in line
    methods.apply_methods(encoders.get("ssmax"), "yarn+logn", 128, 512)  # these still apply


def test_report_check_of_a_study_given_from_outside_its_checkout(tmp_path, monkeypatch,
                                                                capsys, one_error_line):
    """`posjax report ABS/experiments/NAME --check` from another folder: the markers'
    `experiments/NAME` are read from the study's checkout, not the working folder."""
    checkout = tmp_path / "checkout"
    bench = checkout / "experiments" / "bench"
    bench.mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("[project]\nname = 'mine'\n")
    (bench / "values.py").write_text(
        "def values(study):\n    return {'ratio': 1.5}\n"
        "def tables(study):\n    return {'speed': '| ratio |\\n|---|\\n| 1.50 |'}\n")
    (bench / "README.md").write_text(
        "# bench\n\n<!-- posjax:table experiments/bench#speed -->\n| ratio |\n|---|\n"
        "| 1.50 |\n<!-- /posjax:table -->\n\n## Findings\n\nMedian <!-- v ratio -->1.5x.\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert cli.main(["report", str(bench), "--check"]) == 0, capsys.readouterr().err
    (bench / "README.md").write_text((bench / "README.md").read_text().replace("1.5x", "1.7x"))
    assert cli.main(["report", str(bench), "--check"]) == 1  # a wrong number is still caught
    assert "ratio" in capsys.readouterr().err
    # copied out of any checkout to a folder of another name: its markers cannot find it
    copy = tmp_path / "bench_copy"
    shutil.copytree(bench, copy)
    assert cli.main(["report", str(copy), "--check"]) == 2
    assert one_error_line() == (
        f"posjax report: error: {copy} is outside a checkout, and its README's markers name "
        "its study experiments/bench, which is not the end of its path: put the study at "
        "FOLDER/experiments/bench, or make its markers name it by its folder's name "
        "(bench_copy)")
    shutil.copytree(bench, tmp_path / "mine" / "experiments" / "bench")  # its markers' path
    assert cli.main(["report", str(tmp_path / "mine" / "experiments" / "bench"), "--check"]) == 1
    assert "ratio" in capsys.readouterr().err  # checked: its number is still the wrong one


def test_pose_on_an_encoding_that_reads_no_positions_is_refused(tmp_path, one_error_line):
    """lm.py:smoke,encoding=stickbreaking,pose=512 trained the same model as without PoSE."""
    assert cli.main(["train", f"--config={CONFIGS}/lm.py:smoke,encoding=stickbreaking,pose=512",
                     f"--workdir={tmp_path / 'run'}"]) == 2
    assert one_error_line().endswith(
        "train.pose=512 changes only the positions, which encoding 'stickbreaking' never reads "
        "(it would train the same model): drop train.pose, or train an encoding that reads "
        "positions (rope, alibi, ...)")
    assert not (tmp_path / "run" / "config.json").exists()


def test_two_snapshots_with_the_same_folder_name_get_their_own_result_folders(
        tmp_path, monkeypatch):
    """--pretrained=snap/a/model, then --pretrained=snap/b/model: the second no longer
    replaces the first's results nor writes into its TensorBoard folder."""
    monkeypatch.setenv(pretrained_extrapolate.ENV_RESULTS_DIR, str(tmp_path / "results"))
    first, second = (tmp_path / "snap" / name / "model" for name in ("a", "b"))
    home = tmp_path / "results" / "pretrained" / "model"
    assert pretrained_extrapolate.output_dir(first, None) == home
    pretrained_extrapolate.claim(home, first)  # as its evaluation does
    other = pretrained_extrapolate.output_dir(second, None)
    assert other.parent == home.parent and other.name.startswith("model-") and other != home
    assert pretrained_extrapolate.output_dir(first, None) == home  # each keeps its folder
    pretrained_extrapolate.claim(other, second)
    assert pretrained_extrapolate.output_dir(second, None) == other
    assert pretrained_extrapolate.output_dir(second, "out/x.json") == Path("out")


def _snapshot_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "llama"
    shutil.copytree(FIXTURES / "llama", copy)
    return copy


def test_a_half_downloaded_weight_file_is_one_line_naming_it(tmp_path):
    snapshot = _snapshot_copy(tmp_path)
    shard = snapshot / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-100])  # the download stopped 100 bytes short
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(shard))} cannot be read as "
                                          r"safetensors \(.*incomplete metadata.*\), as a "
                                          r"download cut short leaves it: download it again$"):
        pretrained_files.read_weights(snapshot)


@pytest.mark.parametrize("text", ['{"weight_map": {"a": "model-0', "[1]", "{}"])
def test_a_corrupt_weight_index_is_one_line_naming_it(tmp_path, text):
    snapshot = _snapshot_copy(tmp_path)
    index = snapshot / "model.safetensors.index.json"
    index.write_text(text)
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(index))} is not a safetensors "
                                          r"index .*: download it again$"):
        pretrained_files.read_weights(snapshot)


def test_a_tensor_is_read_from_the_shard_the_index_names(tmp_path):
    """A zeroed copy of the embeddings in the other shard replaced the real ones (logits off
    by 4.95), and an index naming a tensor its shard lacks loaded without a word."""
    snapshot = _snapshot_copy(tmp_path)
    weight_map = json.loads((snapshot / "model.safetensors.index.json").read_text())[
        "weight_map"]
    name = "model.embed_tokens.weight"
    original = pretrained_files.read_weights(snapshot)[name]
    other = next(shard for shard in sorted(set(weight_map.values()))
                 if shard != weight_map[name])
    stored = safetensors.numpy.load_file(snapshot / other)
    safetensors.numpy.save_file({**stored, name: np.zeros_like(original)}, snapshot / other)
    np.testing.assert_array_equal(pretrained_files.read_weights(snapshot)[name], original)
    index = snapshot / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {**weight_map, "lm_head.extra": other}}))
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(snapshot / other))} lacks the "
                                          r"tensor 'lm_head.extra' that model.safetensors."
                                          r"index.json puts there: download the snapshot again$"):
        pretrained_files.read_weights(snapshot)


def test_weights_beside_other_formats_files_are_model_safetensors(tmp_path):
    """Mistral's consolidated.safetensors beside model.safetensors, no index: its tensors
    were read too, and refused as 'not read by posjax's mistral model'."""
    snapshot = tmp_path / "mistral"
    shutil.copytree(FIXTURES / "mistral", snapshot)
    expected = pretrained_files.read_weights(snapshot)
    safetensors.numpy.save_file({"layers.0.attention.wq.weight": np.zeros((2, 2), np.float32)},
                                snapshot / "consolidated.safetensors")
    assert sorted(pretrained_files.read_weights(snapshot)) == sorted(expected)
    (snapshot / "model.safetensors").rename(snapshot / "weights.safetensors")
    with pytest.raises(ConfigError, match=r"holds 2 \*.safetensors files \(consolidated."
                                          r"safetensors, weights.safetensors\) and neither "
                                          r"model.safetensors nor model.safetensors.index.json"):
        pretrained_files.read_weights(snapshot)


def test_a_refused_snapshot_claims_no_results_folder(tmp_path, monkeypatch, capsys):
    """A broken copy named llama is refused; the real llama then gets results/pretrained/
    llama, not llama-HASH (the broken copy had claimed the folder before it was read)."""
    monkeypatch.setenv("POSJAX_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.chdir(tmp_path)
    broken = _snapshot_copy(tmp_path)
    (broken / "model.safetensors.index.json").write_text("[1]")
    assert cli.main(["extrapolate", f"--pretrained={broken}", "--lengths=32"]) == 2
    assert "download it again" in capsys.readouterr().err
    assert not (tmp_path / "results" / "pretrained").exists()
    assert pretrained_extrapolate.output_dir(FIXTURES / "llama", None) == (
        tmp_path / "results" / "pretrained" / "llama")


def test_a_run_named_in_a_script_the_font_lacks_is_plotted_without_glyph_warnings(
        tmp_path, monkeypatch, capsys, recwarn):
    """A run folder "ロープ rope" in `posjax plot`: 6 glyph warnings; now its label is drawn
    in its ASCII-safe form and the table keeps the name."""
    _text_run(tmp_path / "runs" / "ロープ rope")
    _text_run(tmp_path / "runs" / "alibi")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["plot", "runs"]) == 0
    assert not [str(w.message) for w in recwarn if "Glyph" in str(w.message)]
    assert "| ロープ rope |" in (tmp_path / "runs" / "extrapolation.md").read_text()
    properties = matplotlib.font_manager.FontProperties()
    assert glyphs.drawable("ロープ rope", properties) == "\\u30ed\\u30fc\\u30d7 rope"
    assert glyphs.drawable("θ rope", properties) == "θ rope"  # DejaVu Sans draws Greek


_STOP_IN_BACKEND_START = """
import os, signal, sys
from jax._src import xla_bridge
from posjax import runlock
from posjax.train import distributed
start = xla_bridge._init_backend
def stopped_inside(platform):
    os.kill(os.getpid(), signal.SIGTERM)  # lands while JAX starts its backends
    return start(platform)
xla_bridge._init_backend = stopped_inside
try:
    with runlock.interruptible("stopped"):
        distributed.start_backends()
        print("not interrupted")
except KeyboardInterrupt:
    print("interrupted, backends started:", xla_bridge.backends_are_initialized())
    sys.exit(130)
"""


def test_a_stop_signal_during_the_backends_start_waits_until_they_are_up():
    """SIGTERM inside JAX's backend start left its TPU probe's Timer running, which held the
    exit for 60 s (seen once while probing a SIGTERM during `posjax extrapolate`); the
    signal now waits until the backends are up, then stops the command as usual."""
    done = subprocess.run([sys.executable, "-c", _STOP_IN_BACKEND_START], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "JAX_PLATFORMS": ""})
    assert done.returncode == 130, done.stderr[-2000:]
    assert done.stdout.strip() == "interrupted, backends started: True"


_INTERRUPTED_WITH_WORK_IN_FLIGHT = """
import jax.numpy as jnp
from posjax.launch import cli
x = jnp.ones((1024, 1024))
y = (x @ x) @ x  # dispatched, still running
print("table so far", end="")
cli._exit_interrupted()
"""


def test_an_interrupted_command_line_exits_130_after_its_work_in_flight():
    """SIGTERM during `posjax extrapolate --lengths=128,...,8192` printed the interrupted line,
    then segfaulted in the interpreter's teardown (rc 139, 7 of 8 tries on 2 busy cores): the
    command line now waits for the devices' work in flight, flushes its output and ends
    with 130 without that teardown."""
    done = subprocess.run([sys.executable, "-c", _INTERRUPTED_WITH_WORK_IN_FLIGHT],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done.stderr[-2000:]
    assert done.stdout == "table so far"


_STOP_IN_THE_TEARDOWN = """
import os, sys, time
import jax.numpy as jnp
from posjax.launch import cli

class LastToGo:  # destroyed with __main__'s globals, after finalisation reset the signals
    def __del__(self, write=os.write, sleep=time.sleep):
        write(1, b"tearing down\\n")
        sleep(3)

jnp.ones(3).block_until_ready()  # JAX's backend up, as after any command that computed
sys.argv = ["posjax", "list", "encodings"]
last = LastToGo()
sys.exit(cli.main())
"""


def test_a_stop_signal_after_the_command_finished_ends_with_its_exit_code():
    """SIGTERM in the last second of `posjax extrapolate`, after it wrote its result, ended
    the process with 143 (killed, as if the work were lost; 3 of 3 tries): finalisation puts
    the default action back before the interpreter's slowest part, tearing JAX down. The
    work is done and written, so a stop there now leaves the command's own exit code."""
    child = subprocess.Popen([sys.executable, "-c", _STOP_IN_THE_TEARDOWN],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while "tearing down" not in child.stdout.readline():
        assert child.poll() is None, child.stderr.read()[-2000:]
    for _ in range(20):  # a stop now and again while it tears down
        child.send_signal(signal.SIGTERM)
        time.sleep(0.05)
    assert child.wait(timeout=60) == 0, child.stderr.read()[-2000:]


_STOP_WHILE_SCORING = """
import os, signal, sys, threading, time
from pathlib import Path
import jax
import jax.numpy as jnp
from posjax import runlock
from posjax.eval import evaluation

class Scoring:  # an evaluation whose one length computes for minutes, as passkey at 300k
    name, options, workdir = "passkey", (), Path(sys.argv[1])

    def run(self):
        x = jnp.ones((2048, 2048)) / 2048
        chain = jax.jit(lambda x: jax.lax.fori_loop(0, 5000, lambda i, y: y @ x, x))
        y = chain(x)  # one computation of minutes, dispatched
        print("scoring", flush=True)
        y.block_until_ready()

threading.Timer(6, os.kill, [os.getpid(), signal.SIGTERM]).start()
with runlock.interruptible("posjax extrapolate: interrupted"):
    evaluation.run_and_write(Scoring(), {})
"""


def test_a_stop_signal_while_scoring_ends_the_command_at_once(tmp_path):
    """SIGTERM 60 s into `--eval=passkey --lengths=300000` printed the interrupted line, then
    the process computed on for another ten minutes: nothing is written until every length
    is scored, so the signal now ends the process at once."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", _STOP_WHILE_SCORING, str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert time.monotonic() - started < 60  # the computation alone runs for minutes
    assert done.returncode == 128 + signal.SIGTERM, done.stderr[-2000:]
    assert done.stdout.strip() == "scoring"  # ended inside the computation, nothing after it
    assert done.stderr.strip().splitlines()[-1] == "posjax extrapolate: interrupted"


@pytest.mark.parametrize(("extension", "says"), [
    ("sinusoidal", "learned_extension=sinusoidal cannot extend 'learned': it does not read the "
                   "parameters learned trained; give one that does: hierarchical"),
    ("rope", "learned_extension=rope cannot extend 'learned'"),
    ("bogus", "unknown learned_extension 'bogus'; valid: hierarchical")])
def test_a_learned_extension_that_cannot_read_the_table_is_one_line(tmp_path, one_error_line,
                                                                     extension, says):
    """`--learned_extension=sinusoidal` (listed as valid) scored the first length, then
    failed with a 37-line traceback: 'Incorrect number of leaves, expected 37 ... got 38'."""
    run = _untrained_run(tmp_path / "L", f"{CONFIGS}/lm.py:smoke,encoding=learned")
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=32,64",
                     f"--learned_extension={extension}"]) == 2
    assert says in one_error_line()
    dims = Dims(num_heads=2, head_dim=8, d_model=16, max_len=32)
    methods.check_extension(encoders.get("learned"), "hierarchical", dims)
    methods.check_extension(encoders.get("rope"), "sinusoidal", dims)  # never extended


@pytest.mark.parametrize(("output", "says"), [
    ("{run}/extrapolation_quick.json", "takes the name of one of the run's own files in its "
                                       "folder: drop --output to write the run's own result"),
    ("{run}/retrieval_mine.json", "takes the name of one of the run's own files"),
    # A result written over a run's config or stages broke it (exit 0, then KeyErrors);
    # one over another run's result replaced that run's numbers.
    ("{run}/config.json", "takes the name of one of the run's own files in its folder"),
    ("{run}/stages.json", "takes the name of one of the run's own files in its folder"),
    ("{run}/metrics.jsonl", "takes the name of one of the run's own files in its folder"),
    ("{other}/extrapolation.json", "takes the name of one of the files of the run in {other}: "
                                   "give a file of another name or folder"),
    ("{other}/config.json", "takes the name of one of the files of the run in {other}"),
    # the example given a run's folder was one of its own files, then refused
    ("{tmp}", "is a folder: give a file, e.g. --output={tmp}/scores.json"),
    ("{tmp}/new/", "is a folder: give a file, e.g. --output={tmp}/new/scores.json"),
    ("{run}", "is a folder: give a file, e.g. --output={run}/scores.json"),
    # files posjax writes itself: orbax's and TensorBoard's folders
    ("{run}/checkpoints/x.json", "lies in the checkpoints/ folder of the run in {run}, which "
                                 "posjax writes itself: give a file in a run's own folder or "
                                 "elsewhere"),
    ("{run}/tensorboard/x.json", "lies in the tensorboard/ folder of the run in {run}"),
    # another run's (its checkpoint's iterator state, written over, broke its resume)
    ("{other}/checkpoints/6/x.json", "lies in the checkpoints/ folder of the run in {other}"),
    # a JSON file that is no result: a sweep's record, a user's notes, a plot's record
    ("{tmp}/sweep.json", "--output={tmp}/sweep.json is a JSON file that holds no evaluation's "
                         "result, which the result would replace: give a new file"),
    ("{tmp}/notes.json", "is a JSON file that holds no evaluation's result"),
    ("{tmp}/damaged.json", "damaged.json is not valid JSON (Expecting value: line 1)"),
    # written, then refused by posjax plot
    ("{tmp}/x.txt", "--output={tmp}/x.txt: a result is a JSON file: give a name ending in "
                    ".json, e.g. --output={tmp}/x.json")])
def test_an_output_that_is_a_folder_or_a_name_of_the_runs_own_results_is_refused_first(
        tmp_path, one_error_line, output, says):
    """--output=RUN/extrapolation_quick.json was plotted as a second seed of RUN; an existing
    folder failed after every length was scored, and a new one ending in / became a file."""
    run = _untrained_run(tmp_path / "R", f"{CONFIGS}/lm.py:smoke")
    other = _untrained_run(tmp_path / "O", f"{CONFIGS}/lm.py:smoke,encoding=alibi")
    (other / "checkpoints" / "6").mkdir(parents=True)
    fileio.write_json(tmp_path / "sweep.json", {"config": "configs/lm.py", "runs": {}})
    (tmp_path / "notes.json").write_text('{"my": "notes"}')
    (tmp_path / "damaged.json").write_text("not json")
    kept = {p: p.read_bytes() for p in [*run.iterdir(), *other.iterdir(), *tmp_path.iterdir()]
            if p.is_file()}
    output = output.format(run=run, tmp=tmp_path, other=other)
    assert cli.main(["extrapolate", f"--workdir={run}", f"--output={output}"]) == 2
    assert says.format(tmp=tmp_path, other=other.resolve(), run=run.resolve()) in (
        one_error_line())
    assert not (tmp_path / "new").exists()
    assert {p: p.read_bytes() for p in kept} == kept


@pytest.mark.parametrize("method", ["self_extend:64", "self_extend:64:1", "rerope:64",
                                    "sinks:4:64"])
def test_a_window_past_the_training_length_is_one_line_in_the_flags_words(tmp_path, one_error_line,
                                                                           method):
    """`self_extend:64` (no group) on a run trained at 32 tokens ended in a StopIteration
    traceback; with a group, the refusal named `rope rerope_window=64`, a field never given."""
    run = _untrained_run(tmp_path / "R", f"{CONFIGS}/lm.py:smoke,seq_len=32")
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=32,64",
                     f"--rope_scaling={method}"]) == 2
    name = method.split(":")[0]
    default = 28 if name == "sinks" else 16  # sinks: the training length less its 4 tokens
    assert one_error_line() == (
        f"posjax extrapolate: error: --rope_scaling's {name} with a window of 64: the window "
        "must be below the run's training length 32, or no trained distance is capped; give "
        f"a smaller one, or none for the default, {default}")


def test_sinks_and_window_together_past_the_training_length_are_refused(tmp_path,
                                                                        one_error_line):
    """`sinks:4:30` on a run trained at 32 scored distances up to 33 without a word."""
    run = _untrained_run(tmp_path / "R", f"{CONFIGS}/lm.py:smoke,seq_len=32")
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=32,64",
                     "--rope_scaling=sinks:4:30"]) == 2
    assert one_error_line() == (
        "posjax extrapolate: error: --rope_scaling=sinks:4:30: 4 sink tokens and a window of "
        "30 reach distances past the run's training length 32; give a window of at most 28")


def test_tupe_trains_with_configs_lm_whose_learned_extension_cannot_extend_it():
    """configs/lm.py sets learned_extension=hierarchical for every encoding; TUPE's table,
    which no encoding extends, was refused before training (`none here`)."""
    from posjax.config import configured
    from posjax.eval import methods
    from posjax.experiment import Experiment

    methods.check_config(Experiment.from_config(configured(f"{CONFIGS}/lm.py:encoding=tupe,"
                                                           "smoke", [])))


@pytest.mark.parametrize("tokens", [0, -3, 40])
def test_sink_tokens_out_of_range_are_named_as_tokens_not_as_a_window(tmp_path, one_error_line,
                                                                      tokens):
    """`sinks:0` said "a window of 32", `sinks:-3` "a window of 35", `sinks:40` "a window of
    -8", with ReRoPE's advice: the user gave a count of sink tokens."""
    run = _untrained_run(tmp_path / "R", f"{CONFIGS}/lm.py:smoke,seq_len=32")
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=32,64",
                     f"--rope_scaling=sinks:{tokens}"]) == 2
    assert one_error_line() == (
        f"posjax extrapolate: error: --rope_scaling's sinks with {tokens} sink tokens: they are "
        "the first tokens every query keeps, 1 to 31 below the run's training length 32 "
        "(StreamingLLM keeps 4)")


def test_a_stride_without_sliding_windows_is_refused(tmp_path, one_error_line):
    """`--stride=64` alone scored non-overlapping windows and recorded stride None."""
    run = _untrained_run(tmp_path / "R", f"{CONFIGS}/lm.py:smoke")
    assert cli.main(["extrapolate", f"--workdir={run}", "--stride=64"]) == 2
    assert one_error_line() == (
        "posjax extrapolate: error: --stride=64 applies to sliding windows, and these are "
        "nonoverlapping: add --protocol=sliding, or drop --stride")


@pytest.mark.parametrize(("flag", "says"), [
    ("--stride=100", "--stride=100 is longer"),
    # it said "stride=64 must be in 1..length=32", a stride the user never gave
    ("--protocol=sliding", "the default --stride=64 (half the training length) is longer")])
def test_a_stride_longer_than_a_length_says_whose_stride_it_is(tmp_path, one_error_line,
                                                               flag, says):
    run = _untrained_run(tmp_path / "R", f"{CONFIGS}/lm.py:smoke")
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=32,128",
                     "--protocol=sliding", flag]) == 2
    assert one_error_line() == (
        f"posjax extrapolate: error: {says} than the length 32, whose windows it would skip "
        f"tokens of: give --stride=S of at most 32, or lengths of at least "
        f"{says.split('=')[1].split()[0]}")


def test_a_max_tokens_below_the_longest_length_names_max_tokens(tmp_path, one_error_line,
                                                                data_flags):
    """`--max_tokens=50 --lengths=128` said the evaluation text has 50 tokens and advised a
    larger evaluation split."""
    run = tmp_path / "R"
    run.mkdir()
    fileio.write_json(run / "config.json", config_json(configured(
        f"{CONFIGS}/lm.py:smoke", [*data_flags, "--config.eval.max_tokens=100"])))
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=32", "--max_tokens=20"]) == 2
    assert one_error_line() == (
        "posjax extrapolate: error: --max_tokens=20 scores fewer tokens than the length 32 (it "
        "counts the tokens scored, L in a window of L): give --max_tokens=32 or more, or lower "
        "the lengths")
    # what it says is enough is (it said 33, where 32 scores one window)
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=32", "--max_tokens=31"]) == 2
    assert "give --max_tokens=32 or more" in one_error_line()
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=512"]) == 2
    assert one_error_line().startswith(
        "posjax extrapolate: error: the run's eval.max_tokens=100 scores fewer tokens than the "
        "length 512 (")


@pytest.mark.parametrize(("second", "differs"), [
    ({"encoding": {"name": "alibi"}}, "encoding (name=rope against name=alibi)"),
    ({"max_tokens": 4096}, "max_tokens (16384 against 4096)")])
def test_runs_that_count_as_seeds_by_name_but_differ_are_refused_not_averaged(
        tmp_path, monkeypatch, one_error_line, second, differs):
    """`exp,seed=0` (RoPE) and `exp,seed=1` (ALiBi), or two seeds scored on 16384 and 4096
    tokens, were averaged as "2 seeds" under one caption."""
    for seed, changes in ((0, {}), (1, second)):
        folder = tmp_path / f"exp,seed={seed}"
        _text_run(folder)
        result = fileio.read_json(folder / "extrapolation.json")
        fileio.write_json(folder / "extrapolation.json",
                          {**result, "max_tokens": 16384, **changes})
    monkeypatch.chdir(tmp_path)
    assert cli.main(["plot", "exp,seed=0", "exp,seed=1", "--output=out"]) == 2
    assert one_error_line() == (
        f"posjax plot: error: runs exp,seed=0 and exp,seed=1 count as seeds of 'exp' by their "
        f"names but differ in {differs}: score them alike (posjax extrapolate with the same "
        "settings), or rename one so they are two points")

    # two files of one folder (a snapshot's results, one written with --output): named by
    # file, with a fix that can be done (it named the folder twice and said "rename one")
    one = tmp_path / "snap,seed=0"
    _text_run(one)
    result = fileio.read_json(one / "extrapolation.json")
    fileio.write_json(one / "extrapolation.json", {**result, "max_tokens": 16384})
    fileio.write_json(one / "extrapolation_other.json", {**result, "max_tokens": 1024})
    assert cli.main(["plot", "snap,seed=0", "--output=out2"]) == 2
    assert one_error_line() == (
        "posjax plot: error: results snap,seed=0/extrapolation.json and snap,seed=0/"
        "extrapolation_other.json count as seeds of 'snap' by their names but differ in "
        "max_tokens (16384 against 1024): score them alike (posjax extrapolate with the same "
        "settings), or delete one")


def test_group_factor_is_a_flag_where_the_text_evaluation_takes_it(tmp_path, one_error_line):
    """A refusal listed group_factor among the text evaluation's options, and
    `--group_factor=1` was an unknown flag."""
    run = _untrained_run(tmp_path / "R", f"{CONFIGS}/lm.py:smoke")
    parsed = cli._flags([f"--workdir={run}", "--group_factor=1"],
                        cli.COMMANDS["extrapolate"].define, config=False)
    assert parsed.flags.group_factor == 1
    assert cli.main(["extrapolate", f"--workdir={run}", "--eval=passkey",
                     "--group_factor=2"]) == 2
    assert "--group_factor does not apply to" in one_error_line()


def test_an_interrupted_evaluation_says_it_starts_again_not_that_it_resumes(
        tmp_path, one_error_line, monkeypatch):
    """Ctrl-C of `posjax extrapolate` promised a resume, and the re-run scored every length
    again: an evaluation keeps nothing until its result is written."""
    import posjax.eval

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(posjax.eval, "evaluate", stopped)
    run = _untrained_run(tmp_path / "R", f"{CONFIGS}/lm.py:smoke")
    assert cli.main(["extrapolate", f"--workdir={run}"]) == 130
    assert one_error_line() == ("posjax extrapolate: interrupted: nothing was written; "
                                       "re-run the same command to score again")


def test_a_stop_after_the_result_is_written_names_it_not_nothing(tmp_path, one_error_line,
                                                                 monkeypatch):
    """SIGTERM while the table printed, or while its pictures were drawn (3 of 3 tries 4.6 s
    into a long `posjax extrapolate`), its result already written, said "nothing was
    written; re-run the same command to score again" over a file holding every length:
    from the write on, a stop names the file."""
    import posjax.eval
    from posjax.eval import evaluation

    run = _untrained_run(tmp_path / "R", f"{CONFIGS}/lm.py:smoke")
    _text_run(tmp_path / "scored")  # the result as `evaluate` returns it, once written
    result = fileio.read_json(tmp_path / "scored" / "extrapolation.json")

    class Scored:  # scores at once, and its file is written
        name, options = "text", ()
        workdir = tmp_path / "R"

        def run(self):
            return result

        def write(self, result, output=None):
            return result

    def stopped_while_printing(result):
        raise KeyboardInterrupt

    monkeypatch.setattr(posjax.eval, "evaluate",
                        lambda *args, **kwargs: evaluation.run_and_write(Scored(), {}))
    monkeypatch.setattr(posjax.eval, "format_table", stopped_while_printing)
    assert cli.main(["extrapolate", f"--workdir={run}"]) == 130
    assert one_error_line() == ("posjax extrapolate: interrupted after every length was "
                                       f"scored and written: {run / 'extrapolation.json'}")


def test_each_stride_of_sliding_windows_gets_its_own_panel(tmp_path, monkeypatch):
    """Three strides of one run were drawn in one panel titled with the first stride, their
    lines labelled alike."""
    from posjax.results import plots

    _text_run(tmp_path / "R")
    result = fileio.read_json(tmp_path / "R" / "extrapolation.json")
    for stride in (64, 100):
        fileio.write_json(tmp_path / "R" / f"extrapolation_sliding-s{stride}.json",
                          {**result, "protocol": "sliding", "stride": stride})
    figures = []
    monkeypatch.setattr(plots.plt, "close", figures.append)
    plots.plot_extrapolation(plots.load_results([tmp_path / "R"]), tmp_path / "x.png")
    titles = [ax.get_title() for ax in figures[0].axes]
    assert titles == ["nonoverlapping windows", "sliding windows, stride 64",
                      "sliding windows, stride 100"]


def test_a_table_of_runs_that_trained_otherwise_names_how(tmp_path):
    """`theta=1e4` of one sweep beside `alibi` of another: their learning rates differed, and
    the table read as a comparison of encodings alone."""
    from posjax.results import plots

    for name, rate in (("theta=1e4", 0.002), ("alibi", 0.001), ("nope", 0.002)):
        _text_run(tmp_path / name)
        fileio.write_json(tmp_path / name / "config.json", {
            "data": {"tokenizer": "bytes"}, "model": {"d_model": 64},
            "train": {"learning_rate": rate, "seed": 0, "log_every_steps": 5 + (rate > 0.0015)},
            "encoding": {"name": "rope"}})
    text = plots.table(plots.load_results([tmp_path / n for n in ("theta=1e4", "alibi",
                                                                  "nope")]))
    assert text.rstrip().endswith(
        "The runs also differ in train.learning_rate (0.001 for `alibi`; 0.002 for "
        "`theta=1e4` and `nope`).")  # not in log_every_steps, which only observes a run
    fileio.write_json(tmp_path / "alibi" / "config.json",
                      fileio.read_json(tmp_path / "nope" / "config.json"))
    text = plots.table(plots.load_results([tmp_path / "theta=1e4", tmp_path / "alibi"]))
    assert "differ in" not in text


def test_plot_of_a_run_whose_results_have_other_names_names_them(tmp_path, capsys):
    """Four `--output=RUN/ext_dense.json` results in a run's folder: `posjax plot RUN` said
    it had no evaluation results yet."""
    _text_run(tmp_path / "R")
    (tmp_path / "R" / "extrapolation.json").rename(tmp_path / "R" / "ext_dense.json")
    assert cli.main(["plot", str(tmp_path / "R")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"posjax plot: error: {tmp_path / 'R'} holds result files of other names, which a "
        f"folder's plot does not read: give them, posjax plot {tmp_path / 'R' / 'ext_dense.json'}")
    assert cli.main(["plot", str(tmp_path / "R" / "ext_dense.json")]) == 0


def test_a_result_scored_before_its_run_trained_on_is_named_by_plot(tmp_path, capsys):
    """A run trained 10 more steps with --force kept its old result, and `posjax plot` drew
    those numbers with no word that the run had moved on."""
    _text_run(tmp_path / "R")
    result = fileio.read_json(tmp_path / "R" / "extrapolation.json")
    fileio.write_json(tmp_path / "R" / "extrapolation.json", {**result, "step": 1500})
    fileio.write_json(tmp_path / "R" / "stages.json", {"final_step": 1510, "stages": []})
    assert cli.main(["plot", str(tmp_path / "R")]) == 0
    assert (f"warning: results scored before their run trained on: {tmp_path / 'R'}/"
            "extrapolation.json (step 1500 of 1510) (score them again with posjax "
            "extrapolate --workdir=RUN)") in capsys.readouterr().err
    # and the table written says so under its rows (stderr alone was lost with the terminal)
    assert ("Scored before their run trained on: `R` (step 1500 of 1510); score them again "
            "with posjax extrapolate") in (tmp_path / "R" / "extrapolation.md").read_text()
    fileio.write_json(tmp_path / "R" / "stages.json", {"final_step": 1500, "stages": []})
    assert cli.main(["plot", str(tmp_path / "R")]) == 0
    assert "scored before" not in capsys.readouterr().err
    assert "Scored before" not in (tmp_path / "R" / "extrapolation.md").read_text()


def test_masked_and_causal_lm_perplexities_are_never_in_one_table(tmp_path, monkeypatch,
                                                                   capsys):
    """`posjax plot runs` over a causal LM and MLM runs ranked them in one table and drew
    them on one axis, all "Perplexity per byte", though an MLM's is of masked tokens read
    from both sides; a staged run's training length was captioned as if it were its only one."""
    _text_run(tmp_path / "runs" / "lm")
    _text_run(tmp_path / "runs" / "mlm")
    fileio.write_json(tmp_path / "runs" / "mlm" / "config.json", {
        "data": {"tokenizer": "bytes"}, "model": {"kind": "mlm"},
        "train": {"stages": [[16, 4, 10], [32, 4, 10]]}})
    assert cli.main(["plot", str(tmp_path / "runs")]) == 0
    out = tmp_path / "runs"
    causal, masked = ((out / name).read_text() for name in ("extrapolation.md",
                                                            "mlm_extrapolation.md"))
    assert "| lm |" in causal and "| mlm |" not in causal
    assert "| mlm |" in masked and "| lm |" not in masked
    assert "\nPerplexity per byte at each evaluation length; trained at 32 tokens." in causal
    assert ("\nMasked-token perplexity (a masked LM's: of its masked tokens, each read with "
            "the context on both sides) per byte at each evaluation length; trained at 32 "
            "tokens (for a run trained in stages of several lengths, its longest stage's).") \
        in masked
    assert (out / "mlm_extrapolation.png").is_file() and (out / "extrapolation.png").is_file()


def test_runs_of_different_training_lengths_mark_each_in_its_own_colour(tmp_path, monkeypatch):
    """The RoFormer schedule's plot drew grey lines at 64 and 192 and said nothing of which
    run trained at which, and labelled only the ticks 10 and 15 of a 9.8-16 log axis."""
    from matplotlib import colors as mcolors

    from posjax.results import plots

    for name, train_len, ppl in (("single", 64, 9.8), ("schedule", 192, 16.0)):
        _text_run(tmp_path / name)
        result = fileio.read_json(tmp_path / name / "extrapolation.json")
        fileio.write_json(tmp_path / name / "extrapolation.json", {
            **result, "train_len": train_len,
            "lengths": [{**row, "ppl": ppl} for row in result["lengths"]]})
    figures = []
    monkeypatch.setattr(plots.plt, "close", figures.append)
    results = plots.load_results([tmp_path / "single", tmp_path / "schedule"])
    plots.plot_extrapolation(results, tmp_path / "x.png")
    [ax] = figures[0].axes
    lines = {line.get_xdata()[0]: mcolors.to_hex(line.get_color()) for line in ax.lines
             if line.get_linestyle() == "--"}
    drawn = {line.get_label(): mcolors.to_hex(line.get_color()) for line in ax.lines
             if line.get_linestyle() == "-"}
    assert lines == {64: drawn["single"], 192: drawn["schedule"]}
    assert sorted(text.get_text().strip() for text in ax.texts) == ["schedule", "single"]
    assert ax.get_xlabel() == "evaluation length (tokens; dashed: each run's training length)"
    figures[0].canvas.draw()
    ticks = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert len(ticks) >= 4, ticks
    # one training length for all: grey, unnamed, as before
    plots.plot_extrapolation(results[:1], tmp_path / "y.png")
    [ax] = figures[1].axes
    assert [mcolors.to_hex(line.get_color()) for line in ax.lines
            if line.get_linestyle() == "--"] == [mcolors.to_hex("grey")] and not ax.texts
    assert ax.get_xlabel() == "evaluation length (tokens; dashed: training length)"


def _rope_run(folder: Path, theta: float, steps: int, seed: int, ppl: float) -> None:
    """A RoPE run at `theta`, trained `steps` steps, with one text result."""
    fileio.write_json(folder / "config.json", {
        "encoding": {"name": "rope", "theta": theta}, "data": {"tokenizer": "bytes"},
        "train": {"stages": [[32, 4, steps]], "seed": seed}})
    fileio.write_json(folder / "extrapolation.json", {
        "evaluation": "text", "report": "text", "protocol": "nonoverlapping", "stride": None,
        "method": "none", "train_len": 32, "head_dim": 16,
        "encoding": {"name": "rope", "theta": theta},
        "lengths": [{"length": n, "ppl": ppl * n / 32, "loss": math.log(ppl),
                     "bucket_size": 32, "bucket_loss": [math.log(ppl)]} for n in (32, 64)]})


def test_theta_png_draws_one_curve_per_set_of_runs_alike_but_for_theta(tmp_path, monkeypatch,
                                                                        capsys):
    """Every RoPE run at theta=10^4 made one curve with the theta sweep's: a smoke run, a
    600-step and a 5000-step run zig-zagged at one theta. Now a curve is runs alike but for
    theta (their seeds averaged); runs that only share a theta draw none."""
    from posjax.results import plots

    sweep = tmp_path / "sweep"
    for theta in (1e3, 1e4, 1e5):
        for seed in (0, 1):
            _rope_run(sweep / f"encoding=rope,theta={theta:g},seed={seed}", theta, 600, seed,
                      4.0 + seed + theta / 1e5)
    _rope_run(tmp_path / "alone" / "rope_smoke", 1e4, 6, 0, 30.0)
    _rope_run(tmp_path / "alone" / "rope_5000", 1e4, 5000, 0, 2.0)
    results = plots.load_results([sweep, tmp_path / "alone"])
    curves = plots.theta_curves([r for r in results if r["method"] == "none"])
    assert list(curves) == ["rope"]
    assert [r["encoding"]["theta"] for r in curves["rope"]] == [1e3, 1e4, 1e5]
    assert [r["seeds"] for r in curves["rope"]] == [2, 2, 2]
    drawn = {}
    monkeypatch.setattr(fileio, "save_figure",
                        lambda fig, path, **kw: drawn.setdefault(Path(path).name, fig) and path)
    plots.plot_sweep([sweep, tmp_path / "alone"], output=tmp_path / "out")
    lines = [line for line in drawn["theta.png"].axes[0].get_lines()  # not the bars' caps
             if not line.get_label().startswith("_")]
    assert [line.get_label() for line in lines] == ["L=32", "L=64"]
    assert [list(line.get_xdata()) for line in lines] == [[1e3, 1e4, 1e5]] * 2
    assert drawn["theta.png"].axes[0].get_title() == (
        "RoPE base against extrapolation, nonoverlapping windows")
    assert "(in brackets: predicted critical length)" in drawn["theta.png"].axes[0].get_xlabel()
    # a bias of the user's with a field named theta: no RoPE title, no RoPE prediction
    for theta in (2.0, 50.0):
        folder = tmp_path / "bias" / f"encoding=my_bias,theta={theta:g}"
        _rope_run(folder, theta, 600, 0, 4.0 + theta / 100)
        for name in ("config.json", "extrapolation.json"):
            saved = fileio.read_json(folder / name)
            saved["encoding"]["name"] = "my_bias"
            fileio.write_json(folder / name, saved)
    drawn.clear()
    plots.plot_sweep(tmp_path / "bias", output=tmp_path / "bias_out")
    bias = drawn["theta.png"].axes[0]
    assert bias.get_title() == "my_bias: theta against extrapolation, nonoverlapping windows"
    assert bias.get_xlabel() == "theta"
    # the runs that share a theta alone: no curve, no picture, and nothing said of one
    # (it said the same run twice was "left out of theta.png", where none was drawn)
    capsys.readouterr()
    assert plots.theta_curves(plots.load_results(tmp_path / "alone")) == {}
    shutil.copytree(tmp_path / "alone", tmp_path / "alone_again")
    assert plots.theta_curves(plots.load_results(
        [tmp_path / "alone", tmp_path / "alone_again"])) == {}
    assert capsys.readouterr().err == ""
    # two sweeps of different setups: a curve each, named by its runs; the same setup
    # twice: its runs are named on stderr and left out
    for theta in (1e3, 1e4):
        _rope_run(tmp_path / "longer" / f"encoding=rope,theta={theta:g},steps=1000", theta, 1000,
                  0, 3.0)
    both = plots.load_results([sweep, tmp_path / "longer"])
    assert sorted(plots.theta_curves(both)) == ["rope", "rope,steps=1000"]
    shutil.copytree(sweep, tmp_path / "copy")
    assert plots.theta_curves(plots.load_results([sweep, tmp_path / "copy"])) == {}
    assert "are the same run at theta=1000: left out of theta.png" in capsys.readouterr().err
    # seeds of one setup in folders named by hand: seeds, not the same run
    _rope_run(tmp_path / "hand" / "th1e3", 1e3, 600, 0, 4.0)
    _rope_run(tmp_path / "hand" / "th1e3s2", 1e3, 600, 2, 4.2)
    _rope_run(tmp_path / "hand" / "th1e4", 1e4, 600, 0, 4.1)
    assert plots.theta_curves(plots.load_results(tmp_path / "hand")) == {}
    assert capsys.readouterr().err.strip() == (
        "posjax plot: th1e3 and th1e3s2 are seeds 0 and 2 of one setup at theta=1000, in "
        "folders not named as seeds: left out of theta.png (name the folders NAME,seed=K to "
        "have them averaged)")


def test_a_length_not_every_seed_scored_is_named_where_the_plot_leaves_it_out(tmp_path,
                                                                             capsys):
    """The plot of a point's seeds dropped a length that one seed lacked, without a word."""
    from posjax.results import plots

    for seed in (0, 1):
        _rope_run(tmp_path / f"encoding=rope,seed={seed}", 1e4, 600, seed, 4.0)
    result = fileio.read_json(tmp_path / "encoding=rope,seed=1" / "extrapolation.json")
    result["lengths"] = result["lengths"][:1]
    fileio.write_json(tmp_path / "encoding=rope,seed=1" / "extrapolation.json", result)
    plots.plot_sweep(tmp_path, output=tmp_path / "out")
    assert capsys.readouterr().err.strip() == (
        "warning: lengths that not every seed scored are left out: rope (64) (score every "
        "seed at the same --lengths with posjax extrapolate)")
    assert "| 64 " not in (tmp_path / "out" / "extrapolation.md").read_text()
    # a length refused where a seed has it (an error row) is no length it left unscored:
    # "score every seed at the same --lengths" only added another refusal
    result["lengths"].append({"length": 64, "error": "past the documents"})
    fileio.write_json(tmp_path / "encoding=rope,seed=1" / "extrapolation.json", result)
    zero = fileio.read_json(tmp_path / "encoding=rope,seed=0" / "extrapolation.json")
    zero["lengths"] = zero["lengths"][:1]
    fileio.write_json(tmp_path / "encoding=rope,seed=0" / "extrapolation.json", zero)
    plots.plot_sweep(tmp_path, output=tmp_path / "out")
    assert "not every seed scored" not in capsys.readouterr().err


def test_a_sweep_inside_a_folder_of_runs_is_named_not_skipped_silently(tmp_path, monkeypatch,
                                                                       capsys, one_error_line):
    """`posjax plot runs` left out runs/mysweep (a sweep among the run folders) without a
    word; with only sweeps inside, it said the folder held no runs."""
    _text_run(tmp_path / "runs" / "rope")
    sweep = tmp_path / "runs" / "mysweep"
    fileio.write_json(sweep / "sweep.json", {"runs": {"encoding=alibi": {"status": "done"}}})
    _text_run(sweep / "runs" / "encoding=alibi")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["plot", "runs"]) == 0
    assert one_error_line() == (
        "posjax plot: runs also holds the sweep(s) runs/mysweep: left out of its runs (give "
        "them too to compare them: posjax plot runs runs/mysweep)")
    assert cli.main(["plot", "runs", "runs/mysweep", "--output=both"]) == 0
    assert "| alibi |" in (tmp_path / "both" / "extrapolation.md").read_text()
    assert capsys.readouterr().err == ""  # given: nothing left out
    deeper = tmp_path / "runs" / "more" / "sweep2"
    shutil.copytree(sweep, deeper)
    assert cli.main(["plot", "runs", "runs/mysweep"]) == 0
    assert one_error_line() == (
        "posjax plot: runs also holds the sweep(s) runs/more/sweep2: left out of its runs (give "
        "them too to compare them: posjax plot runs runs/more/sweep2)")
    shutil.rmtree(tmp_path / "runs" / "more")
    # a run a folder deeper than the folder's own (runs/group/alibi) was left out silently
    _text_run(tmp_path / "runs" / "group" / "alibi")
    assert cli.main(["plot", "runs", "runs/mysweep"]) == 0
    assert one_error_line() == (
        "posjax plot: runs also holds the run(s) runs/group/alibi: left out of its runs (give "
        "them too to compare them: posjax plot runs runs/group/alibi)")
    shutil.rmtree(tmp_path / "runs" / "rope")
    capsys.readouterr()
    assert cli.main(["plot", "runs"]) == 2
    assert one_error_line() == (
        "posjax plot: error: runs holds sweeps and runs, not runs of its own: give them, as in "
        "`posjax plot runs/mysweep runs/group/alibi`")
    shutil.rmtree(tmp_path / "runs" / "group")
    assert cli.main(["plot", "runs"]) == 2
    assert one_error_line() == (
        "posjax plot: error: runs holds sweeps, not runs of its own: give them, as in `posjax "
        "plot runs/mysweep`")


def test_a_json_method_block_in_the_legend_wraps_without_layout_warnings(tmp_path, recwarn):
    """A JSON --rope_scaling block as a legend entry pushed the loss-by-position plot off its
    figure: two "Tight layout not applied" warnings, and a legend wider than the plot."""
    from posjax.results import plots

    block = json.dumps({"rope_type": "yarn", "factor": 4, "beta_fast": 32, "beta_slow": 1,
                        "original_max_position_embeddings": 128, "mscale_all_dim": 0.5})
    for run in ("encoding=rope,theta=500,seq_len=64", "encoding=rope"):
        _text_run(tmp_path / "sweep" / run)
        result = fileio.read_json(tmp_path / "sweep" / run / "extrapolation.json")
        fileio.write_json(tmp_path / "sweep" / run / "extrapolation_yarn.json",
                          {**result, "method": block})
    plots.plot_sweep(tmp_path / "sweep")
    assert not [w for w in recwarn if "layout" in str(w.message)], [str(w.message)
                                                                    for w in recwarn]


_STOP_IN_FIRST_STEP = '''
import contextlib, signal, sys, time
from posjax import runlock
nested = sys.argv[1] == "nested"
with runlock.interruptible("posjax sweep: interrupted", "posjax sweep"):
    try:
        with runlock.interruptible("posjax train: interrupted", "posjax train") if nested \\
                else contextlib.nullcontext():
            with runlock.nothing_to_save("stopped in its first step"):
                signal.raise_signal(signal.SIGTERM)
                time.sleep(1)
    except KeyboardInterrupt:
        print("the sweep records the run interrupted")
'''


@pytest.mark.parametrize("nested", ["nested", "alone"])
def test_a_stop_in_a_first_step_run_by_an_inprocess_sweep_lets_the_sweep_record_it(nested):
    """A command's first step ends the process at once on a stop; run by a sweep in its own
    process (--executor=inprocess) that left sweep.json saying "running". Alone it still
    ends at once, in the line it was given."""
    done = subprocess.run([sys.executable, "-c", _STOP_IN_FIRST_STEP, nested],
                          capture_output=True, text=True, timeout=120)
    if nested == "nested":
        assert (done.returncode, done.stdout.strip()) == (
            0, "the sweep records the run interrupted"), done.stderr
    else:
        assert (done.returncode, done.stderr.strip(), done.stdout) == (
            128 + signal.SIGTERM, "posjax sweep: stopped in its first step", "")


def test_a_relative_text_glob_is_recorded_absolute_so_later_commands_read_the_same_files(
        tmp_path, monkeypatch):
    """`posjax train ...text_glob=BOOKS/*.txt` recorded the glob as typed: extrapolate from
    another folder matched nothing (naming /BOOKS/*.txt), or silently scored that folder's
    own BOOKS/ and rewrote the run's result."""
    monkeypatch.chdir(tmp_path)
    config = configured(f"{CONFIGS}/lm.py:smoke,dataset=local_text,text_glob=BOOKS/*.txt",
                        ["--config.train.init_from=runs/mlm", "--config.data.data_dir=~/tfds"])
    assert config.data.text_glob == f"{tmp_path}/BOOKS/*.txt"
    assert config.train.init_from == f"{tmp_path}/runs/mlm"
    assert config.data.data_dir == "~/tfds"  # the home directory of the host that runs it
    assert config_json(config)["data"]["text_glob"] == f"{tmp_path}/BOOKS/*.txt"


def test_slow_scoring_says_which_window_length_it_is_at(monkeypatch, capsys):
    """A passkey evaluation at 300k tokens said once that it was slow, then nothing: no
    length, no sign of life for hours. It names each window length as it finishes, and
    what it is at every STILL_SCORING_S."""
    from posjax.eval import evaluation

    monkeypatch.setattr(evaluation, "SLOW_SCORING_S", 0.05)
    monkeypatch.setattr(evaluation, "STILL_SCORING_S", 0.3)
    progress = evaluation.ScoringProgress("passkey")
    progress.start()
    progress.at(8192)
    progress.at(8192)  # another batch of the same windows: nothing to say
    time.sleep(1.0)
    progress.at(300000)
    progress.stop()
    time.sleep(0.4)  # stopped: no more lines
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == ("posjax: passkey: scoring has taken over 0 s, now windows of 8192 "
                        "tokens; its table comes when every length is scored (Ctrl-C stops it "
                        "at once)")
    assert lines[1] == "posjax: passkey: still scoring windows of 8192 tokens, 0 min on them so far"
    assert re.fullmatch(r"posjax: passkey: windows of 8192 tokens scored in 1 s; now windows "
                        r"of 300000", lines[-1]), lines
    assert set(lines[1:-1]) == {lines[1]}


def test_a_config_path_typed_outside_the_checkout_names_posjaxs_own_file(
        tmp_path, monkeypatch, one_error_line):
    """`posjax train --config=configs/lm.py...` from one's own folder said "not found: give
    a path like configs/lm.py", the path just typed."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train", "--config=configs/lm.py:encoding=rope,smoke",
                     "--workdir=runs/rope"]) == 2
    assert one_error_line() == (
        f"posjax train: error: config file 'configs/lm.py' not found in {tmp_path}: posjax's "
        f"own is {CONFIGS / 'lm.py'}; give that path")
    assert cli.main(["train", "--config=configs/mine.py", "--workdir=runs/rope"]) == 2
    assert one_error_line() == (
        f"posjax train: error: config file 'configs/mine.py' not found in {tmp_path}: give the "
        f"path of a config file, e.g. {CONFIGS / 'lm.py'} (posjax list configs lists "
        f"{CONFIGS}'s)")
    for typed in ("configs/lmm.py", "lm"):
        assert cli.main(["train", f"--config={typed}", "--workdir=runs/rope"]) == 2
        assert one_error_line() == (
            f"posjax train: error: config file {typed!r} not found in {tmp_path}: give the path "
            f"of a config file: did you mean {CONFIGS / 'lm.py'}?")
    # a comma where the colon goes
    (tmp_path / "my_config.py").write_text("def get_config(arg):\n    pass\n")
    assert cli.main(["train", "--config=my_config.py,smoke", "--workdir=runs/rope"]) == 2
    assert one_error_line() == (
        f"posjax train: error: config file 'my_config.py,smoke' not found in {tmp_path}: a "
        "colon starts the config arg: --config=my_config.py:smoke")
    (tmp_path / "configs").mkdir()
    assert cli.main(["train", "--config=configs", "--workdir=runs/rope"]) == 2
    assert one_error_line() == (
        "posjax train: error: --config=configs is a folder: give a config file (one that "
        "defines get_config(arg)); it has no .py file")
    for name in ("mine.py", "lm.py", "_shared.py"):
        (tmp_path / "configs" / name).write_text("")
    assert cli.main(["list", "encodings", "--config=configs"]) == 2
    assert one_error_line() == (
        "posjax list: error: --config=configs is a folder: give a config file in it "
        "(lm.py, mine.py)")
    assert not (tmp_path / "runs").exists()


def test_a_task_table_names_its_rows_as_the_data_kind_does():
    """A text_image run's table headed its grid sides "length"."""
    from posjax.eval import format_table

    result = {"evaluation": "task", "report": "task", "run": "TI", "dataset": "text_image",
              "task": "next_row", "train_len": 6, "method": "none",
              "lengths": [{"length": 9, "loss": 3.7, "acc": 0.05, "seq_acc": 0.0}]}
    table = format_table(result).splitlines()
    assert table[2:4] == ["| grid side (patches per row) | loss | acc | exact match |",
                          "|---|---|---|---|"]
    # grid2d's own metric, class-balanced accuracy, where exact match of a grid is 0 for
    # every run (a model answering "elsewhere" everywhere read as 0.88 acc and nothing more)
    grid = {**result, "dataset": "grid2d", "lengths": [
        {"length": 12, "loss": 0.5, "acc": 0.84, "seq_acc": 0.0, "balanced_acc": 0.25}]}
    assert format_table(grid).splitlines()[2:5] == [
        "| grid side (cells) | loss | acc | balanced acc |", "|---|---|---|---|",
        "| 12 | 0.5000 | 0.8400 | 0.2500 |"]


def test_two_run_folders_of_one_name_are_told_apart_by_the_folders_above_them(tmp_path):
    """`posjax plot s1/runs/theta=1e4 s1copy/runs/theta=1e4` was refused, naming both runs
    theta=1e4/theta=1e4 (the run's own folder taken for its source's)."""
    from posjax.results import plots

    for study in ("s1", "s1copy"):
        _text_run(tmp_path / study / "runs" / "theta=1e4")
    runs = plots.runs_of([tmp_path / "s1" / "runs" / "theta=1e4",
                          tmp_path / "s1copy" / "runs" / "theta=1e4"])
    assert list(runs) == ["s1/theta=1e4", "s1copy/theta=1e4"]
    # sweeps given as themselves keep their names' folders: main/encoding=rope
    for sweep in ("main", "ext"):
        _text_run(tmp_path / sweep / "runs" / "encoding=rope")
        fileio.write_json(tmp_path / sweep / "sweep.json", {"runs": {
            "encoding=rope": {"status": "done"}}})
    assert list(plots.runs_of([tmp_path / "main", tmp_path / "ext"])) == [
        "main/encoding=rope", "ext/encoding=rope"]


def test_a_points_seeds_keep_one_name_where_only_some_have_a_namesake(tmp_path):
    """`posjax plot A B`, A with 3 seeds of encoding=rope and B with 2: seeds 0 and 1 of A
    were named A/..., seed 2 kept its bare name, and the table split A's point into two rows
    (2 seeds, then 1) with wrong means and no error."""
    from posjax.results import plots

    for sweep, count in (("A", 3), ("B", 2)):
        names = [f"encoding=rope,seed={k}" for k in range(count)]
        for name in names:
            _text_run(tmp_path / sweep / "runs" / name)
        fileio.write_json(tmp_path / sweep / "sweep.json",
                          {"runs": {name: {"status": "done"} for name in names}})
    _text_run(tmp_path / "A" / "runs" / "encoding=alibi,seed=0")
    fileio.write_json(tmp_path / "A" / "sweep.json", {"runs": {
        **fileio.read_json(tmp_path / "A" / "sweep.json")["runs"],
        "encoding=alibi,seed=0": {"status": "done"}}})
    assert sorted(plots.runs_of([tmp_path / "A", tmp_path / "B"])) == sorted([
        "A/encoding=rope,seed=0", "A/encoding=rope,seed=1", "A/encoding=rope,seed=2",
        "B/encoding=rope,seed=0", "B/encoding=rope,seed=1", "encoding=alibi,seed=0"])


def test_runs_are_listed_with_their_numbers_in_numeric_order(tmp_path):
    """A sweep extended by a second `--grid=theta=1e5` tabled theta=1e4, 5e5, 1e6, 1e5 (the
    order the runs were added), and run folders came alphabetically (1e4, 1e5, 1e6, 5e5).
    Runs that differ in more than numbers keep the order given: a sweep's encodings and
    their variants as its config lists them."""
    from posjax.results import plots

    added = ["encoding=rope,theta=1e4,seed=1", "encoding=rope,theta=1e4,seed=0",
             "encoding=rope,theta=5e5,seed=0", "encoding=rope,theta=1e6,seed=0",
             "encoding=alibi,seed=0", "encoding=rope,p=0.75,seed=0",
             "encoding=rope,theta=1e5,seed=0", "encoding=nope,seed=0"]
    assert plots.in_value_order(added) == [
        "encoding=rope,theta=1e4,seed=0", "encoding=rope,theta=1e4,seed=1",
        "encoding=rope,theta=1e5,seed=0", "encoding=rope,theta=5e5,seed=0",
        "encoding=rope,theta=1e6,seed=0", "encoding=alibi,seed=0",
        "encoding=rope,p=0.75,seed=0", "encoding=nope,seed=0"]
    assert plots.in_value_order(["yarn", "pi", "128", "16"]) == ["yarn", "pi", "16", "128"]
    for theta in ("1e4", "1e6", "5e5", "1e5"):
        _text_run(tmp_path / "sweep" / "runs" / f"theta={theta}")
        _text_run(tmp_path / "folder" / f"theta={theta}")
    fileio.write_json(tmp_path / "sweep" / "sweep.json", {"runs": {
        f"theta={theta}": {"status": "done"} for theta in ("1e4", "5e5", "1e6", "1e5")}})
    numeric = ["theta=1e4", "theta=1e5", "theta=5e5", "theta=1e6"]
    assert list(plots.runs_of(tmp_path / "sweep")) == numeric
    assert list(plots.runs_of(tmp_path / "folder")) == numeric


def test_each_line_of_a_run_names_the_data_of_its_own_result(tmp_path, monkeypatch):
    """A run's non-overlapping result on other text and its sliding result on its own data:
    one legend entry, "llama [stdlib_text]", covered both lines."""
    from posjax.results import glyphs, plots

    _text_run(tmp_path / "R")
    own = fileio.read_json(tmp_path / "R" / "extrapolation.json")
    fileio.write_json(tmp_path / "R" / "extrapolation.json", {
        **own, "data": {"dataset": "local_text", "text_glob": "BOOKS/*.txt",
                        "fingerprint": "f00d"}, "max_tokens": 1024})
    fileio.write_json(tmp_path / "R" / "extrapolation_sliding.json", {
        **own, "protocol": "sliding", "stride": 16, "data": {"dataset": "stdlib_text"},
        "max_tokens": 8192})
    labels = {}

    def kept(fig, path, **kwargs):
        legend = fig.legends[0] if fig.legends else fig.axes[0].get_legend()
        labels[Path(path).name] = [text.get_text().replace("\n", " ")  # wrapped at 40
                                   for text in legend.get_texts()]

    monkeypatch.setattr(glyphs, "save", kept)
    plots.plot_sweep([tmp_path / "R"], output=tmp_path / "out")
    assert labels["extrapolation.png"] == [
        "R [stdlib_text, first 8192 tokens]",
        "R [local_text, BOOKS/*.txt (f00d), first 1024 tokens]"]



def test_a_torn_stages_json_says_what_restores_it_wherever_it_is_read(tmp_path, capsys):
    """`posjax plot` and `sweep --status` said to delete a torn stages.json and re-run, after
    which the sweep's re-run did not write it again and `posjax train` refused the run."""
    run = tmp_path / "B"
    _text_run(run)
    (run / "stages.json").write_text('{"stages": [')
    assert cli.main(["plot", str(run), f"--output={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("train the run again in a new --workdir: the records of its ended "
                        "stages are not written again"), err


def test_a_killed_plots_staging_folder_is_removed_by_the_next_plot(tmp_path):
    """kill -9 during `posjax plot` left a hidden .posjax_plot.XXXX/ (a 0-byte .tmp inside)
    that no later plot removed."""
    from posjax.results import plots

    run, out = tmp_path / "B", tmp_path / "out"
    _text_run(run)
    left = out / f"{plots.STAGING_PREFIX}abc123"
    left.mkdir(parents=True)
    (left / ".extrapolation.png.x.tmp").write_bytes(b"")
    assert cli.main(["plot", str(run), f"--output={out}"]) == 0
    assert not list(out.glob(f"{plots.STAGING_PREFIX}*"))
    assert (out / "extrapolation.png").is_file()


def test_seeds_trained_with_other_settings_are_not_averaged_as_one_point(tmp_path):
    """`runs/rope,seed=0` (6 steps) and `mix/rope,seed=4` (10 steps, or another d_model and
    learning rate) were averaged into one row "rope" with no word: folders named as seeds
    of one point were compared only in how they were scored."""
    for folder, steps, seed in (("a/rope,seed=0", 6, 0), ("b/rope,seed=4", 10, 4)):
        _text_run(tmp_path / folder)
        fileio.write_json(tmp_path / folder / "config.json", config_json(configured(
            f"{CONFIGS}/lm.py:smoke,encoding=rope,steps={steps}",
            [f"--config.train.seed={seed}"])))
    with pytest.raises(ConfigError, match=(
            r"count as seeds of 'rope' by their names but trained with train\.stages=")):
        plots.load_results([tmp_path / "a" / "rope,seed=0", tmp_path / "b" / "rope,seed=4"])


def test_a_json_method_is_labelled_by_its_type_and_factor(tmp_path):
    """A row scored with --rope_scaling='{"rope_type": "longrope", ...}' was labelled with
    the whole block, a table row hundreds of characters wide."""
    from posjax.eval.evaluation import result_name
    from posjax.records import json_block

    block = '{"rope_type": "longrope", "factor": 4, "long_factor": [1, 2], "short_factor": [1, 1]}'
    _text_run(tmp_path / "R")
    result = fileio.read_json(tmp_path / "R" / "extrapolation.json")
    fileio.write_json(tmp_path / "R" / "extrapolation.json", {**result, "method": block})
    (row,) = plots.load_results([tmp_path / "R"])
    kind, factor, digest = json_block(block)
    assert row["label"] == f"R +longrope:4 (JSON block {digest})"
    assert result_name({**result, "method": block}) == f"extrapolation_longrope-4-{digest}.json"


def test_sweep_status_lists_every_run_beside_one_with_a_torn_stages_json(tmp_path, capsys):
    """`posjax sweep --status` stopped at a torn stages.json of one run, listing none."""
    sweepdir = tmp_path / "S"
    for name in ("encoding=alibi", "encoding=rope"):
        _text_run(sweepdir / "runs" / name)
        fileio.write_json(sweepdir / "runs" / name / "stages.json",
                          {"final_step": 6, "stages": [{"stage": 1, "final_loss": 2.5}]})
    (sweepdir / "runs" / "encoding=alibi" / "stages.json").write_text('{"stages": [')
    fileio.write_json(sweepdir / "sweep.json", {
        "config": f"{CONFIGS}/lm.py", "arg": "smoke,study=smoke", "extrapolate": True,
        "runs": {name: {"status": "done", "arg": f"smoke,{name}"}
                 for name in ("encoding=alibi", "encoding=rope")}})
    assert cli.main(["sweep", f"--workdir={sweepdir}", "--status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("failed       encoding=alibi  ") and "is not valid JSON" in lines[0]
    assert lines[0].endswith("train the run again in a new --workdir: the records of its ended "
                             "stages are not written again")
    assert lines[1] == "done         encoding=rope"
