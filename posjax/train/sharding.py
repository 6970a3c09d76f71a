"""Where arrays live: a mesh whose axes come from the config, batches split over its
data-parallel axes, parameters and optimizer state placed by sharding rules.

    check(config, batch_sizes)                   # before any work: one line if it cannot fit
    mesh = make_mesh(config.train.mesh)          # (("data", -1), ("fsdp", 1)) by default
    batch = global_batch(local_rows, mesh)       # this process's rows -> one global array
    state = jax.device_put(state, state_shardings(state, mesh, config.train.sharding_rules))

Axes: "data" copies the state and splits the batch; "fsdp" splits the batch too and also
shards the state (fully sharded data parallel: XLA gathers a layer's weights where it uses
them and reduce-scatters their gradients). A size of -1 takes the devices left over.

Sharding rules are (regex, strategy) pairs matched against each state leaf's path (e.g.
"params/layers/0/attention/query/kernel", "opt_state/0/mu/..."); the first match decides:
  fsdp       shard the leaf's largest dimension divisible by the fsdp axis size (the
             big_vision rule), replicate it if none is
  replicate  a full copy on every device
Rules, not per-model annotations: a new layer is sharded without touching its code.

The same code runs on one CPU, simulated CPU devices
(XLA_FLAGS=--xla_force_host_platform_device_count=N), several processes (jax.distributed),
GPUs or TPUs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import jax
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from posjax.errors import ConfigError

# Mesh axes the batch is split over, in this order; the state is copied along "data".
BATCH_AXES = ("data", "fsdp")
DEFAULT_MESH = (("data", -1), ("fsdp", 1))
DEFAULT_RULES = ((".*", "fsdp"),)


def mesh_shape(axes: Sequence[Sequence[Any]], num_devices: int) -> dict[str, int]:
    """{axis name: size} of `axes` ((name, size) pairs, one size may be -1) on
    `num_devices` devices; ConfigError for unknown names or sizes that do not fit."""
    shape = {}
    for entry in axes:
        if len(entry) != 2:
            raise ConfigError(f"train.mesh entry {tuple(entry)!r} is not (name, size): "
                              "write e.g. (('data', -1), ('fsdp', 2))")
        name, size = str(entry[0]), int(entry[1])
        if name not in BATCH_AXES:
            raise ConfigError(f"train.mesh axis {name!r} is unknown: use "
                              f"{' and '.join(BATCH_AXES)}")
        if size == 0 or size < -1:
            raise ConfigError(f"train.mesh axis {name!r} has size {size}: use a positive "
                              "size, or -1 for the devices left over")
        if name in shape:
            raise ConfigError(f"train.mesh names axis {name!r} twice: name each axis once")
        shape[name] = size
    if list(shape.values()).count(-1) > 1:
        raise ConfigError("train.mesh has more than one axis of size -1: fix all but one")
    fixed = math.prod(s for s in shape.values() if s != -1)
    free = [name for name, size in shape.items() if size == -1]
    if free:
        if num_devices % fixed:
            raise ConfigError(f"train.mesh fixes {fixed} devices, which does not divide the "
                              f"{num_devices} devices: use a divisor of {num_devices}")
        shape[free[0]] = num_devices // fixed
    elif fixed != num_devices:
        raise ConfigError(f"train.mesh spans {fixed} devices but there are {num_devices}: "
                          "make one axis size -1")
    return shape


def make_mesh(axes: Sequence[Sequence[Any]] = DEFAULT_MESH) -> jax.sharding.Mesh:
    """The mesh over every device of every process."""
    shape = mesh_shape(axes, jax.device_count())
    # Auto axes: XLA propagates the input shardings; models need no sharding annotations.
    return jax.make_mesh(tuple(shape.values()), tuple(shape),
                         axis_types=(AxisType.Auto,) * len(shape))


def check(config, batch_sizes: Sequence[int]) -> None:
    """One-line ConfigErrors, before any work, for a run these devices cannot place: a batch
    size (one per stage) they do not divide, `config.train.mesh` or
    `config.train.sharding_rules`."""
    devices = jax.device_count()
    for batch_size in batch_sizes:
        if batch_size % devices:
            raise ConfigError(f"batch_size {batch_size} is not divisible by the {devices} "
                              f"devices: use a multiple of {devices}")
    make_mesh(config.train.mesh)
    compile_rules(config.train.sharding_rules)


def _batch_axes(mesh: jax.sharding.Mesh) -> tuple[str, ...]:
    return tuple(a for a in BATCH_AXES if a in mesh.axis_names)


def data_sharding(mesh: jax.sharding.Mesh) -> NamedSharding:
    """Split an array's leading (batch) axis across the data-parallel axes."""
    return NamedSharding(mesh, PartitionSpec(_batch_axes(mesh)))


def replicated(mesh: jax.sharding.Mesh) -> NamedSharding:
    """A full copy on every device."""
    return NamedSharding(mesh, PartitionSpec())


def batch_devices(mesh: jax.sharding.Mesh) -> int:
    """How many ways a batch is split."""
    return math.prod(mesh.shape[a] for a in _batch_axes(mesh))


def global_batch(local: dict, mesh: jax.sharding.Mesh) -> dict:
    """This process's rows of a batch -> global arrays split over the data-parallel axes.

    local: {name: [B / num_processes, ...]} (with one process: the whole batch)."""
    sharding = data_sharding(mesh)
    return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, x), local)


def _path_text(path) -> str:
    return "/".join(str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k))))
                    for k in path)


STRATEGIES = ("fsdp", "replicate")


def compile_rules(rules: Sequence[Sequence[str]]) -> list[tuple[re.Pattern, str]]:
    """`rules` ((regex, strategy) pairs) checked and compiled; ConfigError if malformed."""
    compiled = []
    for entry in rules:
        if len(entry) != 2:
            raise ConfigError(f"train.sharding_rules entry {tuple(entry)!r} is not "
                              "(regex, strategy): write e.g. ('.*', 'fsdp')")
        if entry[1] not in STRATEGIES:
            raise ConfigError(f"train.sharding_rules strategy {entry[1]!r} is unknown: use "
                              f"{' or '.join(STRATEGIES)}")
        try:
            compiled.append((re.compile(entry[0]), str(entry[1])))
        except re.error as error:
            raise ConfigError(f"train.sharding_rules regex {entry[0]!r} is invalid: "
                              f"{error}") from None
    return compiled


def leaf_spec(shape: Sequence[int], strategy: str, fsdp: int) -> PartitionSpec:
    """The PartitionSpec `strategy` gives a leaf of `shape` on a mesh whose fsdp axis has
    `fsdp` devices: its largest dimension divisible by `fsdp` (the last of equals) split
    along "fsdp", or a full copy."""
    divisible = [i for i, n in enumerate(shape) if n % fsdp == 0 and n >= fsdp]
    if strategy == "replicate" or fsdp == 1 or not divisible:
        return PartitionSpec()
    axis = max(divisible, key=lambda i: (shape[i], i))
    return PartitionSpec(*[("fsdp" if i == axis else None) for i in range(len(shape))])


def state_shardings(state: Any, mesh: jax.sharding.Mesh,
                    rules: Sequence[Sequence[str]] = DEFAULT_RULES) -> Any:
    """A NamedSharding per leaf of `state` (arrays or ShapeDtypeStructs) by `rules`; a leaf
    no rule matches is replicated."""
    compiled = compile_rules(rules)
    fsdp = mesh.shape.get("fsdp", 1)

    def place(path, leaf):
        text = _path_text(path)
        strategy = next((s for pattern, s in compiled if pattern.search(text)), "replicate")
        return NamedSharding(mesh, leaf_spec(tuple(leaf.shape), strategy, fsdp))

    return jax.tree_util.tree_map_with_path(place, state)
