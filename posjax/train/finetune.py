"""Starting a run from another run's parameters: fine-tuning a pretrained encoder.

`train.init_from = RUN` (a run directory, e.g. a run of configs/mlm.py) makes a fresh run
start from RUN's latest checkpoint instead of its own initialisation, parameter by parameter:

* a parameter whose name (its path in the model) is in RUN's checkpoint takes RUN's value:
  the token embedding, every layer and the encoding's parameters of an MLM encoder, whose
  body the classifier (posjax.models.Classifier) shares name for name;
* a learned position table (an encoding's parameter whose first axis alone differs) takes
  RUN's first rows when this run reads fewer positions; reading more positions than RUN
  trained is a ConfigError (those rows were never trained: BERT's 512-token limit);
* a parameter RUN does not have (the classifier's pooler and head) keeps this run's seeded
  initialisation; RUN's parameters this model has no place for (the MLM head) are left.

Only a run's start reads RUN, which must have finished training and be in use by no other
process: a resumed run restores its own checkpoint, which replaces the whole state. The
encoder must be RUN's: every parameter of the token embedding and the backbone must be
found, or the error names the first missing one.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax.numpy as jnp
from flax import nnx, traverse_util

from posjax.errors import ConfigError, missing_folder
from posjax.experiment import Experiment, Model
from posjax.models import model_kind
from posjax.runlock import RunLock
from posjax.train import distributed
from posjax.train.checkpoint import restore_params

# The parameters a fine-tuned model must find in the run it starts from (its encoder).
ENCODER_PARTS = ("embed", "backbone")


def check_encoder_run(where: str, kind: str, init_from: str = "") -> None:
    """A one-line ConfigError where the run a classifier starts from (`where`, e.g.
    "pretrained=RUN") is no masked-LM encoder (its model.kind `kind`): the classifier shares
    an MLM encoder's bidirectional body, and a causal LM's or a fine-tune's parameters would
    load into it name for name without a word. init_from: a fine-tune's own start."""
    source = model_kind(kind)
    if source.fine_tune:
        raise ConfigError(f"{where} is itself a fine-tune (model.kind={kind}): give the "
                          f"MLM run it started from ({init_from or 'an MLM run'})")
    if not source.masked_lm:
        raise ConfigError(f"{where} is a {kind} run: doc_match fine-tunes a masked-LM encoder, "
                          "whose bidirectional body the classifier shares; pretrain one with "
                          "posjax train --config=configs/mlm.py")


def _name(path: tuple) -> str:
    return ".".join(map(str, path))


def start_from(experiment: Experiment, model: Model) -> Model:
    """`model` (freshly built) with the parameters of `train.init_from`'s run where names
    and shapes match (module doc); `model` itself when train.init_from is empty."""
    source = str(experiment.config.train.get("init_from", "") or "")
    if not source:
        return model
    if not Path(source).is_dir():
        raise missing_folder(source, "train.init_from names a trained run directory (e.g. a "
                                     "run of configs/mlm.py)")
    pretrained = Experiment.from_workdir(source)
    # in the words of both ways to give it: configs/finetune.py's pretrained=RUN sets a
    # fine-tune's train.init_from
    given = (f"the pretrained run {source} (train.init_from)"
             if experiment.model_class.fine_tune else f"train.init_from={source}")
    if experiment.model_class.fine_tune:
        check_encoder_run(given, pretrained.config.model.kind,
                          pretrained.config.train.get("init_from", ""))
    lock = RunLock(source)  # only looked at: the run's folder may be read-only
    if lock.held():  # still training, or being scored: not read mid-way
        raise ConfigError(f"{given} is in use by {lock.holder()}: wait for "
                          "it to finish, then re-run this command")
    step, params = restore_params(pretrained, source)
    if step < pretrained.total_steps:
        raise ConfigError(
            f"{given} has trained {step} of its {pretrained.total_steps} "
            "steps: finish it first (re-run its posjax train command), or start from a run "
            "that finished")
    _say_unseen_positions(experiment, pretrained, given)
    theirs = traverse_util.flatten_dict(nnx.to_pure_dict(params))
    mine = traverse_util.flatten_dict(nnx.to_pure_dict(model.params))
    merged = {}
    for path, value in mine.items():
        other = theirs.get(path)
        if other is None:
            if path[0] in ENCODER_PARTS:
                ours, its = experiment.encoding.name, pretrained.encoding.name
                why = (f"it was trained with encoding={its}, this run has {ours}" if ours != its
                       else "this model has other sizes: more layers, or other parts")
                raise ConfigError(
                    f"{given}: its checkpoint has no parameter "
                    f"{_name(path)} that this model's encoder has ({why}): fine-tune with the "
                    "pretrained run's encoding and model sizes")
            merged[path] = value
            continue
        merged[path] = _fitted(path, other, value, given)
    state = model.params
    nnx.replace_by_pure_dict(state, traverse_util.unflatten_dict(merged))
    return Model(model.graphdef, state, model.rest)


def _say_unseen_positions(experiment: Experiment, pretrained: Experiment, given: str) -> None:
    """A note where this run reads longer rows than any the pretrained run trained on: the
    positions past them are the encoding's to carry (RoFormer's long-text claim for RoPE),
    where a learned table refuses them (`_fitted`)."""
    trained = max(stage.seq_len for stage in pretrained.stages)
    reads = max(stage.seq_len for stage in experiment.stages)
    if reads > trained and distributed.is_primary():
        print(f"note: {given} trained on rows of at most {trained} tokens and this run reads "
              f"{reads}: positions past {trained} are new to its "
              f"{pretrained.encoding.name} encoder", file=sys.stderr)


def _fitted(path: tuple, theirs, mine, given: str):
    """`theirs` in `mine`'s shape and dtype: as is, or a position table's first rows; `given`
    names the run they come from in errors."""
    if theirs.shape == mine.shape:
        return jnp.asarray(theirs, mine.dtype)
    # a position table: an encoding's parameter ("params" in its path) of rows by width, the
    # rows alone differing (a norm's or a layer's, of another width, is a model size)
    table = "params" in path and theirs.ndim >= 2
    if table and theirs.ndim == mine.ndim and theirs.shape[1:] == mine.shape[1:]:
        if mine.shape[0] <= theirs.shape[0]:
            return jnp.asarray(theirs[:mine.shape[0]], mine.dtype)
        raise ConfigError(
            f"{given}: {_name(path)} has {theirs.shape[0]} rows (positions "
            f"the pretrained run read), and this run reads {mine.shape[0]}: rows past "
            f"{theirs.shape[0]} were never trained (a learned table's limit, as BERT's 512); "
            "fine-tune at most at the pretrained length, or pretrain longer")
    raise ConfigError(
        f"{given}: {_name(path)} is {tuple(theirs.shape)} there and "
        f"{tuple(mine.shape)} here: fine-tune with the pretrained run's model sizes and "
        "tokenizer (configs/finetune.py:pretrained=RUN copies them)")
