"""The Experiment: a config resolved into what training and evaluation use (each command that
needs it resolves it; the rules live here once).

    experiment = Experiment.from_config(config)     # or Experiment.from_workdir(RUN)
    experiment.encoding, experiment.dims            # the encoding and the sizes it is built with
    experiment.model_class                          # the registered model kind (posjax.models)
    experiment.data                                 # the registered data kind (posjax.data)
    experiment.build() / experiment.abstract()      # the model, split for pure steps
    experiment.train_iterator(stage)                # this process's share of its batches

Every rule that turns config values into these lives here, once: the longest position a run
reads (the training length, the range of randomized positions, a task's reach), the model
kind's input field and masking, the data kind's pipelines. The trainer, the evaluations and the
benchmarks read the Experiment; nothing else compares kind names. It knows nothing of
training: the train state, restoring a checkpoint (`posjax.train.checkpoint.restore_params`)
and placing a run on the devices (`posjax.train.sharding.check`) live in posjax.train, which
reads it.
"""

from __future__ import annotations

import dataclasses
import math
import os
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
from flax import nnx

from posjax import data, encoders, fileio, models, registry
from posjax.attention import fused
from posjax.config import TRAIN_DEFAULTS, check_each_once, load_config
from posjax.data import training
from posjax.encoders import scaling
from posjax.errors import ConfigError
from posjax.models import pattern
from posjax.models.transformer import layer_encodings

# Stage k's shard i of a run's data is seeded train.seed + k * STAGE_SEED_STRIDE +
# i * SHARD_SEED_STRIDE (stage 0's shard 0: train.seed itself), so no two stages or shards of
# the runs of seeds below STAGE_SEED_STRIDE share a shuffle or MLM masks, across seeds too.
STAGE_SEED_STRIDE = 10_007
SHARD_SEED_STRIDE = 1_000_003


@dataclasses.dataclass(frozen=True)
class Stage:
    """One training stage: `steps` optimizer steps at (seq_len, batch_size); global steps
    [begin, end)."""

    index: int
    seq_len: int
    batch_size: int
    begin: int
    end: int
    encoding: str = ""  # the encoding it trains with (train.stage_encodings); "": the model's


@dataclasses.dataclass(frozen=True)
class Model:
    """A model split for pure steps: static graphdef, trained parameters, and the rest
    (dropout rng streams; empty without dropout)."""

    graphdef: nnx.GraphDef
    params: Any
    rest: Any


def build_encoding(config) -> encoders.Encoding:
    """The encoding named by `config.encoding` with its hyperparameters."""
    hparams = {k: v for k, v in config.encoding.to_dict().items() if k != "name"}
    if hparams.get("scaling"):
        # The block's training length defaults to the first stage's (the short form has none).
        hparams["scaling"] = scaling.parse(hparams["scaling"], config.train.stages[0][0])
    return encoders.get(config.encoding.name, **hparams)


def stage_encoding(entry: str) -> encoders.Encoding:
    """A train.stage_encodings entry built: NAME, or NAME(KEY=VALUE,...) with that encoding's
    hyperparameters (model.layer_pattern's grammar: `rope(theta=500000)`), the rest its
    defaults."""
    field = "train.stage_encodings"
    specs = pattern.parse(entry, {name: encoders.hparams(name) for name in encoders.names()},
                          field)
    if len(specs) != 1:
        raise ConfigError(f"{field} entry {entry!r} names {len(specs)} encodings: give one per "
                          "stage, NAME or NAME(KEY=VALUE,...)")
    return encoders.get(specs[0].name, **dict(specs[0].settings))


def _stages(config) -> tuple[Stage, ...]:
    stages, begin = [], 0
    if not config.train.stages:
        raise ConfigError("train.stages is empty: give at least one (seq_len, batch_size, steps)")
    names = tuple(config.train.get("stage_encodings", ()))
    if len(names) > len(config.train.stages):
        raise ConfigError(f"train.stage_encodings={names} names {len(names)} stages but "
                          f"train.stages has {len(config.train.stages)}: give one per stage")
    for entry in filter(None, names):
        stage_encoding(entry)  # a one-line ConfigError for a name or setting it cannot build
    for index, stage in enumerate(config.train.stages):
        if not isinstance(stage, (tuple, list)):  # ((64,4,100)) is one tuple, not a stage's
            raise ConfigError(
                f"train.stages={tuple(config.train.stages)} is not a tuple of (seq_len, "
                "batch_size, steps) entries: one stage is written ((64,4,100),), with the comma")
        if len(stage) != 3 or not all(isinstance(x, int) and x >= 1 for x in stage):
            raise ConfigError(
                f"train.stages entry {tuple(stage)} is not (seq_len, batch_size, steps) of "
                "positive integers"
            )
        seq_len, batch_size, steps = (int(x) for x in stage)
        if seq_len < 2:  # what the data would refuse as it reads; a sweep checks it as it plans
            raise ConfigError(f"train.stages entry {tuple(stage)}: seq_len must be >= 2 to "
                              f"have a next token to predict, got {seq_len}")
        stages.append(Stage(index, seq_len, batch_size, begin, begin + steps,
                            names[index] if index < len(names) else ""))
        begin += steps
    return tuple(stages)


def shards_of_process(num_shards: int) -> range:
    """The data shards this process reads: an equal, contiguous share of `num_shards`
    (0: one per process)."""
    count = jax.process_count()
    num_shards = num_shards or count
    if num_shards % count:
        raise ConfigError(f"data.num_shards={num_shards} is not a multiple of the {count} "
                          f"processes: use a multiple of {count}, or 0 for one per process")
    per_process = num_shards // count
    return range(jax.process_index() * per_process, (jax.process_index() + 1) * per_process)


def _check_train(config, stages: tuple[Stage, ...]) -> None:
    """One-line ConfigErrors for training settings that cannot run (what the devices cannot
    place is posjax.train.sharding.check's, which the trainer runs next)."""
    for key in ("log_every_steps", "checkpoint_every_steps"):
        if int(config.train[key]) < 1:
            raise ConfigError(f"train.{key}={config.train[key]} must be a positive step count")
    if float(config.train.checkpoint_every_minutes) < 0:
        raise ConfigError(f"train.checkpoint_every_minutes="
                          f"{config.train.checkpoint_every_minutes} must be >= 0 (0: off)")
    if int(config.train.eval_every_steps) < 0:
        raise ConfigError(f"train.eval_every_steps={config.train.eval_every_steps} must be >= 0 "
                          "(0: evaluate at stage ends only)")
    if not 0 <= int(config.train.seed) < MAX_SEED:
        raise ConfigError(f"train.seed={config.train.seed} must be from 0 to {MAX_SEED - 1} "
                          "(JAX's and the data's seeds are unsigned)")
    shards = int(config.data.num_shards) or jax.process_count()
    shards_of_process(shards)
    for stage in stages:
        if stage.batch_size % shards:
            raise ConfigError(
                f"batch_size {stage.batch_size} is not divisible by the {shards} data shards "
                f"(data.num_shards): use a multiple of {shards}")
    train_len = max(s.seq_len for s in stages)
    randomized = int(config.train.randomize_positions)
    if randomized and randomized < train_len:
        raise ConfigError(
            f"train.randomize_positions={randomized} is below the longest training length "
            f"{train_len}: draw positions from a larger range"
        )
    _check_pose(config, train_len)


# Seeds below this leave room for the offsets added to them (dropout, data shards, stages)
# under JAX's and numpy's unsigned 32-bit limit.
MAX_SEED = 2**31


def _whole(least: int):
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= least


# What each evaluation option takes: config.eval's fields and config.evals entries' options,
# checked before training (an evaluation would fail, or score something else, only when due).
EVAL_OPTION_RULES = {
    "lengths": (lambda v: all(_whole(1)(x) for x in v), "whole numbers of tokens >= 1, "
                "joined by + in an arg or as a tuple: (256, 1024)"),
    "depths": (lambda v: all(isinstance(x, (int, float)) and not isinstance(x, bool)
                             and 0 <= x <= 1 for x in v), "fractions from 0 to 1: (0, 0.5, 1)"),
    "max_tokens": (_whole(1), "a whole number of tokens >= 1"),
    "trials": (_whole(1), "a whole number >= 1"),
    "batch_size": (_whole(1), "a whole number >= 1"),
    "group_factor": (_whole(1), "a whole number >= 1"),
    "stride": (_whole(0), "a whole number >= 0 (0: half the training length)"),
    "protocol": (lambda v: v in data.evaluation.PROTOCOLS,
                 f"one of {', '.join(data.evaluation.PROTOCOLS)}"),
}


def check_eval_option(where: str, key: str, value) -> None:
    """A one-line ConfigError for an evaluation option's value (EVAL_OPTION_RULES) it cannot
    take; None (the run's config.eval value) always passes, and so does an option no rule
    names."""
    if value is None or key not in EVAL_OPTION_RULES:
        return
    rule, takes = EVAL_OPTION_RULES[key]
    if key in ("lengths", "depths"):  # one number, or a tuple of them
        items = (value,) if isinstance(value, (int, float)) else value
        takes_it = isinstance(items, (tuple, list)) and rule(items)
    else:
        takes_it = rule(value)
    if not takes_it:
        raise ConfigError(f"{where}={value!r} is not {takes}")
    if key in ("lengths", "depths") and isinstance(value, (tuple, list)):
        check_each_once(where, value)


def _check_eval(config) -> None:
    """A one-line ConfigError before training for evaluation settings that cannot be scored
    (lengths, the windowing, the text budget, the batch, the row-length ladder), rather than
    a crash, or a silent other setting, after the run trained."""
    lengths = tuple(config.eval.lengths)
    bad = [x for x in lengths if isinstance(x, bool) or not isinstance(x, int) or x < 1]
    if bad:
        raise ConfigError(f"eval.lengths={lengths!r}: {bad[0]!r} is not a positive whole number "
                          "of tokens; give whole numbers joined by + (lengths=128+256+512)")
    check_each_once("eval.lengths", lengths)
    for key in ("protocol", "stride", "max_tokens", "batch_size", "group_factor"):
        check_eval_option(f"eval.{key}", key, config.eval.get(key))
    # a sliding window moves by at most its own length (the file's default lengths start at
    # the training length)
    shortest = min(lengths or (max(int(stage[0]) for stage in config.train.stages),))
    if config.eval.protocol != "sliding" and config.eval.stride:
        raise ConfigError(f"eval.stride={config.eval.stride} moves sliding windows, and "
                          f"eval.protocol={config.eval.protocol!r} scores none: give "
                          "protocol=sliding too, or drop stride")
    if config.eval.protocol == "sliding" and config.eval.stride > shortest:
        raise ConfigError(f"eval.stride={config.eval.stride} is longer than the evaluation "
                          f"length {shortest}: give a stride from 1 to {shortest} (0: half "
                          "the training length)")


def _check_pose(config, train_len: int) -> None:
    target, chunks = int(config.train.pose), int(config.train.pose_chunks)
    if not target and chunks != TRAIN_DEFAULTS["pose_chunks"]:
        raise ConfigError(f"train.pose_chunks={chunks} cuts PoSE's positions, and train.pose=0 "
                          "trains without PoSE: give pose=N (its target length) too, or drop "
                          "pose_chunks")
    if not target:
        return
    if int(config.train.randomize_positions):
        raise ConfigError("train.pose and train.randomize_positions each draw the training "
                          "positions: set one of them to 0")
    if target < train_len or chunks < 1:
        raise ConfigError(
            f"train.pose={target}, pose_chunks={chunks}: PoSE needs a target length >= the "
            f"longest training length {train_len} and at least 1 chunk (the paper: 2)")


def device_memory() -> int:
    """Bytes one device can hold: its reported limit (GPU, TPU), else the host's RAM (CPU)."""
    stats = jax.local_devices()[0].memory_stats() or {}
    if "bytes_limit" in stats:
        return int(stats["bytes_limit"])
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _build(model_config, encoding: encoders.Encoding, kind: str, max_len: int,
           sizes: tuple, seed: int) -> nnx.Module:
    """The model of `kind` with its initial parameters from `seed` (params stream `seed`,
    dropout `seed + 1`); `sizes` the (name, value) the model class takes from the data."""
    return models.build_model(
        model_config, encoding, kind=kind, max_len=max_len,
        rngs=nnx.Rngs(params=seed, dropout=seed + 1), **dict(sizes))


@lru_cache(maxsize=64)
def _abstract(model_config, encoding: encoders.Encoding, kind: str, max_len: int,
              sizes: tuple) -> Model:
    """`_build`'s model with shapes for values, split, once per structure in a process: the
    seed changes values, not shapes, and a run's checks, its step's memory, its checkpoint
    restore and its evaluations each ask for it (a sweep's planning for every run, a report
    for many runs of one model). Callers share the result and read it only."""
    model = models.abstract_model(lambda: _build(model_config, encoding, kind, max_len, sizes, 0))
    return Model(*nnx.split(model, nnx.Param, ...))


@dataclasses.dataclass(frozen=True, eq=False)
class Experiment:
    """A config resolved into its encoding, sizes, model kind, data kind and stages."""

    config: ml_collections.ConfigDict
    encoding: encoders.Encoding
    model_config: models.ModelConfig
    model_class: type[nnx.Module]
    data: data.DataKind
    stages: tuple[Stage, ...]

    @classmethod
    def from_config(cls, config) -> Experiment:
        """Resolve and check `config` (one-line ConfigError for anything that cannot run)."""
        stages = _stages(config)
        _check_train(config, stages)
        _check_eval(config)
        model_config = models.ModelConfig.from_config(
            {k: v for k, v in config.model.to_dict().items() if k != "kind"})
        model_class = models.model_kind(config.model.kind)
        if model_config.pooling != "cls" and not hasattr(model_class, "pooled"):
            raise ConfigError(f"model.pooling={model_config.pooling!r} is a classifier's pooled "
                              f"representation, and model kind {config.model.kind!r} pools "
                              "nothing: drop pooling")
        return cls(config, build_encoding(config).for_model(model_class.causal), model_config,
                   model_class, data.kind_of(config.data), stages)

    def _classes(self) -> list[type]:
        """The classes this run's numbers depend on: its encodings, model kind and data kind."""
        used = (self.encoding, *layer_encodings(self.model_config, self.encoding), self.data)
        return [*(type(t) for t in used if t is not None), self.model_class]

    def code_sha1(self, *more: type) -> str | None:
        """`registry.code_sha1` of the run's classes (`_classes`) and `more` (an
        evaluation's): None where all are posjax's."""
        return registry.code_sha1([*self._classes(), *more])

    def code_files(self) -> list[str]:
        """The files outside posjax that define the run's classes (`_classes`)."""
        return sorted({path for cls in self._classes()
                       if (path := registry.source_file(cls)) is not None})

    def code_changed_line(self, workdir: str | Path, doing: str) -> str | None:
        """A warning where the code outside posjax the run in `workdir` last trained with
        (config.json's provenance.code_sha1) is not the code as it is now, `doing` what
        follows ("scored", "trained on"); None where it is the same or was not recorded."""
        recorded = (fileio.read_json(Path(workdir) / "config.json") or {}).get(
            "provenance", {}).get("code_sha1")
        now = self.code_sha1()
        if recorded is None or recorded == now:
            return None
        if now is None:
            return (f"warning: {workdir} trained with code outside posjax (code sha1 "
                    f"{recorded}) that this config does not use: its checkpoint is {doing} "
                    "with posjax's own code")
        return (f"warning: {', '.join(self.code_files()) or 'the code outside posjax'} "
                f"changed since {workdir} trained (code sha1 {recorded}, now {now}): its "
                f"checkpoint is {doing} with the code as it is now")

    @classmethod
    def from_workdir(cls, workdir: str | Path) -> Experiment:
        """The Experiment of the run in `workdir` (its config.json)."""
        return cls.from_config(load_config(workdir))

    # --- sizes ---------------------------------------------------------------------------

    @property
    def train_len(self) -> int:
        """The longest training sequence length."""
        return max(s.seq_len for s in self.stages)

    @property
    def total_steps(self) -> int:
        return self.stages[-1].end

    @cached_property
    def max_len(self) -> int:
        """The longest position count training reads, so learned tables cover it: the
        training length; M for randomized positions (draws reach M - 1); PoSE's target
        length; a task's reach
        (e.g. raster indices row * grid_width + col of a grid)."""
        return max(self.train_len, self.randomize_positions_to, self.pose[0],
                   self.data.position_reach(self.config, self.encoding))

    @property
    def dims(self) -> encoders.Dims:
        """The sizes the encoding is built and checked with."""
        return self.model_config.dims(self.max_len)

    @cached_property
    def num_params(self) -> int:
        """The model's parameter count (from its abstract shapes: nothing is allocated)."""
        return sum(x.size for x in jax.tree.leaves(_abstract(*self._model_args(None)).params))

    def memory_floor(self, seq_len: int, batch_size: int, training: bool = True) -> int:
        """A lower bound, in bytes, of what one step at [batch_size, seq_len] holds: the
        parameters (training: with their gradients and AdamW's two moments), the logits and
        each layer's input, and dense attention's [L, L] scores per head and layer
        (`dense_score_bytes`). Real steps need more (MLP activations, XLA scratch), so a step
        over it cannot fit. Parameters count in model.param_dtype's bytes (a bfloat16
        pretrained model: 2 per parameter), layer inputs in the activations' dtype, logits
        in float32."""
        cfg = self.model_config
        weight, compute = (jnp.dtype(d).itemsize for d in (cfg.weight_dtype, cfg.compute_dtype))
        tokens = batch_size * seq_len
        spec = self.batch_spec()
        activations = tokens * (4 * max(spec.vocab_size, spec.num_classes)
                                + compute * cfg.d_model * (cfg.num_layers + 1))
        return (weight * self.num_params * (4 if training else 1)
                + activations * (2 if training else 1)
                + self.dense_score_bytes(seq_len, batch_size, training))

    def dense_score_bytes(self, seq_len: int, batch_size: int, training: bool = True) -> int:
        """Bytes of dense attention's float32 [batch, heads, L, L] scores over the layers
        (training: and their gradients); 0 where attention at `seq_len` holds no [L, L]
        scores (chunked, flash_bias, linear; fused where cuDNN runs it: XLA's
        jax.nn.dot_product_attention, on a CPU or in float32, holds them as dense does)."""
        cfg = self.model_config
        dense = cfg.attention == "dense" or (cfg.attention == "auto"
                                             and seq_len <= cfg.dense_max_len)
        if cfg.attention == "fused":
            dense = fused.implementation(jnp.dtype(cfg.compute_dtype),
                                         jax.default_backend()) == "xla"
        if not dense:
            return 0
        return 4 * batch_size * cfg.num_heads * seq_len**2 * cfg.num_layers * (
            2 if training else 1)

    def check_memory(self, seq_len: int, batch_size: int, training: bool = True) -> None:
        """A one-line ConfigError before any work if one step cannot fit this device; where
        only dense attention's [L, L] scores make it too big, the fix names chunked
        attention."""
        need, have = self.memory_floor(seq_len, batch_size, training), device_memory()
        if need > have:
            scores = self.dense_score_bytes(seq_len, batch_size, training)
            chunked = ("set model.attention=chunked" if training else
                       "score with chunked attention (posjax extrapolate --attention=chunked)")
            # at batch 1 only the length can come down
            lower = "lower the length" + " or the batch size" * (batch_size > 1)
            fix = (f"{chunked} (O(L) memory: no [L, L] scores), or {lower}"
                   if scores and need - scores <= have else lower)
            what = f"seq_len={seq_len}" if training else f"scoring length {seq_len}"
            raise ConfigError(
                f"{what} at batch {batch_size} needs at least {need / 2**30:.1f} GiB "
                f"per step, more than the {have / 2**30:.1f} GiB of this "
                f"{jax.devices()[0].platform.upper()}: {fix}"
            )

    # --- the model kind ------------------------------------------------------------------

    @property
    def input_key(self) -> str:
        """The batch field holding the model's input."""
        return self.model_class.input_key

    @property
    def mlm(self):
        """The MLM masking config when the model kind is a masked LM, else None."""
        return self.config.data.mlm if self.model_class.masked_lm else None

    def batch_spec(self, stage: Stage | None = None) -> data.BatchSpec:
        """Shapes and vocabulary of one training batch of `stage` (default: the first)."""
        stage = stage or self.stages[0]
        return self.data.batch_spec(stage.seq_len, stage.batch_size)

    @property
    def randomize_positions_to(self) -> int:
        """train.randomize_positions: M > 0 draws each segment's positions from [0, M)."""
        return int(self.config.train.randomize_positions)

    @property
    def pose(self) -> tuple[int, int]:
        """(train.pose, train.pose_chunks): PoSE's target length (0: off) and chunks."""
        return int(self.config.train.pose), int(self.config.train.pose_chunks)

    @cached_property
    def whole_rows(self) -> bool:
        """The training data's rows are whole (BatchSpec.whole_rows), read once."""
        return self.batch_spec().whole_rows

    @cached_property
    def shared_positions(self) -> bool:
        """The train step may hand the model one row of positions for every example (the
        position terms built once per step, not per example): the encoding reads only
        k_pos - q_pos (Encoding.distance_only), the data's segments count positions up by
        one (BatchSpec.gapless_positions) and no transform draws each row its own."""
        return self.shares_positions(self.encoding)

    def shares_positions(self, encoding: encoders.Encoding) -> bool:
        """`shared_positions` for a model with `encoding` (a stage's own)."""
        varies = self.randomize_positions_to > 0 or self.pose[0] > 0
        return encoding.distance_only and self.batch_spec().gapless_positions and not varies

    @property
    def uniform_loss(self) -> float:
        """The loss of a uniform guess over the outputs, ln(V): where training starts."""
        spec = self.batch_spec()
        return math.log(max(spec.vocab_size, spec.num_classes, 2))

    def _model_args(self, encoding: encoders.Encoding | None,
                    window_encoding: encoders.Encoding | None = None) -> tuple:
        """What the model's structure is built from (`_build`'s arguments but the seed);
        window_encoding: the sliding-window layers' own (ModelConfig.window_encoding)."""
        spec = self.batch_spec()
        sizes = tuple((name, getattr(spec, name)) for name in self.model_class.sizes)
        cfg = self.model_config if window_encoding is None else dataclasses.replace(
            self.model_config, window_encoding=window_encoding)
        return cfg, encoding or self.encoding, self.model_class.kind, self.max_len, sizes

    def _make_model(self, encoding: encoders.Encoding | None,
                    window_encoding: encoders.Encoding | None = None) -> nnx.Module:
        return _build(*self._model_args(encoding, window_encoding),
                      seed=self.config.train.seed)

    def build(self, encoding: encoders.Encoding | None = None,
              window_encoding: encoders.Encoding | None = None) -> Model:
        """The model with its initial parameters (seeded by train.seed), split."""
        return Model(*nnx.split(self._make_model(encoding, window_encoding), nnx.Param, ...))

    def abstract(self, encoding: encoders.Encoding | None = None,
                 window_encoding: encoders.Encoding | None = None) -> Model:
        """The model's structure with shapes for values (nothing initialised; shared with
        every Experiment of the same structure: read it, never change it)."""
        return _abstract(*self._model_args(encoding, window_encoding))

    def stage_encoding(self, stage: Stage) -> encoders.Encoding:
        """The encoding `stage` trains with: its train.stage_encodings entry
        (`stage_encoding`), else the model's."""
        return stage_encoding(stage.encoding) if stage.encoding else self.encoding

    def check_stage_encodings(self) -> None:
        """A stage that trains with another encoding must leave the model's parameters as
        they are (DroPE's RoPE stage before NoPE): a one-line ConfigError where that
        encoding has parameters of its own or lacks the model's, or where a layer pattern
        gives each layer an encoding of its own, which no stage switches."""
        pattern = self.model_config.layer_pattern
        if pattern and any(stage.encoding for stage in self.stages):
            raise ConfigError(
                f"train.stage_encodings={tuple(self.config.train.stage_encodings)} switches the "
                f"encoding per stage, and model.layer_pattern={pattern!r} names each layer's "
                "encoding, which no stage switches (DroPE's stage without positions would keep "
                "the pattern's rope layers): drop the pattern (arch=, layer_pattern=) or the "
                "stage encodings (drope=)")
        if not any(stage.encoding for stage in self.stages):
            return
        own = jax.tree.map(lambda x: x.shape, self.abstract().params)
        for stage in self.stages:
            if not stage.encoding:
                continue
            model = self.abstract(self.stage_encoding(stage))
            other = jax.tree.map(lambda x: x.shape, model.params)
            if other != own:
                raise ConfigError(
                    f"train.stage_encodings: stage {stage.index + 1}'s {stage.encoding!r} has "
                    f"other parameters than the model's encoding {self.encoding.name!r}; a "
                    "stage may only switch between encodings without parameters of their own "
                    "(rope, alibi, none, ...)")

    def check_positions_read(self) -> None:
        """PoSE and randomized positions change the training positions only: where no
        encoding of the model reads positions (stick-breaking, NoPE, FoX, CoPE, PaTH, in
        every layer and stage) they would train the same model, so they are refused."""
        drawn = [f"train.{key}={self.config.train[key]}"
                 for key in ("pose", "randomize_positions") if int(self.config.train[key])]
        if not drawn:
            return
        axes = self.batch_spec().position_axes
        if axes:  # PoSE and randomized positions draw one number per token
            raise ConfigError(
                f"{drawn[0]} draws one position per token, and dataset "
                f"{self.config.data.dataset!r} gives each token {axes} position components: "
                f"drop {drawn[0].split('=')[0]}, or train on text")
        used = [self.stage_encoding(stage) for stage in self.stages]
        layers = [e for u in dict.fromkeys(used)
                  for e in (u, *layer_encodings(self.model_config, u)) if e is not None]
        if all(e.position_free for e in layers):
            names = "+".join(dict.fromkeys(e.name for e in layers)) or "none"
            raise ConfigError(
                f"{drawn[0]} changes only the positions, which encoding {names!r} never reads "
                f"(it would train the same model): drop {drawn[0].split('=')[0]}, or train "
                "an encoding that reads positions (rope, alibi, ...)")

    def evaluation_model(self, encoding: encoders.Encoding | None = None,
                         window_encoding: encoders.Encoding | None = None) -> Model:
        """A model to run restored parameters in: abstract, unless it has dropout streams,
        whose keys must be real arrays even where dropout is off; window_encoding: its
        sliding-window layers' own (ModelConfig.window_encoding)."""
        model = self.abstract(encoding, window_encoding)
        return self.build(encoding, window_encoding) if jax.tree.leaves(model.rest) else model

    # --- the data kind -------------------------------------------------------------------

    def check_data(self) -> None:
        """Build every stage's training data (reading nothing yet) and the first batch the
        trainer's evaluation will score, so a bad size, a corpus too short for its windows or
        test data the model cannot index is a ConfigError before a run writes anything."""
        for stage in self.stages:
            self.data.train_dataset(stage.seq_len, stage.batch_size, 0, mlm=self.mlm)
        self.data.check_evaluable(self.config, self.encoding)
        if self.mlm is not None and self.config.data.get("sentencepiece_model") and (
                data.get_tokenizer(self.config.data).mask_id < 0):
            raise ConfigError(
                f"data.sentencepiece_model={self.config.data.sentencepiece_model} has no "
                "<mask> piece, which masked-LM training needs: use a model with one, or drop "
                "data.sentencepiece_model to train posjax's own")
        if int(self.config.train.eval_batches) > 0:
            for seq_len in sorted({stage.seq_len for stage in self.stages}):
                next(iter(self.validation_batches(seq_len, 1)), None)

    def train_iterator(self, stage: Stage):
        """The endless, checkpointable iterator of this process's rows of `stage`'s batches
        (seeded per stage and shard, STAGE_SEED_STRIDE): the training split is cut into
        data.num_shards shards (0: one per process), each giving batch_size / num_shards rows
        of every batch, and a process reads its own share of them. So the global batches
        depend on num_shards, not on how many processes or devices read them."""
        shards = shards_of_process(int(self.config.data.num_shards))
        count = len(shards) * jax.process_count()
        seed = int(self.config.train.seed) + STAGE_SEED_STRIDE * stage.index
        return iter(training.concatenated([
            self.data.train_dataset(stage.seq_len, stage.batch_size // count,
                                    seed + SHARD_SEED_STRIDE * index, mlm=self.mlm,
                                    shard=(index, count))
            for index in shards]))

    def validation_batches(self, seq_len: int, num_batches: int):
        """The batches the trainer's evaluation scores at `seq_len`."""
        return self.data.validation_batches(
            seq_len, batch_size=int(self.config.eval.batch_size), num_batches=num_batches,
            mlm=self.mlm)
