"""`RunDescription`: one frozen description of what this process runs, decided once.

``connect()`` (for an Accelerator) builds it through ``backends/resolve.py``'s :func:`describe_run`,
and ``AcceleratorState`` records it: its public attributes (``distributed_type``, ``mixed_precision``,
``fsdp_plugin``, ``deepspeed_plugins``, ``dynamo_plugin``, ``parallelism_config``, ``device_mesh`` ...)
read from here, so nothing re-resolves or re-validates them afterwards. The type is plain data: state/
knows no backend, the resolver fills in what the chosen strategy decided.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from accelerate.state.distributed_type import DistributedType, is_multi_device
from accelerate.state.process import PartialState
from accelerate.utils.records import frozen_record


@frozen_record  # not a dataclass, which compiles its methods at import (see accelerate.utils.records)
class Topology:
    """Where this process sits in the job: world size, ranks and device."""

    num_processes: int
    process_index: int
    local_process_index: int
    num_processes_per_node: int
    device: torch.device

    @property
    def node_index(self) -> int:
        """The machine this process runs on (ranks are numbered node by node)."""
        return self.process_index // max(1, self.num_processes_per_node)

    @classmethod
    def of(cls, partial: PartialState) -> Topology:
        return cls(
            num_processes=partial.num_processes,
            process_index=partial.process_index,
            local_process_index=partial.local_process_index,
            num_processes_per_node=partial.num_processes_per_node,
            device=partial.device,
        )


@dataclasses.dataclass(frozen=True)
class RunDescription:
    """The run as resolved once: topology, precision, backend, and the plugins it runs with.

    Plugins are the objects the run uses (a user who edits ``state.fsdp_plugin.<field>`` edits the
    strategy's settings, as upstream); the description itself is never changed in place: assigning
    one of its names on ``AcceleratorState`` records a new description (``dataclasses.replace``).
    """

    topology: Topology
    mixed_precision: str
    # The strategy's type (FSDP, DEEPSPEED, XLA ...) or, without a sharding backend, the process's.
    distributed_type: DistributedType
    # The strategy's name ("single_device", "ddp", "fsdp", "deepspeed", "xla"); None without an Accelerator.
    strategy: str | None
    deepspeed_plugins: dict[str, Any] | None = None
    fsdp_plugin: Any = None
    is_fsdp2: bool = False  # True only when FSDP shards (every FSDP setting runs on FSDP2 here)
    # Whether the strategy composes a ParallelismConfig's mesh dimensions (Strategy.composes_parallelism).
    composes_parallelism: bool = False
    torch_tp_plugin: Any = None
    megatron_lm_plugin: Any = None
    dynamo_plugin: Any = None
    parallelism_config: Any = None
    device_mesh: Any = None
    # This process's place among the data-parallel replicas and among the shards of one replica.
    data_parallel_rank: int = 0
    data_parallel_shard_rank: int = 0
    # Its place in its tensor- and context-parallel groups (0 without them).
    tensor_parallel_rank: int = 0
    context_parallel_rank: int = 0
    # How many different batches one step reads, and which one this process reads: the data-parallel
    # coordinate. Every rank of one tensor/context-parallel group reads the same batch. None: one
    # batch per process (num_processes, process_index).
    data_parallel_size: int | None = None
    data_parallel_index: int | None = None

    @property
    def multi_device(self) -> bool:
        """Several processes on accelerator devices (upstream's meaning: not CPU, MPS or a sharding type)."""
        return is_multi_device(self.distributed_type)

    @property
    def dynamo_backend(self) -> str:
        return "no" if self.dynamo_plugin is None else str(self.dynamo_plugin.backend)

    @property
    def data_shards(self) -> tuple[int, int]:
        """(number of data shards, this process's shard): what prepared dataloaders split by."""
        if self.data_parallel_size is None or self.data_parallel_index is None:
            return self.topology.num_processes, self.topology.process_index
        return self.data_parallel_size, self.data_parallel_index

    @property
    def deepspeed_plugin(self) -> Any:
        """The selected DeepSpeed plugin (None without DeepSpeed)."""
        plugins = self.deepspeed_plugins
        return next((p for p in plugins.values() if p.selected), None) if plugins else None


def describe_process(
    partial: PartialState,
    *,
    mixed_precision: str | None,
    deepspeed_plugins: dict[str, Any] | None = None,
    fsdp_plugin: Any = None,
    dynamo_plugin: Any = None,
    parallelism_config: Any = None,
    distributed_type: DistributedType | None = None,
) -> RunDescription:
    """The run of a process without a strategy: ``AcceleratorState(...)`` called directly.

    Its settings are recorded as given: only an Accelerator resolves and checks them (the backend
    table, ``backends/resolve.py``); with DeepSpeed plugins the run is a DeepSpeed one, else the
    process's own type.
    ``describe_run`` in ``backends/resolve.py`` starts from this and adds the strategy's facts.
    """
    if distributed_type is None:
        distributed_type = DistributedType.DEEPSPEED if deepspeed_plugins else partial.distributed_type
    return RunDescription(
        topology=Topology.of(partial),
        mixed_precision=mixed_precision or "no",
        distributed_type=distributed_type,
        strategy=None,
        deepspeed_plugins=deepspeed_plugins,
        fsdp_plugin=fsdp_plugin,
        dynamo_plugin=dynamo_plugin,
        parallelism_config=parallelism_config,
        data_parallel_rank=partial.process_index,
    )
