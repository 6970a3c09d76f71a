"""Data parallelism over every local device: the batch is split on its first axis, the
train state is replicated. The same code runs on one CPU, 8 simulated CPU devices
(XLA_FLAGS=--xla_force_host_platform_device_count=8), GPUs or TPUs."""

from __future__ import annotations

import jax
from jax.sharding import AxisType, NamedSharding, PartitionSpec


def make_mesh() -> jax.sharding.Mesh:
    """A one-axis ("data") mesh over all devices."""
    # Auto axes: XLA propagates the batch sharding; models need no sharding annotations.
    return jax.make_mesh((jax.device_count(),), ("data",), axis_types=(AxisType.Auto,))


def data_sharding(mesh: jax.sharding.Mesh) -> NamedSharding:
    """Split an array's leading (batch) axis across the data axis."""
    return NamedSharding(mesh, PartitionSpec("data"))


def replicated(mesh: jax.sharding.Mesh) -> NamedSharding:
    """A full copy on every device."""
    return NamedSharding(mesh, PartitionSpec())
