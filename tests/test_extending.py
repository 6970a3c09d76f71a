"""Each way to extend posjax (docs/extending.md), followed once from this file: a dataset, a
model kind, an encoding, an attention kernel, an evaluation and a pretrained family, each a
class or function and a registration, then run end to end."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posjax import attention, data, encoders, fileio, models, pretrained
from posjax import config as configlib
from posjax.config.files import load_config_module
from posjax.errors import ConfigError
from posjax.eval import evaluate, evaluation, format_table
from posjax.experiment import Experiment
from posjax.models.transformer import layer_encodings
from posjax.train import trainer

pytestmark = pytest.mark.slow

LM = str(Path(__file__).resolve().parents[1] / "configs" / "lm.py")
PRETRAINED_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "pretrained"


@data.register("toy_counting")
class ToyCounting(data.TextData):
    """Text kept in memory: each document counts up from a different start. No TFDS builder:
    the kind serves its splits itself by overriding `source`."""

    def source(self, split):
        starts = range(40) if split == self.cfg.train_split else range(100, 104)
        return [{"text": " ".join(str(n) for n in range(s, s + 60))} for s in starts]


@models.register("toy_lm")
class ToyLM(nnx.Module):
    """A causal LM without the shared token-model base: embeddings, the shared backbone, an
    untied head."""

    input_key = "inputs"
    causal = True
    masked_lm = False
    sizes = ("vocab_size",)

    def __init__(self, cfg, encoding, *, max_len, rngs, vocab_size):
        self.embed = nnx.Embed(vocab_size, cfg.d_model, rngs=rngs)
        self.backbone = models.Backbone(cfg, encoding, causal=True, max_len=max_len,
                                        input_axes=None, rngs=rngs)
        self.head = nnx.Linear(cfg.d_model, vocab_size, rngs=rngs)

    def __call__(self, tokens, positions, segment_ids, *, deterministic=True, rngs=None):
        h = self.backbone(self.embed(tokens), positions, positions, segment_ids,
                          deterministic=deterministic, rngs=rngs)
        return self.head(h).astype(jnp.float32)


def _config(**model):
    config = configlib.load_config_module(LM).get_config("smoke,encoding=alibi,seq_len=32")
    config.data.dataset = "toy_counting"
    config.model.update(model)
    return config


def test_a_registered_dataset_trains_and_is_evaluated(tmp_path):
    config = _config()
    experiment = Experiment.from_config(config)
    assert isinstance(experiment.data, ToyCounting) and experiment.data.evaluation == "text"
    batch = next(experiment.train_iterator(experiment.stages[0]))
    spec = experiment.batch_spec()
    assert {k: (v.shape, v.dtype) for k, v in batch.items()} == {
        k: (s.shape, s.dtype) for k, s in spec.arrays.items()}

    summary = trainer.train(config, tmp_path, progress=False)
    assert np.isfinite(summary["stages"][0]["final_loss"])
    result = evaluate(tmp_path, lengths=(32, 64))
    assert [r["length"] for r in result["lengths"]] == [32, 64]
    assert all(np.isfinite(r["loss"]) for r in result["lengths"])
    assert fileio.read_json(tmp_path / "extrapolation.json") == result


def test_a_registered_model_kind_trains(tmp_path):
    config = _config(kind="toy_lm")
    assert Experiment.from_config(config).model_class is ToyLM
    summary = trainer.train(config, tmp_path, progress=False)
    assert np.isfinite(summary["stages"][0]["final_loss"])


def test_registering_a_name_twice_is_refused_and_unknown_kinds_list_the_valid_ones():
    with pytest.raises(ValueError, match="registered twice"):
        data.register("toy_counting")(ToyCounting)
    with pytest.raises(ValueError, match="registered twice"):
        models.register("toy_lm")(ToyLM)
    # a name that differs only in case: register("ALIBI") stood beside posjax's alibi
    with pytest.raises(ValueError, match="^encoding 'ALIBI' differs from 'alibi' only in case, "
                       "which a reader .and a suggestion. takes for the same name: give it "
                       "another name$"):
        encoders.register("ALIBI")(type(encoders.get("alibi")))
    assert "ALIBI" not in encoders.names()
    config = _config(kind="toy_lmm")
    with pytest.raises(ConfigError, match="did you mean 'toy_lm'"):
        Experiment.from_config(config)


# --- an encoding, an attention kernel, an evaluation, a pretrained family ---------------


@encoders.register("toy_learned_slope")
@dataclasses.dataclass(frozen=True)
class ToyLearnedSlope(encoders.Encoding):
    """logits_hij += -s_h |k_pos_j - q_pos_i|: ALiBi with a learned slope per head."""

    init_slope: float = 0.1

    def init(self, rng, dims):
        del rng
        return {"slope": jnp.full((dims.num_heads,), self.init_slope, jnp.float32)}

    def bias(self, params, q_pos, k_pos, num_heads):
        distance = jnp.abs(k_pos[None, :] - q_pos[:, None]).astype(jnp.float32)
        return -params["slope"][:, None, None] * distance[None]


def naive_attention(q, k, v, *, encoding, params, q_pos, k_pos, q_seg, k_seg, causal, x,
                    **options):
    """Softmax attention written out in one einsum each way, for encodings at the input and
    query/key sites."""
    del x, options
    if encoding.rotate is not None:
        q, k = encoding.rotate(params, q, k, q_pos, k_pos)
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32)
    logits *= encoding.logit_scale(q.shape[-1])
    ok = jnp.ones((q.shape[0], q.shape[1], k.shape[1]), bool)
    if q_seg is not None:
        ok = (q_seg[:, :, None] == k_seg[:, None, :]) & (k_seg[:, None, :] > 0)
    if causal:
        ok &= jnp.tril(jnp.ones((q.shape[1], k.shape[1]), bool))
    probs = jax.nn.softmax(jnp.where(ok[:, None], logits, -jnp.inf), axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", probs.astype(v.dtype), v)


attention.register("toy_naive", naive_attention, frozenset({"embed", "rotate"}),
                   "the naive kernel adds no bias")


@evaluation.register("toy_repetition")
class ToyRepetition(evaluation.Evaluation):
    """Loss on the second half of a sequence that repeats its first half: what copying
    from earlier positions gains, at each length. Makes its own inputs, so it scores any
    causal LM (own_data=False)."""

    own_data = False
    options = ("lengths",)
    columns = (("loss", "loss", ".4f"), ("acc", "acc", ".3f"))
    stem = "repetition"

    def run(self, *, lengths=None) -> dict:
        train_len = self.experiment.train_len
        rows = []
        for length in lengths or (train_len, 2 * train_len):
            half = np.random.default_rng(length).integers(48, 58, length // 2)  # the digits
            tokens = np.concatenate([half, half])[None].astype(np.int32)
            batch = {"inputs": tokens[:, :-1], "targets": tokens[:, 1:],
                     "positions": np.arange(length - 1, dtype=np.int32)[None],
                     "segment_ids": np.ones((1, length - 1), np.int32)}
            loss, correct = self.token_losses(self.encoding_at(train_len, length), batch)
            second = slice(length // 2, None)
            rows.append({"length": length, "loss": float(loss[0, second].mean()),
                         "acc": float(correct[0, second].mean())})
        return self.result(train_len, rows)

    @classmethod
    def title(cls, result: dict) -> str:
        return f"repetition: loss on the repeated half ({result['run']})"


def test_a_registered_encoding_trains_and_is_evaluated(tmp_path):
    config = configlib.load_config_module(LM).get_config("smoke,encoding=toy_learned_slope,"
                                                     "seq_len=32")
    assert "toy_learned_slope" in encoders.names()
    summary = trainer.train(config, tmp_path, progress=False)
    assert np.isfinite(summary["stages"][0]["final_loss"])
    assert Experiment.from_workdir(tmp_path).encoding == ToyLearnedSlope()
    result = evaluate(tmp_path, lengths=(32, 64))
    assert [r["length"] for r in result["lengths"]] == [32, 64]
    assert all(np.isfinite(r["loss"]) for r in result["lengths"])


def test_a_registered_attention_kernel_computes_what_dense_does_and_trains(tmp_path):
    config = configlib.load_config_module(LM).get_config("smoke,encoding=rope,seq_len=32")
    config.model.attention = "toy_naive"
    summary = trainer.train(config, tmp_path, progress=False)
    assert np.isfinite(summary["stages"][0]["final_loss"])

    enc = encoders.get("rope")
    shape = (2, 12, 2, 8)
    q, k, v = (jax.random.normal(jax.random.key(i), shape) for i in range(3))
    pos = jnp.broadcast_to(jnp.arange(12, dtype=jnp.int32), (2, 12))
    seg = jnp.asarray([[1] * 7 + [2] * 5, [1] * 10 + [0] * 2], jnp.int32)
    with jax.default_matmul_precision("highest"):
        out = {impl: attention.multi_head_attention(
            q, k, v, encoding=enc, params={}, q_pos=pos, k_pos=pos, q_seg=seg, k_seg=seg,
            causal=True, impl=impl) for impl in ("toy_naive", "dense")}
    real = np.asarray(seg)[:, :, None, None] > 0  # a padding query's output is unspecified
    np.testing.assert_allclose(np.where(real, out["toy_naive"], 0),
                               np.where(real, out["dense"], 0), rtol=1e-5, atol=1e-5)
    with pytest.raises(ConfigError, match="the naive kernel adds no bias.*attention="):
        attention.check_compatible(encoders.get("alibi"), "toy_naive", causal=True)


def test_a_registered_evaluation_scores_a_run(tmp_path):
    config = configlib.load_config_module(LM).get_config("smoke,encoding=rope,seq_len=32")
    trainer.train(config, tmp_path, progress=False)
    result = evaluate(tmp_path, evaluation="toy_repetition", lengths=(32, 64))
    assert result["evaluation"] == "toy_repetition"
    assert [r["length"] for r in result["lengths"]] == [32, 64]
    assert all(np.isfinite(r["loss"]) and 0 <= r["acc"] <= 1 for r in result["lengths"])
    written = list(tmp_path.glob("repetition*.json"))
    assert len(written) == 1 and fileio.read_json(written[0]) == result
    assert "repetition" in format_table(result)


def test_a_registered_pretrained_family_loads_a_snapshot(tmp_path):
    """A checkpoint of Llama's architecture under another model_type (as forks publish
    them) loads once its family is registered, and computes what the llama one does."""
    llama = pretrained.FAMILIES["llama"]
    pretrained.register("toy_llama_fork", dataclasses.replace(llama))
    try:  # registered for this test only: other tests count the families posjax ships
        snapshot = tmp_path / "fork"
        shutil.copytree(PRETRAINED_FIXTURES / "llama", snapshot)
        config = fileio.read_json(snapshot / "config.json")
        fileio.write_json(snapshot / "config.json", {**config, "model_type": "toy_llama_fork"})
        tokens = np.arange(10, dtype=np.int32)[None]
        fork = pretrained.load(snapshot)
        np.testing.assert_array_equal(
            fork.logits(tokens), pretrained.load(PRETRAINED_FIXTURES / "llama").logits(tokens))
        with pytest.raises(ValueError, match="registered twice"):
            pretrained.register("toy_llama_fork", llama)
    finally:
        del pretrained.FAMILIES["toy_llama_fork"]


# --- code outside the package: a config file's own encoding, on every later command -------

USER_CONFIG = '''"""A config file that registers its own encoding (issue 50)."""
import dataclasses
import importlib.util
import importlib.util

import jax.numpy as jnp

from posjax import config as configlib
from posjax import encoders

_spec = importlib.util.spec_from_file_location("lm", {lm!r})
lm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lm)


@encoders.register("sandwich_ext")
@dataclasses.dataclass(frozen=True)
class SandwichExt(encoders.Encoding):
    """b[h, i, j] = -|k_pos - q_pos| / (h + 1)."""

    def bias(self, params, q_pos, k_pos, num_heads):
        r = jnp.abs(k_pos[None, :] - q_pos[:, None]).astype(jnp.float32)
        return -r[None] / jnp.arange(1, num_heads + 1, dtype=jnp.float32)[:, None, None]


def get_config(arg):
    return lm.get_config(configlib.with_defaults("smoke,seq_len=32" + ("," + arg if arg else ""),
                                                 encoding="sandwich_ext"))
'''


def _posjax(*argv, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "posjax", *argv], cwd=cwd, text=True,
                          capture_output=True, timeout=600)


def test_an_encoding_registered_by_a_config_file_is_found_by_later_commands(tmp_path,
                                                                            data_flags):
    """Trained from a config file that registers an encoding, the run records the file
    (config.json's "imports") and `posjax extrapolate --workdir`, a fresh process that never
    read the config file, imports it again and scores the run."""
    config = tmp_path / "mine" / "my_config.py"
    config.parent.mkdir()
    config.write_text(USER_CONFIG.format(lm=LM))
    run = tmp_path / "run"
    done = _posjax("train", f"--config={config}", f"--workdir={run}", "--noprogress",
                   "--noextrapolate", *data_flags, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert fileio.read_json(run / "config.json")["imports"] == [str(config)]
    done = _posjax("extrapolate", f"--workdir={run}", "--lengths=32,64", cwd=tmp_path / "mine")
    assert done.returncode == 0, done.stderr
    assert "| 64 |" in done.stdout
    moved = config.rename(tmp_path / "elsewhere.py")
    done = _posjax("extrapolate", f"--workdir={run}", "--lengths=32", cwd=tmp_path)
    assert (done.returncode, done.stderr.count("\n")) == (2, 1), done.stderr
    assert (f"{run} was trained with code registered in {config} (config.json's "
            '"imports"), which does not exist: put the file back there, or give the file that '
            "registers it now with --import=FILE") in done.stderr
    # the moved file, given with --import, is what the run needs
    done = _posjax("extrapolate", f"--workdir={run}", "--lengths=32", f"--import={moved}",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr


USER_ENCODING = '''"""An encoding of the user's own, in a file no config imports."""
from posjax import encoders
from posjax.encoders import rotary


@encoders.register("my_rope")
class MyRope(rotary.RoPE):
    """RoPE under the user's own name."""
'''


def test_train_and_sweep_import_the_users_file_that_no_config_imports(tmp_path, data_flags):
    """--import was on list, plot and extrapolate, not on train or sweep: an encoding in a
    file of its own could be listed but not trained."""
    source = tmp_path / "my_encoding.py"
    source.write_text(USER_ENCODING)
    spec = f"--config={LM}:smoke,seq_len=32,steps=2,encoding=my_rope"
    run = tmp_path / "run"
    done = _posjax("train", "--import=my_encoding.py", spec, f"--workdir={run}",
                   "--noprogress", *data_flags, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert fileio.read_json(run / "config.json")["imports"] == [str(source)]
    done = _posjax("extrapolate", f"--workdir={run}", "--lengths=32", cwd=tmp_path / "run")
    assert done.returncode == 0, done.stderr  # the recorded file, imported again
    swept = tmp_path / "sweep"
    done = _posjax("sweep", "--import=my_encoding.py", spec, f"--workdir={swept}",
                   *data_flags, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [entry] = fileio.read_json(swept / "sweep.json")["runs"].values()
    assert entry["status"] == "done"
    assert entry["command"].startswith(f"posjax train --import={source} --config=")
    assert fileio.read_json(swept / "runs" / "encoding=my_rope" / "config.json")[
        "imports"] == [str(source)]
    # its re-run without --import imports the file the sweep recorded (it said "unknown
    # encoding 'my_rope' (did you mean 'mrope'?)")
    assert fileio.read_json(swept / "sweep.json")["imports"] == [str(source)]
    done = _posjax("sweep", spec, f"--workdir={swept}", *data_flags, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (f"posjax sweep: importing {source}, as this sweep was started with (--import)"
            in done.stderr)
    source.rename(tmp_path / "moved.py")
    done = _posjax("sweep", spec, f"--workdir={swept}", *data_flags, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"posjax sweep: error: {swept} was started with --import={source}, which is no longer "
        "there: put it back, or give where it is now with --import=FILE")


def test_a_config_file_with_its_own_encoding_sweeps_it_against_posjaxs(tmp_path, capsys,
                                                                        my_config):
    """docs/extending.md's config file, as the page shows it, set `encoding=` in the arg it
    passed on, so `--grid=encoding=sandwich_ext,rope` (or `encoding=rope` in its arg) was
    refused as a key given twice: with configlib.with_defaults the user's arg chooses."""
    from posjax.launch import cli

    config = tmp_path / "my_config.py"
    config.write_text(my_config)
    try:
        assert cli.main(["sweep", f"--config={config}:smoke,seeds=3",
                         "--grid=encoding=sandwich_ext,rope,alibi",
                         f"--workdir={tmp_path / 'sweep'}", "--print_commands"]) == 0
        planned = capsys.readouterr().out
        for name in ("sandwich_ext", "rope", "alibi"):
            assert f"encoding={name}" in planned, planned
        assert configlib.configured(f"{config}:smoke,encoding=rope", []).encoding.name == "rope"
        assert configlib.configured(f"{config}:smoke", []).encoding.name == "sandwich_ext"
        assert cli.main(["list", "encodings", f"--config={config}"]) == 0
        listed = capsys.readouterr().out
        assert "\nsandwich_ext\n" in listed
        # the page's class's docstring, not its dataclass signature, "SandwichExt()"
        assert "SandwichExt(" not in listed
        assert ("\nsandwich_ext\n    Distance bias -|j - i| / h for head h = 1..H (posjax list "
                "encodings shows this).\n") in listed
        assert cli.main(["list", "configs", f"--config={config}"]) == 0
        listed = capsys.readouterr().out
        assert f"\n{config}\n    args: those its get_config(arg) reads (it declares no " \
               "DEFAULTS)\n    sweep: no\n" in listed, listed
        assert listed.index(str(config)) < listed.index("\nconfigs/algorithmic.py\n")
    finally:
        encoders._REGISTRY.pop("sandwich_ext", None)


def test_with_defaults_puts_first_only_the_keys_the_arg_leaves_out():
    assert configlib.with_defaults("smoke,theta=500", encoding="rope") == (
        "encoding=rope,smoke,theta=500")
    assert configlib.with_defaults("encoding=alibi,smoke", encoding="rope") == (
        "encoding=alibi,smoke")
    assert configlib.with_defaults("", encoding="rope", seq_len=32) == "encoding=rope,seq_len=32"


def test_a_recorded_file_whose_module_is_missing_names_where_posjax_looked(tmp_path):
    """A run trained with PYTHONPATH pointing at the user's module, scored later without it:
    the line says the module is not found and how to make it found, where it told the user
    to fix a file that has nothing wrong with it."""
    from posjax import registry

    code = tmp_path / "mine" / "recorded.py"
    code.parent.mkdir()
    code.write_text("import module_only_on_my_pythonpath\n")
    with pytest.raises(ConfigError) as refused:
        registry.import_files([str(code)], "RUN")
    line = str(refused.value)
    assert line.startswith(f"RUN imports {code} (config.json's \"imports\"): no module named "
                           "'module_only_on_my_pythonpath' among the installed packages or in "
                           f"{code.parent}")
    assert line.endswith("put its folder on PYTHONPATH, or pip install it")


def test_a_config_file_whose_import_raises_names_the_file_and_line_that_raised(tmp_path):
    helper = tmp_path / "helper_that_raises.py"
    helper.write_text("x = 1\nraise RuntimeError('boom')\n")
    config = tmp_path / "uses_helper.py"
    config.write_text("import helper_that_raises\n\ndef get_config(arg):\n    return None\n")
    with pytest.raises(ConfigError) as refused:
        load_config_module(str(config))
    assert str(refused.value) == (f"config file {config}: loading it raised RuntimeError: "
                                  f"boom, at {helper}:2; fix it there")


def test_a_name_registered_twice_by_a_users_file_names_the_users_line(tmp_path):
    """Registering an encoding under a taken name pointed at posjax/registry.py, where it is
    raised, and said to fix it there: the line to fix is the user's."""
    config = tmp_path / "taken_name.py"
    config.write_text("import dataclasses\nfrom posjax import encoders\n"
                      "from posjax.encoders.base import Encoding\n\n\n"
                      "@encoders.register('alibi')\n@dataclasses.dataclass(frozen=True)\n"
                      "class Mine(Encoding):\n    pass\n")
    with pytest.raises(ConfigError) as refused:
        load_config_module(str(config))
    assert str(refused.value) == (f"config file {config}: loading it raised ValueError: "
                                  "encoding 'alibi' registered twice (posjax's own: give "
                                  f"yours another name), at {config}:6; fix it there")


def test_a_config_file_loaded_twice_in_one_process_redefines_its_encoding(tmp_path):
    """Re-executing a file re-registers its definitions (the in-process executor loads a
    config file for the sweep, then again for each run); two classes of one name still
    clash."""
    from posjax import registry

    config = tmp_path / "twice_config.py"
    config.write_text(USER_CONFIG.format(lm=LM).replace("sandwich_ext", "twice_ext"))
    try:
        for _ in range(2):
            with registry.loading(config):
                configlib.load_config_module(str(config))
        assert str(config) in registry.user_files()
        assert configlib.configured(f"{config}:", []).encoding.name == "twice_ext"
        with pytest.raises(ValueError, match="encoding 'twice_ext' registered twice"):
            encoders.register("twice_ext")(dataclasses.dataclass(frozen=True)(
                type("Other", (encoders.Encoding,), {})))
    finally:
        encoders._REGISTRY.pop("twice_ext", None)


@pytest.mark.parametrize("what, made", [
    ("a class that is not an Encoding",
     lambda: dataclasses.dataclass(frozen=True)(type("NotEncoding", (), {}))),
    ("a function", lambda: (lambda params, q_pos, k_pos, num_heads: None)),
    ("an instance", lambda: encoders.get("rope")),
])
def test_registering_what_is_no_frozen_encoding_dataclass_is_refused_at_the_decorator(what,
                                                                                      made):
    """A dataclass that subclassed nothing registered and failed later with a traceback
    (`'W' object has no attribute 'for_model'`); a function was blamed on configs/lm.py."""
    with pytest.raises(TypeError) as refused:
        encoders.register("made_ext")(made())
    assert str(refused.value).startswith(
        "encoding 'made_ext': register takes a frozen dataclass that subclasses "
        "posjax.encoders.Encoding, got "), what
    assert "made_ext" not in encoders.names()


def test_an_encoding_class_without_its_own_dataclass_decorator_is_refused():
    """A subclass of Encoding not decorated with @dataclass registered, and its annotated
    hyperparameter was no field: no arg set it, hparams() and config.json left it out."""
    from typing import ClassVar

    undecorated = type("Undecorated", (encoders.Encoding,),
                       {"__annotations__": {"scale": float}, "scale": 2.0})
    with pytest.raises(TypeError) as refused:
        encoders.register("undecorated_ext")(undecorated)
    assert str(refused.value) == (
        "encoding 'undecorated_ext': scale of Undecorated is no dataclass field (no config arg "
        "sets it, and a saved run does not record it): put @dataclasses.dataclass(frozen=True) "
        "on the class, under @encoders.register")
    assert "undecorated_ext" not in encoders.names()
    with_class_var = dataclasses.dataclass(frozen=True)(type(
        "WithClassVar", (encoders.Encoding,),
        {"__annotations__": {"kinds": ClassVar[tuple], "scale": float}, "kinds": (),
         "scale": 2.0}))
    try:
        encoders.register("class_var_ext")(with_class_var)
        assert encoders.hparams("class_var_ext") == {"scale": 2.0}
    finally:
        encoders._REGISTRY.pop("class_var_ext", None)


@pytest.mark.parametrize("name", ["My Ext,1", "a=b", "rope+alibi", "", "x(1)", "-", "-ext"])
def test_a_name_no_arg_can_hold_is_refused_at_registration(name):
    with pytest.raises(ValueError) as refused:
        encoders.register(name)(dataclasses.dataclass(frozen=True)(
            type("Named", (encoders.Encoding,), {})))
    assert str(refused.value) == (f"encoding name {name!r} cannot be typed in a config arg or a "
                                  "flag: use letters, digits, '_' and '-' only, not starting "
                                  "with '-'")


def test_with_defaults_writes_values_the_arg_parser_reads_back():
    """A default that is a tuple, a dict or a text with a comma reaches get_config as that
    value, where str() wrote `(0.25, 0.5)` and cut a run folder at its comma."""
    arg = configlib.with_defaults("smoke", fractions=(0.25, 0.5),
                                  pretrained="runs/mlm/encoding=rope,seed=0",
                                  scaling={"rope_type": "yarn", "factor": 4})
    from posjax.config.args import parse_arg

    read = parse_arg(arg, {"fractions": (0.5, 1.0), "pretrained": configlib.PathText(""),
                           "scaling": None, "smoke": False})
    assert read.fractions == (0.25, 0.5) and read.smoke
    assert read.pretrained == "runs/mlm/encoding=rope,seed=0"
    assert read.scaling.to_dict() == {"rope_type": "yarn", "factor": 4}
    assert configlib.with_defaults("", folder="it's,here") == "folder=\"it's,here\""
    assert configlib.with_defaults("", seq_len=32, lengths=[64, 128]) == (
        "seq_len=32,lengths=64+128")


def test_an_encoding_a_notebook_registers_is_named_when_a_run_uses_it(tmp_path, capsys):
    """Registered in __main__ (a notebook or script), an encoding trained with "imports":
    null, and every later command on the run said only "unknown encoding" (with a
    did-you-mean of another name)."""
    notebook_class = dataclasses.make_dataclass(
        "NotebookSlope", [("init_slope", float, 0.1)], bases=(ToyLearnedSlope,), frozen=True,
        namespace={"__module__": "__main__"})
    encoders.register("toy_notebook_slope")(notebook_class)
    try:
        lm = configlib.load_config_module(LM)
        trainer._warn_of_main_entries(lm.get_config("smoke,encoding=toy_learned_slope"))
        assert capsys.readouterr().err == ""
        config = lm.get_config("smoke,encoding=toy_notebook_slope,seq_len=32,steps=2")
        trainer.train(config, tmp_path, progress=False)
        assert capsys.readouterr().err.startswith(
            "warning: encoding 'toy_notebook_slope' registered in __main__ (this notebook or "
            "script), which later commands on this run (posjax extrapolate, plot, sweep) "
            "cannot import: define it in a file that your config file imports "
            "(docs/extending.md)\n")
        assert fileio.read_json(tmp_path / "config.json")["from_main"] == [
            ["encoding", "toy_notebook_slope"]]
        assert Experiment.from_workdir(tmp_path).encoding.name == "toy_notebook_slope"
    finally:
        del encoders._REGISTRY["toy_notebook_slope"]
    with pytest.raises(ConfigError) as lacking:  # a later command, in a fresh process
        Experiment.from_workdir(tmp_path)
    assert str(lacking.value) == (
        f"{tmp_path} was trained with encoding 'toy_notebook_slope' registered in a notebook "
        "or script (__main__), which no command can import: move its definition into a file "
        "and give it to this command with --import=FILE, or run this from code that "
        "registers it first (docs/extending.md)")


def test_an_encoding_without_a_docstring_is_listed_with_a_request_for_one():
    """A dataclass without a docstring gets its signature as __doc__ ("Bare(init=0.1)"),
    which `posjax list encodings` printed as if it said what the encoding computes."""
    from posjax.launch import discover

    bare = dataclasses.make_dataclass("Bare", [("init", float, 0.1)],
                                      bases=(encoders.Encoding,), frozen=True)
    assert discover._own_doc(bare) == (
        "(no docstring: say what it computes and cite its source in the class's docstring)")
    assert discover._own_doc(ToyLearnedSlope).startswith("logits_hij += -s_h")


@pytest.mark.parametrize("field", [
    ("scale", float),
    ("slopes", list, dataclasses.field(default_factory=lambda: [0.5, 0.25])),
])
def test_a_hyperparameter_without_a_default_is_refused_at_registration(field):
    """A field with no default (or a default_factory) registered; `posjax list encodings`
    then raised, and a run built the encoding with dataclasses.MISSING as the value."""
    cls = dataclasses.make_dataclass("Required", [field], bases=(encoders.Encoding,),
                                     frozen=True)
    with pytest.raises(TypeError) as refused:
        encoders.register("required_ext")(cls)
    assert str(refused.value) == (
        f"encoding 'required_ext': {field[0]} of Required has no default value, and a config "
        "builds the encoding from its defaults and the arg: give each a default (scale: "
        "float = 1.0; a list as a tuple, slopes: tuple = (0.5, 0.25), not a default_factory)")
    assert "required_ext" not in encoders.names()


@encoders.register("fixed_slopes_ext")
@dataclasses.dataclass(frozen=True)
class FixedSlopesExt(encoders.Encoding):
    """logits_hij += -slopes[h % len(slopes)] |j - i|: ALiBi with slopes from a tuple."""

    slopes: tuple = (0.5, 0.25)

    def bias(self, params, q_pos, k_pos, num_heads):
        slopes = jnp.asarray([self.slopes[h % len(self.slopes)] for h in range(num_heads)])
        r = jnp.abs(k_pos[None, :] - q_pos[:, None]).astype(jnp.float32)
        return -slopes[:, None, None] * r[None]


def test_a_tuple_hyperparameter_reads_back_from_config_json_and_a_layer_pattern(tmp_path):
    """config.json holds a tuple as a JSON list, and `posjax extrapolate` on the run failed
    with "unhashable type: 'list'"; in a layer_pattern, slopes=1+2 reached the encoding as
    the text '1+2'."""
    lm = configlib.load_config_module(LM)
    config = lm.get_config("smoke,encoding=fixed_slopes_ext,slopes=1+0.5+0.25")
    assert config.encoding.slopes == (1.0, 0.5, 0.25)
    fileio.write_json(tmp_path / "config.json", config.to_dict())
    encoding = Experiment.from_workdir(tmp_path).encoding
    assert encoding.slopes == (1.0, 0.5, 0.25)
    hash(encoding)  # a frozen dataclass of lists is not hashable, and jit needs it to be
    assert encoders.get("fixed_slopes_ext", slopes=[1, [2, 3]]).slopes == (1, (2, 3))
    with pytest.raises(ConfigError, match=r"^encoding 'fixed_slopes_ext' slopes=0.5 is not a "
                       r"list of values: give a tuple \(its default is \(0.5, 0.25\)\)$"):
        encoders.get("fixed_slopes_ext", slopes=0.5)
    patterned = Experiment.from_config(
        lm.get_config("smoke,encoding=none,layer_pattern=fixed_slopes_ext(slopes=1+2)+none"))
    first = layer_encodings(patterned.model_config, patterned.encoding)[0]
    assert first.slopes == (1.0, 2.0)


@pytest.mark.parametrize("hyperparameter, what", [
    ("seq_len", "this config file's arg seq_len (seq_len=128 by default)"),
    ("window", "the model field window (config.model.window)"),
])
def test_a_hyperparameter_named_like_an_arg_key_or_a_field_is_refused(hyperparameter, what):
    """A hyperparameter `seq_len` took configs/lm.py's seq_len=128, not its own default,
    with no word (and seq_len=16 set both); one named `window` took the arg's window while
    model.window stayed 0."""
    cls = dataclasses.make_dataclass("Clash", [(hyperparameter, int, 16)],
                                     bases=(encoders.Encoding,), frozen=True)
    encoders.register("clash_ext")(cls)
    try:
        lm = configlib.load_config_module(LM)
        with pytest.raises(ConfigError) as refused:
            lm.get_config("smoke,encoding=clash_ext")
        assert str(refused.value) == (
            f"encoding 'clash_ext' has a hyperparameter '{hyperparameter}', and "
            f"{hyperparameter} is also {what}, so the arg cannot tell them apart: rename the "
            "hyperparameter (in the encoding's dataclass)")
    finally:
        del encoders._REGISTRY["clash_ext"]


EDITED_CONFIG = '''"""A config file with its own encoding, edited between two evaluations."""
import dataclasses
import importlib.util

import jax.numpy as jnp

from posjax import encoders
from posjax.config import load_config_module


@encoders.register("edited_ext")
@dataclasses.dataclass(frozen=True)
class EditedExt(encoders.Encoding):
    """logits_hij += -|j - i| / 8."""

    def bias(self, params, q_pos, k_pos, num_heads):
        r = jnp.abs(k_pos[None, :] - q_pos[:, None]).astype(jnp.float32)
        return jnp.broadcast_to(-r / 8, (num_heads, *r.shape))


def get_config(arg):
    return load_config_module({lm!r}).get_config("smoke,seq_len=32,steps=2,encoding=edited_ext")
'''


def test_rows_scored_before_the_users_encoding_was_edited_are_not_merged(tmp_path, capsys):
    """An edit of one's own encoding between two `posjax extrapolate` commands left rows of
    both versions in one table ("Kept in the file from an earlier command on the same
    checkpoint, data and settings"): a result records its own code's fingerprint. And a
    checkpoint scored with code edited since it trained changed its numbers without a word:
    config.json records the code it trained with, and the evaluation says so."""
    source = tmp_path / "edited.py"
    source.write_text(EDITED_CONFIG.format(lm=LM))
    try:
        trainer.train(configlib.configured(f"{source}:", []), tmp_path / "run", progress=False)
        trained = fileio.read_json(tmp_path / "run" / "config.json")["provenance"]["code_sha1"]
        first = evaluate(tmp_path / "run", lengths=(32,))
        assert first["code_sha1"] == trained  # the evaluation is posjax's own
        assert evaluate(tmp_path / "run", lengths=(64,))["earlier_lengths"] == [32]
        assert "changed since" not in capsys.readouterr().err
        source.write_text(source.read_text() + "# the formula edited\n")
        edited = evaluate(tmp_path / "run", lengths=(64,))
        assert edited["code_sha1"] != first["code_sha1"]
        assert [row["length"] for row in edited["lengths"]] == [64]
        captured = capsys.readouterr()
        now = Experiment.from_workdir(tmp_path / "run").code_sha1()
        assert captured.err.splitlines()[0] == (
            f"warning: {source} changed since {tmp_path / 'run'} trained (code sha1 {trained}, "
            f"now {now}): its checkpoint is scored with the code as it is now")
        assert ("its rows of 32 were scored with another code (your files outside posjax "
                "that define the encoding, model, data or evaluation were edited)") in captured.out
        # a resume says so too, and records the code it trains on with
        trainer.train(configlib.configured(f"{source}:", []), tmp_path / "run", progress=False)
        assert (f"changed since {tmp_path / 'run'} trained (code sha1 {trained}, now {now}): its "
                "checkpoint is trained on with the code as it is now") in capsys.readouterr().err
        assert fileio.read_json(tmp_path / "run" / "config.json")["provenance"][
            "code_sha1"] == now
    finally:
        encoders._REGISTRY.pop("edited_ext", None)


def test_a_run_of_outside_code_trained_on_with_posjax_code_says_so(tmp_path):
    """`train --force` with configs/lm.py on a run that trained through one's own config
    file warned "code sha1 0958a3d352c9, now None": that the code changed, naming no file."""
    fileio.write_json(tmp_path / "config.json", {"provenance": {"code_sha1": "0958a3d352c9"}})
    experiment = Experiment.from_config(configlib.configured(f"{LM}:smoke", []))
    assert experiment.code_changed_line(tmp_path, "trained on") == (
        f"warning: {tmp_path} trained with code outside posjax (code sha1 0958a3d352c9) that "
        "this config does not use: its checkpoint is trained on with posjax's own code")


def test_the_code_fingerprint_is_of_the_files_contents_not_where_they_lie(tmp_path):
    """A file moved (and given with --import, as docs/extending.md says) dropped every row
    scored before the move: the fingerprint hashed the file's path too."""
    from posjax import registry

    def loaded(path, text):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(f"m{abs(hash(str(path)))}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.Thing

    text = "class Thing:\n    def f(self):\n        return 1\n"
    here, moved = loaded(tmp_path / "a" / "t.py", text), loaded(tmp_path / "b" / "u.py", text)
    edited = loaded(tmp_path / "c" / "t.py", text + "# edited\n")
    assert registry.code_sha1([here]) == registry.code_sha1([moved]) != registry.code_sha1(
        [edited])
    assert registry.code_sha1([Experiment]) is None  # posjax's own


IMPORTED_EVALUATION = '''"""An evaluation of the user's own, in a file no run's config imports."""
import numpy as np

from posjax.eval import evaluation


@evaluation.register("imported_ext")
class ImportedExt(evaluation.Evaluation):
    """Loss on a sequence of one repeated byte."""

    own_data = False
    options = ("lengths",)
    columns = (("loss", "loss", ".4f"),)
    stem = "imported"

    def run(self, *, lengths=None) -> dict:
        rows = []
        for length in lengths:
            tokens = np.full((1, length), 65, np.int32)
            batch = {"inputs": tokens[:, :-1], "targets": tokens[:, 1:],
                     "positions": np.arange(length - 1, dtype=np.int32)[None],
                     "segment_ids": np.ones((1, length - 1), np.int32)}
            loss, _ = self.token_losses(self.encoding_at(self.experiment.train_len, length),
                                        batch)
            rows.append({"length": length, "loss": float(loss.mean())})
        return self.result(self.experiment.train_len, rows)

    @classmethod
    def title(cls, result: dict) -> str:
        return "one repeated byte"
'''


def test_extrapolate_imports_a_users_evaluation_for_a_pretrained_snapshot(tmp_path, capsys):
    """docs/extending.md: an evaluation with own_data = False scores "a run or
    --pretrained", but one in a file of the user's own was found only on runs whose config
    file registered it: nothing imported it for a snapshot ("unknown evaluation")."""
    from posjax.launch import cli

    source = tmp_path / "my_evaluation.py"
    source.write_text(IMPORTED_EVALUATION)
    flags = [f"--pretrained={PRETRAINED_FIXTURES / 'llama'}", "--eval=imported_ext", "--lengths=16",
             f"--output={tmp_path / 'imported.json'}"]
    try:
        assert cli.main(["extrapolate", *flags]) == 2
        assert "unknown evaluation 'imported_ext'" in capsys.readouterr().err
        assert cli.main(["extrapolate", *flags, f"--import={source}"]) == 0
        assert "| 16 |" in capsys.readouterr().out
        assert fileio.read_json(tmp_path / "imported.json")["code_sha1"] is not None
        missing = tmp_path / "gone.py"
        assert cli.main(["extrapolate", *flags, f"--import={missing}"]) == 2
        assert capsys.readouterr().err.strip() == (
            f"posjax extrapolate: error: --import={missing}: no such Python file: give the .py "
            "file that registers your code")
        # a folder: it said "no such Python file" of a folder that holds it
        assert cli.main(["extrapolate", *flags, f"--import={source.parent}"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"posjax extrapolate: error: --import={source.parent} is a "
                              "folder: give the .py file in it that registers your code (")
        assert source.name in err
    finally:
        evaluation.EVALUATIONS.pop("imported_ext", None)


def test_plot_draws_a_users_evaluation_column_by_column_and_its_file_is_its_own(
        tmp_path, capsys):
    """A registered evaluation's result was skipped by `posjax plot`, and given itself "is
    not a result posjax wrote"; one with no `stem` wrote extrapolation.json, over the run's
    text result."""
    from posjax.launch import cli

    source = tmp_path / "my_evaluation.py"
    source.write_text(IMPORTED_EVALUATION.replace('    stem = "imported"\n', ""))
    try:
        for name in ("a", "b"):
            assert cli.main(["extrapolate", f"--pretrained={PRETRAINED_FIXTURES / 'llama'}",
                             "--eval=imported_ext", "--lengths=16,32", f"--import={source}",
                             f"--output={tmp_path / name / 'imported_ext.json'}"]) == 0
            assert fileio.read_json(tmp_path / name / "imported_ext.json")["columns"] == [
                ["loss", "loss", ".4f"]]
        assert evaluation.result_name({"evaluation": "imported_ext"}) == "imported_ext.json"
        capsys.readouterr()
        assert cli.main(["plot", str(tmp_path / "a"), str(tmp_path / "b"),
                         f"--output={tmp_path / 'plots'}"]) == 0
        assert (tmp_path / "plots" / "imported_ext.png").is_file()
        table = (tmp_path / "plots" / "imported_ext.md").read_text()
        assert table.startswith("imported_ext: loss by evaluation length\n\n| run | 16 | 32 |")
        assert [line.split(" | ")[0] for line in table.splitlines()[4:6]] == ["| a", "| b"]
        # a point's seeds are one row, mean [min, max], as the text report's (they were a
        # row each under one name)
        for seed in (0, 1):
            shutil.copytree(tmp_path / "a", tmp_path / "seeds" / f"p,seed={seed}")
        assert cli.main(["plot", str(tmp_path / "seeds"), f"--output={tmp_path / 'both'}"]) == 0
        rows = (tmp_path / "both" / "imported_ext.md").read_text().splitlines()
        assert len([row for row in rows if row.startswith("| p |")]) == 1
        assert re.match(r"\| p \| (\d\.\d{4}) \[\1, \1\] \|", rows[4]), rows
        assert "Means over 2 seeds" in rows[-1]
        assert cli.main(["plot", str(tmp_path / "a" / "imported_ext.json"),
                         f"--output={tmp_path / 'one'}"]) == 0
        assert (tmp_path / "one" / "imported_ext.md").is_file()
    finally:
        evaluation.EVALUATIONS.pop("imported_ext", None)


def test_list_and_plot_import_a_file_that_only_registers(tmp_path, capsys):
    """`posjax list evaluations --config=my_eval.py` said "defines no get_config(arg)", and
    list had no --import: a registration-only file (docs/extending.md) was never listed."""
    from posjax.launch import cli

    source = tmp_path / "my_evaluation.py"
    source.write_text(IMPORTED_EVALUATION)
    try:
        assert cli.main(["list", "evaluations", f"--import={source}"]) == 0
        assert "imported_ext" in capsys.readouterr().out
        assert cli.main(["plot", str(tmp_path / "none"), f"--import={source}"]) == 2
        assert "--import" not in capsys.readouterr().err  # the flag is known to plot
    finally:
        evaluation.EVALUATIONS.pop("imported_ext", None)


def test_an_unknown_name_like_none_of_posjaxs_says_where_ones_own_is_registered():
    """`posjax train ...:encoding=my_bias` (the file that registers it not imported) listed
    posjax's encodings only, with no word of how one's own is found."""
    from posjax import encoders

    with pytest.raises(ConfigError, match=r"^unknown encoding 'my_bias'; valid: .*; one of "
                       r"your own: register it in your config file or a module it imports "
                       r"\(docs/extending.md\); posjax train, sweep, extrapolate, list and "
                       r"plot take --import=FILE$"):
        encoders.get("my_bias")
    with pytest.raises(ConfigError) as typo:  # a typo of one of posjax's: the name only
        encoders.get("ropee")
    assert "one of your own" not in str(typo.value)
    with pytest.raises(ConfigError, match=r"; one of your own: give posjax extrapolate "
                       r"--import=FILE, the file that registers it \(docs/extending.md\)$"):
        evaluation.EVALUATIONS.lookup("my_score")
