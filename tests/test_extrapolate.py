"""Grouped evaluation lengths (posjax.eval.extrapolate): the row-length ladder, and packed
evaluation windows scoring exactly as windows alone under every encoding.

Smoke runs evaluated end to end, grouped against ungrouped, are in test_sweep.py (they reuse
its trained runs).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from flax import nnx

from posjax import encoders
from posjax.data import evaluation
from posjax.errors import ConfigError
from posjax.eval import extrapolate, methods
from posjax.launch import cli
from posjax.models import build_model
from posjax.train.steps import eval_token_losses

LM = str(Path(__file__).resolve().parents[1] / "configs" / "lm.py")


# --- the ladder -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lengths", "train_len", "factor", "expected"),
    [
        # The sweep: five lengths, rungs 128, 512, 2048, three row lengths.
        ((128, 256, 512, 1024, 2048), 128, 4, (128, 512, 512, 2048, 2048)),
        ((128, 256, 512, 1024, 2048), 128, 2, (128, 256, 512, 1024, 2048)),
        ((128, 256, 512, 1024, 2048), 128, 1, (128, 256, 512, 1024, 2048)),
        # No rung above the longest length: 1024 keeps its own row rather than 2048.
        ((128, 256, 512, 1024), 128, 4, (128, 512, 512, 1024)),
        # Below the training length: packed into the first rung.
        ((32, 64, 128), 128, 4, (128, 128, 128)),
        # 384 divides no rung (128, 512, 2048): its own row length.
        ((384, 2048), 128, 4, (384, 2048)),
    ],
)
def test_ladder_row_len(lengths, train_len, factor, expected):
    longest = max(lengths)
    got = tuple(extrapolate.ladder_row_len(n, train_len, factor, longest) for n in lengths)
    assert got == expected
    assert all(r % n == 0 for n, r in zip(lengths, got, strict=True))


def test_bad_group_factor_is_a_config_error():
    with pytest.raises(ConfigError, match="group_factor=0 must be >= 1"):
        extrapolate.ladder_row_len(128, 128, 0, 512)
    with pytest.raises(ConfigError, match="group_factor=0"):
        extrapolate.row_lengths({}, 128, 0)


def test_row_lengths_pack_only_lengths_that_share_a_program():
    rope = encoders.get("rope")
    lengths = (128, 256, 512, 1024, 2048)
    shared = extrapolate.row_lengths(dict.fromkeys(lengths, rope), 128, 4)
    assert shared == {128: 128, 256: 512, 512: 512, 1024: 2048, 2048: 2048}
    # A factor per length (ntk at L / L_train) compiles per length anyway: no packing.
    per_length = {n: methods.apply_methods(rope, "ntk", 128, n) for n in lengths}
    assert extrapolate.row_lengths(per_length, 128, 4) == {n: n for n in lengths}


@pytest.mark.parametrize("spec, message", [
    # each of these was scored, its file named as if all of it applied
    ("yarn:4+yarn:2", "--rope_scaling=yarn:4+yarn:2: yarn:4 and yarn:2 both set the frequency "
                      "map, and the second would replace the first"),
    ("linear:4+ntk:2", "linear:4 and ntk:2 both set the frequency map"),
    ("rerope:16+self_extend", "rerope:16 and self_extend both set the two-pass score"),
    ("logn:3", "--rope_scaling=logn:3: logn takes no argument, not logn:3"),
    ("yarn:4:5", "--rope_scaling=yarn:4:5: yarn takes at most 1 (factor), not yarn:4:5"),
    ("self_extend:8:0", "--rope_scaling=self_extend:8:0: the group must be >= 1"),
    # a window of 0 is the encoding's "off": each was scored as plain RoPE under its name
    ("rerope:0", "--rope_scaling's rerope with a window of 0: the window must be >= 1 (0 is "
                 "off: plain RoPE under rerope's name); give one, or drop rerope"),
    ("sinks:4:0", "--rope_scaling's sinks with a window of 0"),
    ("sinks:0", "--rope_scaling's sinks with 0 sink tokens"),
    ("leaky_rerope:-1", "--rope_scaling's leaky_rerope with a window of -1"),
    ("rerope:abc", "--rope_scaling=rerope:abc: rerope:abc's arguments (window) are whole "
                   "numbers"),
    ("sinks:1.5", "sinks:1.5's arguments (tokens:window) are whole numbers"),
    ("leaky_rerope:8.5", "leaky_rerope:8.5's arguments (window:k) are numbers (window a whole "
                         "number)"),
    # nan scored nan everywhere (rc 0); inf gave finite numbers of no method
    ("linear:nan", "rope_scaling 'factor' must be a finite number, got nan"),
    ("yarn:inf", "rope_scaling 'factor' must be a finite number, got inf"),
    ('{"rope_type": "yarn", "factor": NaN}', "must be a finite number, got nan"),
    ("longrope", "longrope needs its per-pair factors, so it is given as its JSON block"),
    # a rope run takes ReRoPE's window; dynamic scaling does not, in either order (after
    # dynamic, each of these said rope runs cannot take a two-pass method at all)
    ("dynamic+rerope", "rope rerope_window cannot combine with dynamic scaling"),
    ("rerope+dynamic", "rope rerope_window cannot combine with dynamic scaling"),
    ("dynamic:2+sinks", "rope rerope_window cannot combine with dynamic scaling"),
])
def test_a_method_spec_that_would_not_all_apply_is_refused(spec, message):
    with pytest.raises(ConfigError) as refused:
        methods.apply_methods(encoders.get("rope"), spec, 128, 512)
    assert message in str(refused.value)


def test_a_longrope_factor_of_zero_is_refused():
    block = ('{"rope_type": "longrope", "factor": 4, "short_factor": [1.0, 0.0], '
             '"long_factor": [1.0, 2.0]}')
    with pytest.raises(ConfigError, match="short_factor holds 0.0: each factor divides"):
        methods.apply_methods(encoders.get("rope"), block, 128, 512)


def test_a_window_at_the_training_length_names_the_method_that_set_it():
    """self_extend:1000:4 was refused as if ReRoPE collapsed. --rope_scaling refuses it in
    its own words; an encoding configured so says which method collapses."""
    with pytest.raises(ConfigError, match="--rope_scaling's self_extend with a window of 1000"):
        methods.apply_methods(encoders.get("rope"), "self_extend:1000:4", 32, 64)
    rope = encoders.get("rope", rerope_window=1000, self_extend_group=4)
    with pytest.raises(ConfigError, match="so Self-Extend collapses to plain RoPE"):
        rope.check(encoders.Dims(d_model=8, num_heads=1, head_dim=8, max_len=32))


def test_group_factor_is_a_typed_config_key():
    fv = cli._flags([f"--config={LM}:smoke", "--config.eval.group_factor=1", "--workdir=unused"],
                    cli._define_train, config=True)
    assert fv.config.eval.group_factor == 1
    assert cli._flags([f"--config={LM}:smoke", "--workdir=unused"], cli._define_train,
                      config=True).config.eval.group_factor == extrapolate.DEFAULT_GROUP_FACTOR


# --- packed windows score as windows alone ---------------------------------------------

V, LENGTH, WINDOWS = 64, 8, 3
TINY = dict(d_model=32, num_layers=1, num_heads=2, head_dim=16, mlp_dim=64, block_size=8)
DYNAMIC = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 4}
# The encodings that read more than a distance: absolute tables and sinusoids (the position),
# FLOATER (an ODE grid of max(array length, hint) positions), xPos (the row's position range),
# FIRE (the query position); RoPE and its variants that read a length or a distance: log-n
# (query position), ReRoPE (capped distance), dynamic NTK (max position + 1). A bias site (t5)
# and the chunked kernel stand for the purely relative rest.
CASES = [
    ("learned", (), "dense"),
    ("sinusoidal", (), "dense"),
    ("floater", (), "dense"),
    ("xpos", (), "dense"),
    ("fire", (), "dense"),
    ("rope", (("logn_train_len", 4),), "dense"),
    ("rope", (("rerope_window", 2),), "dense"),
    ("rope", (("scaling", DYNAMIC),), "chunked"),
    ("t5", (), "chunked"),
    ("rope", (), "dense", "mlm"),  # bidirectional: segments are what keeps windows apart
]


def _windows() -> list[dict]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(WINDOWS):
        tokens = rng.integers(0, V, LENGTH + 1).astype(np.int32)
        out.append({
            "inputs": tokens[:-1], "targets": tokens[1:],
            "positions": np.arange(LENGTH, dtype=np.int32),
            "segment_ids": np.ones(LENGTH, np.int32), "weights": np.ones(LENGTH, np.float32),
        })  # fmt: skip
    return out


@pytest.mark.slow
@pytest.mark.parametrize(("name", "hparams", "impl", "kind"),
                         [(*c, "causal_lm")[:4] for c in CASES])
def test_packed_windows_score_as_windows_alone(name, hparams, impl, kind):
    # Three windows of 8 in one row of 32 (the fourth slot padding) against three rows of 8.
    encoding = encoders.get(name, **dict(hparams))
    model = build_model(dict(TINY, attention=impl), encoding, kind=kind, vocab_size=V,
                        num_classes=0, patch_dim=0, max_len=16, rngs=nnx.Rngs(0))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    windows = _windows()
    alone = {k: np.stack([w[k] for w in windows]) for k in windows[0]}
    (row,) = evaluation.pack_windows(iter(windows), LENGTH, 4 * LENGTH)
    packed = {k: v[None] for k, v in row.items()}
    run = lambda batch: np.asarray(eval_token_losses(  # noqa: E731
        params, rest, batch, graphdef=graphdef, input_key="inputs")[0])
    expected = run(alone)
    got = run(packed)[0, : WINDOWS * LENGTH].reshape(WINDOWS, LENGTH)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


# --- what a result says about the checkpoint it scored ------------------------------------


def test_a_run_stopped_early_is_scored_at_its_last_checkpoint_and_says_so(
        tmp_path, data_flags, capsys):
    """A run whose budget is 8 steps but whose last checkpoint is step 4 (killed there):
    the table and extrapolation.json say which step was scored and that training did not
    finish; once trained to the end, the same command says it finished."""
    from posjax import fileio

    run = tmp_path / "run"
    train = ["train", f"--config={LM}:smoke,seq_len=32,batch_size=8,steps=4", f"--workdir={run}",
             "--noprogress", *data_flags]
    assert cli.main(train) == 0
    config = fileio.read_json(run / "config.json")
    config["train"]["stages"] = [[32, 8, 8]]  # as if killed after step 4 of 8
    fileio.write_json(run / "config.json", config)
    capsys.readouterr()
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=32,64"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["**smoke run: checks the set-up, not a result**", ""]  # lm.py:smoke
    assert out[3] == ("evaluated at step 4 of 8: training did not finish (re-run posjax train "
                      "with the same --workdir to finish it, then evaluate again)")
    assert [line.split(" | ")[0] for line in out[-3:-1]] == ["| 32", "| 64"]
    assert out[-1] == f"wrote {run / 'extrapolation.json'}"  # where the result went
    result = fileio.read_json(run / "extrapolation.json")
    assert (result["step"], result["total_steps"]) == (4, 8)
    config["train"]["stages"] = [[32, 8, 4]]
    fileio.write_json(run / "config.json", config)
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=128"]) == 0
    assert capsys.readouterr().out.splitlines()[3] == (
        "evaluated at step 4 of 4 (training finished)")
    # the rows of 32 and 64 are of the same checkpoint, so they are kept beside 128
    assert [row["length"] for row in fileio.read_json(run / "extrapolation.json")["lengths"]] == [
        32, 64, 128]


def test_another_learned_extension_writes_its_own_file_and_a_table_without_one_is_refused(
        tmp_path, data_flags, capsys):
    """`--learned_extension=` on a learned run replaced its extrapolation.json (lengths 128 and
    256 with Su's extension) by one row without it; on a RoPE run, which has no table, the
    flag was accepted and recorded."""
    from posjax import fileio
    from posjax.results import plots

    run = tmp_path / "learned"
    assert cli.main(["train", f"--config={LM}:smoke,encoding=learned,seq_len=32,steps=2",
                     f"--workdir={run}", "--noprogress", *data_flags]) == 0
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=32,64"]) == 0
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=32",
                     "--learned_extension="]) == 0
    own = fileio.read_json(run / "extrapolation.json")
    assert [row["length"] for row in own["lengths"]] == [32, 64]
    assert own["learned_extension"] == "hierarchical"
    bare = fileio.read_json(run / "extrapolation_ext-none.json")
    assert [row["length"] for row in bare["lengths"]] == [32]
    # "none" says the same (it was taken for NoPE, which extends no table, and refused)
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=16",
                     "--learned_extension=none"]) == 0
    bare = fileio.read_json(run / "extrapolation_ext-none.json")
    assert [row["length"] for row in bare["lengths"]] == [16, 32]
    plots.plot_sweep([run])
    table = (run / "extrapolation.md").read_text()
    assert "| learned |" in table and "| learned +no extension |" in table
    rope = tmp_path / "rope"
    assert cli.main(["train", f"--config={LM}:smoke,seq_len=32,steps=2", f"--workdir={rope}",
                     "--noprogress", *data_flags]) == 0
    capsys.readouterr()
    assert cli.main(["extrapolate", f"--workdir={rope}", "--learned_extension=hierarchical"]) == 2
    assert capsys.readouterr().err.strip() == (
        "posjax extrapolate: error: --learned_extension=hierarchical extends a learned table "
        "past its length, and rope has no position limit: drop it")
    # its result recorded configs/lm.py's "hierarchical", an extension it never applied;
    # and --learned_extension= (none, as it has) wrote a file of its own
    assert cli.main(["extrapolate", f"--workdir={rope}", "--lengths=32",
                     "--learned_extension="]) == 0
    assert fileio.read_json(rope / "extrapolation.json")["learned_extension"] is None
    assert not (rope / "extrapolation_ext-none.json").exists()


def test_another_softmax_kernel_scores_a_run_as_its_own_past_what_dense_memory_reaches(
        tmp_path, data_flags, capsys, monkeypatch, one_error_line):
    """A run trained with attention=dense was refused at a length whose [L, L] scores do not
    fit, with the fix "set model.attention=chunked", which posjax extrapolate had no way to
    take: --attention=chunked scores it, the same scores, in O(L) memory."""
    from posjax import experiment as experiment_module
    from posjax import fileio
    from posjax.experiment import Experiment

    run = tmp_path / "dense"
    assert cli.main(["train", f"--config={LM}:smoke,encoding=alibi,seq_len=32,steps=2",
                     "--config.model.attention=dense", f"--workdir={run}", "--noprogress",
                     *data_flags]) == 0
    scored = {}
    for kernel in ("dense", "chunked"):
        out = tmp_path / f"{kernel}.json"
        assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=32,256",
                         "--max_tokens=600", f"--attention={kernel}", f"--output={out}"]) == 0
        scored[kernel] = [row["loss"] for row in fileio.read_json(out)["lengths"]]
        assert fileio.read_json(out)["attention"] == kernel  # which kernel scored it
    np.testing.assert_allclose(scored["chunked"], scored["dense"], rtol=2e-5)
    experiment = Experiment.from_workdir(run)
    batch = int(experiment.config.eval.batch_size)
    chunked_floor = experiment.memory_floor(256, batch, training=False) - (
        experiment.dense_score_bytes(256, batch, training=False))
    monkeypatch.setattr(experiment_module, "device_memory", lambda: chunked_floor + 1)
    capsys.readouterr()
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=32,256",
                     "--max_tokens=600", f"--output={tmp_path / 'refused.json'}"]) == 2
    line = one_error_line()
    assert line.startswith(f"posjax extrapolate: error: scoring length 256 at batch {batch} "
                           "needs at least "), line
    assert line.endswith("score with chunked attention (posjax extrapolate "
                         "--attention=chunked) (O(L) memory: no [L, L] scores), or lower the "
                         "length"), line
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=32,256", "--max_tokens=600",
                     "--attention=chunked", f"--output={tmp_path / 'fits.json'}"]) == 0
    capsys.readouterr()
    from posjax import attention

    # the softmax kernels that carry the run's alibi (a test's registered kernel may not)
    alibi = experiment.encoding
    softmax = [name for name, kernel in attention.IMPLS.items()
               if kernel.softmax and kernel.carries(alibi)]
    assert {"dense", "chunked", "fused", "flash_bias", "auto"} <= set(softmax)
    assert "linear" not in softmax
    for kernel, message in (
            ("linear", f"--attention=linear computes another attention than the softmax {run} "
                       f"was trained with: give one of {', '.join(softmax)}, or drop "
                       "--attention"),
            ("bogus", "unknown attention implementation 'bogus'; valid: auto, chunked, dense, "
                      "flash_bias, fused, linear")):
        assert cli.main(["extrapolate", f"--workdir={run}", f"--attention={kernel}"]) == 2
        assert one_error_line().startswith(f"posjax extrapolate: error: {message}")


def test_a_method_that_would_change_nothing_or_that_the_kernel_cannot_carry_says_what_fits(
        tmp_path, data_flags, capsys, one_error_line):
    """On a model whose sliding window (8) hides every distance past ReRoPE's window, rerope
    scored the run unchanged under its name; refusals named the run's model.attention where
    --attention had chosen the kernel, and offered kernels the encoding cannot go through;
    `--rope_scaling=none`, the name results give no method, was an unknown method."""
    from posjax import fileio

    run, fire = tmp_path / "windowed", tmp_path / "fire"
    for workdir, arg in ((run, "encoding=rope,window=8"), (fire, "encoding=fire")):
        assert cli.main(["train", f"--config={LM}:smoke,{arg},seq_len=32,steps=2",
                         f"--workdir={workdir}", "--noprogress", *data_flags]) == 0
    out = f"--output={tmp_path / 'scored.json'}"
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=64", "--rope_scaling=rerope",
                     out]) == 2
    assert one_error_line() == (
        "posjax extrapolate: error: --rope_scaling=rerope acts on keys past its window of 16 "
        "tokens, and every layer of this run sees at most 8 (its sliding window, "
        "model.window): it would score the run unchanged: give the method a window below 8 "
        "(rerope:4), or drop --rope_scaling")
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=64",
                     "--rope_scaling=rerope:4", "--attention=fused", out]) == 2
    assert one_error_line().startswith(
        "posjax extrapolate: error: --rope_scaling=rerope:4 gives rope a score "
        "attention='fused' (the run's model.attention, or --attention) cannot carry (its "
        "rel_score site): score with --attention=dense|chunked|auto, use one of ")
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=64",
                     "--rope_scaling=rerope:4", "--attention=chunked", out]) == 0
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=64", "--rope_scaling=none",
                     out]) == 0
    assert fileio.read_json(tmp_path / "scored.json")["method"] == "none"
    capsys.readouterr()
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=64", out,
                     '--rope_scaling={"rope_type": "yarn",\n    "factor": 2}']) == 0
    method = '{"rope_type": "yarn", "factor": 2}'  # one line, in the title and the file
    assert f"method {method})\n" in capsys.readouterr().out
    assert fileio.read_json(tmp_path / "scored.json")["method"] == method
    assert cli.main(["extrapolate", f"--workdir={fire}", "--attention=linear", out]) == 2
    assert one_error_line() == (
        "posjax extrapolate: error: --attention=linear computes another attention than the "
        f"softmax {fire} was trained with: give one of dense, chunked, fused, auto, or drop "
        "--attention")


def test_a_method_that_replaces_the_runs_trained_scaling_says_so(tmp_path, data_flags,
                                                                   capsys):
    """A run trained with PI (scaling=linear:4) scored with --rope_scaling=yarn:2 lost its
    PI without a word (--rope_scaling=linear:4 scored as no flag did), the title saying only
    `method yarn:2`."""
    from posjax import fileio

    run = tmp_path / "pi"
    assert cli.main(["train", f"--config={LM}:smoke,encoding=rope,scaling=linear:4,seq_len=32,"
                     "batch_size=8,steps=2", f"--workdir={run}", "--noprogress",
                     *data_flags]) == 0
    capsys.readouterr()
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=32",
                     "--rope_scaling=yarn:2"]) == 0
    out, err = capsys.readouterr()
    assert ("posjax: --rope_scaling=yarn:2 replaces the scaling the model was trained with "
            "(linear:4), not adds to it: scored without --rope_scaling, the model keeps its "
            "own") in err
    assert "pi (trained at 32, nonoverlapping, method yarn:2, in place of the trained " \
           "scaling linear:4)" in out
    assert fileio.read_json(run / "extrapolation_yarn-2.json")["replaced_scaling"] == "linear:4"
    assert cli.main(["extrapolate", f"--workdir={run}", "--lengths=32"]) == 0
    assert "replaces" not in capsys.readouterr().err


def test_rows_of_another_run_in_a_shared_output_file_are_replaced_not_merged(
        tmp_path, data_flags, capsys):
    """`--output=FILE` of a second run kept the first run's rows of lengths it did not score
    ("Kept in the file from an earlier command on the same checkpoint"), under the second
    run's name and encoding."""
    from posjax import fileio

    shared = tmp_path / "shared.json"
    for encoding, lengths in (("rope", "32,64"), ("alibi", "128")):
        run = tmp_path / encoding
        assert cli.main(["train", f"--config={LM}:smoke,encoding={encoding},seq_len=32,"
                         "batch_size=8,steps=2", f"--workdir={run}", "--noprogress",
                         *data_flags]) == 0
        assert cli.main(["extrapolate", f"--workdir={run}", f"--lengths={lengths}",
                         f"--output={shared}"]) == 0
    out = capsys.readouterr().out
    assert "Kept in the file" not in out
    assert (f"Replaced {shared} whole: its rows of 32, 64 were scored with another run, "
            "run config\n") in out
    result = fileio.read_json(shared)
    assert result["encoding"]["name"] == "alibi"
    assert [row["length"] for row in result["lengths"]] == [128]
    assert result["code_sha1"] is None  # posjax's own code alone


@pytest.mark.parametrize(("key", "value", "same_run"), [
    # two sweeps' seq_len=32,seed=0 at two learning rates shared a fingerprint, so a shared
    # --output merged their rows as "the same checkpoint"
    ("train.learning_rate", 0.05, False),
    ("train.optimizer", "sgd", False),
    ("train.warmup_steps", 1, False),
    ("train.weight_decay", 0.5, False),
    ("train.seed", 3, False),
    ("model.d_model", 64, False),
    # what only observes a run, and its budget (which --force may change mid-run)
    ("train.log_every_steps", 1, True),
    ("train.checkpoint_every_steps", 1, True),
    ("data.data_dir", "/elsewhere", True),
    ("train.stages", ((32, 4, 99),), True),
])
def test_a_runs_fingerprint_tells_apart_what_changes_its_training(key, value, same_run):
    from posjax import config as configlib
    from posjax.eval.evaluation import _run_fingerprint

    config = configlib.load_config_module(LM).get_config("smoke")
    changed = configlib.load_config_module(LM).get_config("smoke")
    section, field = key.split(".")
    changed[section][field] = value
    assert (_run_fingerprint(changed) == _run_fingerprint(config)) is same_run


@pytest.mark.parametrize("spec, message", [
    ("pi:4", "--rope_scaling=pi:4: Position Interpolation (Chen et al. 2023) is linear here, "
             "as in Hugging Face's rope_scaling: linear:FACTOR"),
    ("ntk-aware:4", "--rope_scaling=ntk-aware:4: NTK-aware scaling is ntk here: ntk:FACTOR"),
    ("YARN:4", "unknown length-extension method 'YARN' (did you mean 'yarn'?)"),
    # "unknown length-extension method ''"
    ("yarn:4+", "--rope_scaling=yarn:4+ has an empty method: join each two with one +"),
    ("+logn", "--rope_scaling=+logn has an empty method"),
])
def test_a_method_under_another_name_names_posjaxs(spec, message):
    with pytest.raises(ConfigError) as raised:
        methods.apply_methods(encoders.get("rope"), spec, 128, 512)
    assert str(raised.value).startswith(message)


def test_a_file_that_recorded_hierarchical_for_an_encoding_with_no_table_is_added_to():
    """Results written before 2026-12-01 record the run's learned_extension ("hierarchical")
    for RoPE too, which a new result leaves out: a re-score of other lengths replaced such
    a file whole, saying its rows were scored with another learned_extension."""
    from posjax.eval import evaluation

    same = {"run": "r", "evaluation": "text", "method": "none", "train_len": 32, "step": 6}
    old = {**same, "learned_extension": "hierarchical",
           "lengths": [{"length": 32, "ppl": 3.0}]}
    new = {**same, "learned_extension": None, "lengths": [{"length": 64, "ppl": 4.0}]}
    merged = evaluation._merged(old, new)
    assert [row["length"] for row in merged["lengths"]] == [32, 64]
    assert evaluation._replaced_line(old, merged, Path("extrapolation.json")) is None
    # an extension the user chose for a table is a setting of its own still
    table = {**old, "learned_extension_given": True, "learned_extension": "linear"}
    assert evaluation._merged(table, new) == new


def test_results_of_one_name_in_two_folders_get_two_tensorboard_tags(tmp_path):
    """--output=out/mytxt.json and --output=/abs/mytxt.json of one run wrote their numbers
    into the run's TensorBoard under one tag, mytxt/ppl: one chart for two results."""
    from posjax.eval.evaluation import event_tag

    run = tmp_path / "run"
    assert event_tag(run / "extrapolation.json", run) == "extrapolation"
    assert event_tag(run / "mytxt.json", run) == "mytxt"
    elsewhere = {event_tag(tmp_path / folder / "mytxt.json", run) for folder in ("out", "abs")}
    assert len(elsewhere) == 2 and all(tag.startswith("mytxt-") for tag in elsewhere)
