"""What the arg names is what trains, or one line says why not: DroPE's RoPE stage keeps the
rope hyperparameters given beside drope=F, a stage's encoding takes layer_pattern's
NAME(KEY=VALUE) grammar, and an encoding or hyperparameter that a layer pattern leaves to no
layer is refused (each trained something else under the given name, with rc 0)."""

from __future__ import annotations

from pathlib import Path

import pytest
from flax import nnx

from posjax.errors import ConfigError
from posjax.experiment import Experiment, stage_encoding
from posjax.models.layers import Attention

LM = str(Path(__file__).resolve().parents[1] / "configs" / "lm.py")


def _experiment(arg: str) -> Experiment:
    from configs.lm import get_config

    return Experiment.from_config(get_config(arg))


def test_dropes_rope_stage_keeps_the_rope_hyperparameters_of_the_arg():
    """drope=0.1,theta=100 trained RoPE at theta 10000: the 100 was in no saved field."""
    experiment = _experiment("drope=0.1,theta=100,fraction=0.5,smoke")
    assert tuple(experiment.config.train.stage_encodings) == ("rope(theta=100.0,fraction=0.5)", "")
    first, last = (experiment.stage_encoding(s) for s in experiment.stages)
    assert (first.name, first.theta, first.fraction) == ("rope", 100.0, 0.5)
    assert last is experiment.encoding and last.name == "none"
    # none given: the bare name, as every recorded DroPE run has it
    assert tuple(_experiment("drope=0.1,smoke").config.train.stage_encodings) == ("rope", "")


@pytest.mark.parametrize("entry, message", [
    ("rope(thta=100)", "train.stage_encodings entry 'rope(thta=100)': rope has no setting "
                       "'thta' (did you mean 'theta'?)"),
    ("rope+alibi", "train.stage_encodings entry 'rope+alibi' names 2 encodings: give one per "
                   "stage, NAME or NAME(KEY=VALUE,...)"),
    ("ropee", "unknown encoding in train.stage_encodings 'ropee' (did you mean 'rope'?)"),
    ("rope(theta=x)", "train.stage_encodings entry 'rope(theta=x)': theta='x' is not"),
])
def test_a_stage_encoding_it_cannot_build_is_one_line(entry, message):
    with pytest.raises(ConfigError) as error:
        stage_encoding(entry)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


@pytest.mark.parametrize("arg, message", [
    ("encoding=alibi,layer_pattern=rope+none,smoke",
     "encoding 'alibi' reaches no layer of model.layer_pattern='rope+none', whose entries name "
     "rope, none: name 'alibi' in the pattern for its attention layers, or set "
     "encoding=rope/none"),
    ("arch=gemma4,encoding=alibi,smoke",
     "encoding 'alibi' reaches no layer of model.layer_pattern='rope(theta=1e4)*5+rope(theta=1e6,"
     "p=0.25,window=0)', whose entries name rope: name 'alibi' in the pattern for its attention "
     "layers, or set encoding=rope"),
    # NoPE names the layers without positions: all six were RoPE, labelled none
    ("arch=gemma3,encoding=none,smoke",
     "encoding 'none' reaches no layer of model.layer_pattern='rope(theta=1e4)*5+rope(theta=1e6,"
     "window=0)', whose entries name rope: name 'none' in the pattern for its attention "
     "layers, or set encoding=rope"),
    # DroPE's NoPE stage kept the pattern's RoPE layers (at theta 10000, not the arg's 500)
    ("drope=0.1,theta=500,arch=swan,window=32,smoke",
     "train.stage_encodings=('rope(theta=500.0)', '') switches the encoding per stage, and "
     "model.layer_pattern='rope*3+none(window=0)' names each layer's encoding, which no stage "
     "switches (DroPE's stage without positions would keep the pattern's rope layers): drop "
     "the pattern (arch=, layer_pattern=) or the stage encodings (drope=)"),
    ("arch=gemma4,theta=500,smoke",
     "encoding 'rope' theta=500.0 reaches no layer: every rope entry of model.layer_pattern="
     "'rope(theta=1e4)*5+rope(theta=1e6,p=0.25,window=0)' sets its own theta; drop theta=, or "
     "write it into the pattern's entries"),
])
def test_what_a_layer_pattern_leaves_to_no_layer_is_refused_before_training(tmp_path, capsys,
                                                                            arg, message):
    """Each trained RoPE/NoPE with rc 0, its config.json naming ALiBi or theta 500."""
    from posjax.launch import cli

    assert cli.main(["train", f"--config={LM}:{arg}", f"--workdir={tmp_path / 'run'}"]) == 2
    assert capsys.readouterr().err.strip() == f"posjax train: error: {message}"
    assert not (tmp_path / "run" / "config.json").exists()


def test_a_pattern_that_names_the_encoding_or_keeps_its_default_still_builds():
    """The refusals leave the documented schedules alone: gemma4 at its default theta, and an
    encoding given its own hyperparameter that one entry keeps (RNoPE's rope on 4 layers)."""
    assert _experiment("arch=gemma4,smoke").encoding.name == "rope"
    experiment = _experiment("encoding=rope,theta=500,layer_pattern=rope+rope(theta=1e6),smoke")
    from posjax.models.transformer import layer_encodings

    thetas = [e.theta for e in layer_encodings(experiment.model_config, experiment.encoding)]
    assert thetas[:2] == [500.0, 1e6]


@pytest.mark.parametrize("arg, windowed", [("arch=gemma3,window=8,smoke", 5),
                                           ("arch=swan,window=8,smoke", 0),
                                           ("encoding=rope,smoke", 0)])
def test_a_method_on_windowed_rope_layers_says_it_scales_them_too(tmp_path, capsys, arg,
                                                                    windowed):
    """--rope_scaling on arch=gemma3 turned its five local layers too, without a word, where
    Gemma's own code leaves them unscaled; where every RoPE layer slides (arch=swan, its
    global layer NoPE) +global_only would scale none, and the line says what changes."""
    from posjax.eval.evaluation import EVALUATIONS
    from posjax.eval.weights import InMemory

    experiment = _experiment(arg)
    EVALUATIONS["text"](experiment, tmp_path, InMemory(0, experiment.abstract().params),
                        name="text", rope_scaling="yarn:4")
    notes = [line for line in capsys.readouterr().err.splitlines() if "sliding" in line]
    assert notes == ([f"posjax: --rope_scaling=yarn:4 applies to every RoPE layer, the "
                      f"{windowed} with a sliding window too (Gemma 3's and Gemma 4's own code "
                      "leave their local layers' RoPE unscaled: "
                      "--rope_scaling=yarn:4+global_only)"] if windowed else
                     ["posjax: --rope_scaling=yarn:4 turns 3 RoPE layers, each with a sliding "
                      "window (the full-attention layers take no RoPE, as SWAN-GPT's, Command "
                      "R7B's and EXAONE 4's), so it changes angles within the window only"]
                     if "swan" in arg else [])


@pytest.mark.parametrize("spec", ["yarn:4+global_only", "global_only+logn",
                                  '{"rope_type": "linear", "factor": 8}+global_only'])
def test_global_only_scores_the_windowed_layers_with_the_trained_encoding(tmp_path, capsys,
                                                                          spec):
    """Gemma 3 scales its global layers' RoPE alone; posjax scaled every RoPE layer, with
    no setting to do otherwise. The windowed layers of the model scored keep the run's
    encoding (their entries' settings over it), the others take the methods."""
    from posjax.eval import methods
    from posjax.eval.evaluation import EVALUATIONS
    from posjax.eval.weights import InMemory

    experiment = _experiment("arch=gemma3,window=8,smoke")
    evaluation = EVALUATIONS["text"](experiment, tmp_path,
                                     InMemory(0, experiment.abstract().params), name="text",
                                     rope_scaling=spec)
    assert "sliding" not in capsys.readouterr().err
    applied = methods.apply_methods(experiment.encoding, spec, 128, 512)
    assert applied != experiment.encoding
    layers = methods.attention_layers(experiment, applied, spec)
    trained = methods.attention_layers(experiment, experiment.encoding, "")
    for (scored, window), (own, _) in zip(layers, trained, strict=True):
        assert (scored == own) == (window > 0), (scored, own)
    assert evaluation.window_encoding == experiment.encoding
    # and the model it scores with: the five local layers as trained, the global one not
    model = experiment.evaluation_model(applied, evaluation.window_encoding)
    built = [layer.encoding for _, layer in nnx.iter_graph(
        nnx.merge(model.graphdef, model.params, model.rest)) if isinstance(layer, Attention)]
    assert [e == own for e, (own, _) in zip(built, trained, strict=True)] == [True] * 5 + [False]


def test_global_only_scores_differently_from_every_layer_and_writes_its_own_file(tmp_path):
    from posjax.eval.evaluation import EVALUATIONS, result_name
    from posjax.eval.weights import InMemory

    experiment = _experiment("arch=gemma3,window=8,smoke")
    params = experiment.build().params
    losses = {}
    for spec in ("", "yarn:4", "yarn:4+global_only"):
        evaluation = EVALUATIONS["text"](experiment, tmp_path, InMemory(0, params), name="text",
                                         rope_scaling=spec)
        result = evaluation.run(lengths=(256,), max_tokens=1024)
        losses[spec] = result["lengths"][0]["loss"]
    assert len(set(losses.values())) == 3, losses
    assert result_name(result) == "extrapolation_yarn-4+global_only.json"


def test_a_run_whose_config_scores_with_global_only_is_checked_before_it_trains():
    """config.eval.rope_scaling is posjax extrapolate's default for the run: a global_only
    that changes nothing there is refused before training, not when the run is scored."""
    from posjax.eval import methods

    windowed = _experiment("arch=gemma3,window=8,smoke")
    windowed.config.eval.rope_scaling = "yarn:4+global_only"
    methods.check_config(windowed)
    plain = _experiment("encoding=rope,smoke")
    plain.config.eval.rope_scaling = "yarn:4+global_only"
    with pytest.raises(ConfigError, match=r"^eval.rope_scaling='yarn:4\+global_only', the "
                       r"default of posjax extrapolate's --rope_scaling: --rope_scaling=yarn:4"
                       r"\+global_only: global_only leaves the RoPE layers with a sliding "
                       r"window as trained, and this run has no RoPE layer with a sliding "
                       r"window: drop \+global_only$"):
        methods.check_config(plain)


def test_global_only_where_it_changes_nothing_is_refused_in_one_line(tmp_path):
    from posjax.eval.evaluation import EVALUATIONS
    from posjax.eval.weights import InMemory

    prefix = "--rope_scaling=yarn:4+global_only: global_only "
    for arg, why in (
            ("encoding=rope,smoke", "leaves the RoPE layers with a sliding window as trained, "
                                    "and this run has no RoPE layer with a sliding window"),
            ("encoding=rope,window=8,smoke", "leaves the RoPE layers with a sliding window as "
                                             "trained, and this run has a sliding window on "
                                             "every RoPE layer"),
            ("arch=gemma3,window=8,learned_freqs=true,share_position_params=true,smoke",
             "gives the layers with a sliding window an encoding of their own, and this run "
             "shares one copy of rope's parameters across its layers "
             "(model.share_position_params)")):
        experiment = _experiment(arg)
        with pytest.raises(ConfigError) as refused:
            EVALUATIONS["text"](experiment, tmp_path, InMemory(0, experiment.abstract().params),
                                name="text", rope_scaling="yarn:4+global_only")
        assert str(refused.value) == f"{prefix}{why}: drop +global_only"


def test_a_window_no_shorter_than_the_rows_is_named_as_training_starts():
    """arch=gemma3 at seq_len 128 kept the preset's window of 1024: its local layers trained
    as global ones, without a word."""
    from posjax.train.trainer import window_lines

    (line,) = window_lines(_experiment("arch=gemma3,smoke"))
    assert line.startswith("posjax train: a sliding window of 1024 tokens (model.window, or a "
                           "layer_pattern entry's) is not shorter than the longest training "
                           "rows (128): its layers train as global ones")
    assert window_lines(_experiment("arch=gemma3,window=32,smoke")) == []
    assert window_lines(_experiment("encoding=rope,smoke")) == []


def test_a_result_names_the_layer_schedule_and_window_it_scored(tmp_path):
    """An arch=gemma3 run's extrapolation.json said plain rope at theta 10000, naming neither
    its schedule nor its window (config.json alone had them)."""
    from posjax.eval.evaluation import EVALUATIONS
    from posjax.eval.weights import InMemory

    for arg, recorded in (("arch=gemma3,window=8,smoke", {
            "layer_pattern": "rope(theta=1e4)*5+rope(theta=1e6,window=0)", "window": 8}),
                          ("encoding=rope,smoke", {})):
        experiment = _experiment(arg)
        result = EVALUATIONS["text"](experiment, tmp_path, InMemory(0, experiment.abstract(
        ).params), name="text").result(128, [])
        assert {k: result[k] for k in ("layer_pattern", "window") if k in result} == recorded
