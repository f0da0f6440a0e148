"""Which strategy runs inside a replica group: DDP, FSDP2 (by shard), or a refusal naming why."""

from __future__ import annotations

import pytest
import torch

from accelerate import FaultToleranceKwargs
from accelerate.backends.base import Strategy
from accelerate.backends.fault_tolerance.strategy import FaultTolerantStrategy, fault_tolerant
from accelerate.backends.fsdp.plugin import FullyShardedDataParallelPlugin
from accelerate.backends.fsdp.strategy import FSDPStrategy

CPU = torch.device("cpu")


def test_a_group_of_several_processes_runs_ddp_inside_with_its_rank_and_size() -> None:
    made = fault_tolerant(Strategy(CPU), FaultToleranceKwargs(), num_processes=2, process_index=1)
    assert isinstance(made, FaultTolerantStrategy) and made.sharding is None
    assert (made.runtime.group_rank, made.runtime.group_size, made.runtime.sharded) == (1, 2, False)


def test_fsdp2_inside_the_group_shards_and_heals_by_shard() -> None:
    fsdp = FSDPStrategy(
        CPU, FullyShardedDataParallelPlugin(fsdp_version=2), mixed_precision="no", num_processes=2,
        num_processes_per_node=2,
    )  # fmt: skip
    made = fault_tolerant(fsdp, FaultToleranceKwargs(), num_processes=2, process_index=0)
    assert isinstance(made, FaultTolerantStrategy) and made.sharding is fsdp and made.runtime.sharded


def test_a_parallelism_mesh_or_an_engine_that_steps_itself_is_refused() -> None:
    class Mesh(Strategy):
        name = "parallel"
        composes_parallelism = True

    class Engine(Strategy):
        name = "deepspeed"
        owns_backward = True

    with pytest.raises(ValueError, match="parallel strategy's parallelism mesh.*DDP, FSDP2.*or HSDP"):
        fault_tolerant(Mesh(CPU), FaultToleranceKwargs(), num_processes=2)
    with pytest.raises(ValueError, match="deepspeed strategy, which runs the optimizer step"):
        fault_tolerant(Engine(CPU), FaultToleranceKwargs(), num_processes=2)


def test_a_parallelism_config_of_data_parallel_dimensions_only_runs_as_hsdp_inside_the_group() -> None:
    from types import SimpleNamespace

    class Hsdp(FSDPStrategy):
        name = "parallel"
        composes_parallelism = True
        shards = True

        def optimizer_step(self, optimizer: torch.optim.Optimizer, step: object) -> object:  # type: ignore[override]
            return None  # the parallel strategy's override (it reduces expert gradients)

        def mesh_shape(self) -> tuple[tuple[int, ...], tuple[str, ...]]:
            return (2, 2), ("dp_replicate", "dp_shard")

    dims = ("dp_shard_enabled", "tp_enabled", "cp_enabled", "sp_enabled", "pp_enabled", "ep_enabled")
    for extra in (None, "tp_enabled"):
        hsdp = Hsdp(CPU, FullyShardedDataParallelPlugin(fsdp_version=2), mixed_precision="no", num_processes=4,
                    num_processes_per_node=4)  # fmt: skip
        hsdp.config = SimpleNamespace(**{d: d in ("dp_shard_enabled", extra) for d in dims})  # type: ignore[attr-defined]
        if extra is None:
            made = fault_tolerant(hsdp, FaultToleranceKwargs(), num_processes=4, process_index=3)
            assert made.sharding is hsdp and made.runtime.sharded  # type: ignore[attr-defined]
            assert made.runtime.layout == "FSDP2 over 4 processes, mesh dp_replicate=2 x dp_shard=2"  # type: ignore[attr-defined]
        else:  # tensor parallelism too: refused, naming what a group may run
            with pytest.raises(ValueError, match="DDP, FSDP2 .* or HSDP"):
                fault_tolerant(hsdp, FaultToleranceKwargs(), num_processes=4)
