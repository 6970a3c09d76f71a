"""The models a benchmark steps: posjax's real jitted train step on configs/lm.py size=base,
and x-transformers' decoder of the same sizes (the bench extra: torch, x-transformers)."""

from __future__ import annotations

import jax

from benchlib.runs import ROOT
from posjax.config import load_config_module
from posjax.experiment import Experiment
from posjax.train import optim
from posjax.train.sharding import data_sharding, make_mesh, replicated
from posjax.train.steps import accumulate, initial_state, step_options, train_step, train_steps
from posjax.train.trainer import stack_batches, stack_seeds

LM = ROOT / "configs" / "lm.py"
# posjax encoding -> the x-transformers Decoder flag of the same encoding.
PEER_FLAGS = {
    "rope": {"rotary_pos_emb": True},
    "alibi": {"alibi_pos_bias": True},
    "t5": {"rel_pos_bias": True},
    "t5_shared": {"rel_pos_bias": True},
}
# Labels that are an encoding with settings: x-transformers' T5 has one table for all layers,
# so t5_shared (posjax's T5 with one table for all layers) is its like-for-like pair, where
# posjax's own T5 has a table per layer.
LABEL_ARGS = {"t5_shared": "encoding=t5,share_position_params=true"}


def label_arg(name: str) -> str:
    """The configs/lm.py arg of an encoding label: LABEL_ARGS's, else encoding=NAME."""
    return LABEL_ARGS.get(name, f"encoding={name}")

# x-transformers asserts that flash attention cannot carry T5's bias, so T5's peer runs its
# plain attention on a GPU too.
PEER_FLASH = frozenset({"rope", "alibi"})


class Trainee:
    """A model, optimizer and state of configs/lm.py (size=base unless `size`), stepped by
    the trainer's jitted step: `train_step`, or for `seeds` > 1 `train_steps`, the program of
    `posjax train --seeds`, on the seeds' states stacked on a leading axis (each seed its own
    rng, all from the same initial weights: a step's time does not depend on their values)."""

    def __init__(self, encoding: str, seq_len: int, batch_size: int, size: str = "base",
                 seeds: int = 1, packing: str = "documents"):
        name, _, attention = encoding.partition("@")  # "t5@flash_bias": on that kernel
        self.config = load_config_module(str(LM)).get_config(
            label_arg(name) + f",size={size},seq_len={seq_len},batch_size={batch_size},"
            f"packing={packing}" + (f",attention={attention}" if attention else ""))
        self.experiment = Experiment.from_config(self.config)
        self.model = self.experiment.build()
        self.tx = optim.optimizer(self.config.train, self.experiment.total_steps)
        self.mesh = make_mesh()
        self.seeds = seeds
        states = [initial_state(self.model.params, self.tx, self.config.train.seed + k)
                  for k in range(seeds)]
        self.state = jax.device_put(states[0] if seeds == 1 else stack_seeds(states),
                                    replicated(self.mesh))
        self.rest = jax.device_put(
            self.model.rest if seeds == 1 else stack_seeds([self.model.rest] * seeds),
            replicated(self.mesh))
        self.sums: dict = {}
        self._step = train_step if seeds == 1 else train_steps
        self._compiled = None

    def iterator(self):
        """The trainer's batches of the first stage."""
        return self.experiment.train_iterator(self.experiment.stages[0])

    def put(self, batch):
        return jax.device_put(batch, data_sharding(self.mesh))

    def first_batches(self):
        """The step's input on the device: the pipeline's first batch, or for `seeds` > 1 its
        first `seeds` batches stacked (seed k's the k-th), placed as the trainer places them."""
        iterator = self.iterator()
        if self.seeds == 1:
            return self.put(next(iterator))
        batches = [next(iterator) for _ in range(self.seeds)]
        return stack_batches(batches, self.mesh)

    def _static(self) -> dict:
        return step_options(self.experiment, self.model.graphdef, self.tx)

    def step(self, batch) -> None:
        """One optimizer step, as the trainer's loop takes it (metric sums accumulated)."""
        if self._compiled is None:
            self.state, sums = self._step(self.state, self.rest, batch, **self._static())
        else:
            self.state, sums = self._compiled(self.state, self.rest, batch)
        self.sums = accumulate(self.sums, sums)

    def compile(self, batch) -> dict | None:
        """Compile the step for `batch` ahead of time (`step` then runs this executable, with
        no second compile) and return its memory_analysis (None where the backend has none)."""
        self._compiled = self._step.lower(self.state, self.rest, batch,
                                          **self._static()).compile()
        return memory_analysis(self._compiled)

    def compiled_text(self, batch) -> str:
        """The optimized HLO of the step `step` runs (for benchlib.profile): compiled once,
        and that executable is what `step` then runs."""
        if self._compiled is None:
            self.compile(batch)
        return self._compiled.as_text()

    def wait(self) -> None:
        jax.block_until_ready((self.state, self.sums))
        self.sums = {}

    def num_params(self) -> int:
        return sum(x.size for x in jax.tree.leaves(self.model.params))

    def matmul_params(self) -> int:
        """Weights used in matrix multiplies: every `kernel` leaf (the Linear layers)."""
        leaves = jax.tree_util.tree_flatten_with_path(self.model.params)[0]
        return sum(x.size for path, x in leaves if "['kernel']" in jax.tree_util.keystr(path))


def memory_analysis(compiled) -> dict | None:
    """Bytes a compiled program holds on the device, from XLA's memory analysis: temporaries,
    arguments, outputs and the outputs aliased to donated arguments; `peak_bytes` is temp +
    argument + output (aliased bytes counted in both, so an upper bound)."""
    stats = compiled.memory_analysis()
    if stats is None:
        return None
    fields = ("temp", "argument", "output", "alias", "generated_code")
    out = {f"{key}_bytes": int(getattr(stats, f"{key}_size_in_bytes")) for key in fields}
    out["peak_bytes"] = out["temp_bytes"] + out["argument_bytes"] + out["output_bytes"]
    return out


class Ours:
    """posjax's model and real train step on one batch already on the device."""

    def __init__(self, encoding: str, seq_len: int, batch_size: int, size: str = "base",
                 packing: str = "documents"):
        self.trainee = Trainee(encoding, seq_len, batch_size, size=size, packing=packing)
        self.batch = self.trainee.first_batches()

    def step(self) -> None:
        self.trainee.step(self.batch)

    def wait(self) -> None:
        self.trainee.wait()

    def num_params(self) -> int:
        return self.trainee.num_params()


class Peer:
    """x-transformers' decoder of the same sizes as configs/lm.py `size`, stepped by torch's
    AdamW; on a CUDA device in bfloat16 autocast with the fused AdamW and flash attention
    where it carries the encoding (PEER_FLASH; as a PyTorch user trains there), on the CPU
    in float32 with `threads` threads."""

    def __init__(self, encoding: str, seq_len: int, batch_size: int, threads: int,
                 size: str = "base"):
        import torch
        from x_transformers import Decoder, TransformerWrapper

        dims = load_config_module(str(LM)).SIZES[size]
        cuda = torch.cuda.is_available()
        self.device = torch.device("cuda" if cuda else "cpu")
        torch.set_num_threads(threads)
        torch.manual_seed(0)
        self.torch = torch
        self.model = TransformerWrapper(
            num_tokens=260, max_seq_len=seq_len, use_abs_pos_emb=False,
            attn_layers=Decoder(dim=dims["d_model"], depth=dims["num_layers"],
                                heads=dims["num_heads"], attn_dim_head=dims["head_dim"],
                                ff_mult=dims["mlp_dim"] // dims["d_model"],
                                **({"attn_flash": True} if cuda and encoding in PEER_FLASH
                                   else {}),
                                **PEER_FLAGS[encoding])).to(self.device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=0.01,
                                     **({"fused": True} if cuda else {}))
        self.autocast = torch.autocast("cuda", torch.bfloat16, enabled=cuda)
        self.tokens = torch.randint(0, 260, (batch_size, seq_len + 1), device=self.device)

    def step(self) -> None:
        torch = self.torch
        with self.autocast:
            logits = self.model(self.tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                                     self.tokens[:, 1:].reshape(-1))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()

    def wait(self) -> None:
        """On the CPU torch runs eagerly (a step is done when it returns); on CUDA, wait."""
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()

    def num_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())
