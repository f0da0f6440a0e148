"""ParallelismConfig: sizes, flags, dimension names, JSON; a data-parallel mesh over the real group;
every other kind of parallelism refused with the one "not available yet" error."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import torch.distributed as dist

from accelerate import Accelerator
from accelerate.parallelism_config import ParallelismConfig
from accelerate.utils.dataclasses import TorchContextParallelConfig, TorchTensorParallelConfig
from accelerate.utils.errors import NotAvailableYetError
from tests.helpers.pool import WorkerPool


def test_fields_and_defaults_match_upstream() -> None:
    names = [f.name for f in dataclasses.fields(ParallelismConfig)]
    assert names == [
        "dp_replicate_size", "dp_shard_size", "tp_size", "cp_size", "cp_backend", "sp_size", "sp_backend",
        "tp_handler", "cp_handler", "sp_handler",
        # beyond upstream, after its fields (positional calls keep working): pipeline parallelism
        "pp_size", "pp_schedule", "pp_microbatches", "pp_split_points", "pp_loss_fn",
        "ep_size",  # expert parallelism
    ]  # fmt: skip
    config = ParallelismConfig()
    assert (config.dp_replicate_size, config.dp_shard_size, config.tp_size, config.cp_size, config.sp_size) == (
        1, 1, 1, 1, 1,
    )  # fmt: skip
    assert config.cp_backend == "torch" and config.sp_backend == "deepspeed"
    assert config.total_size == 1 and config.active_mesh_dims == [] and config.device_mesh is None


def test_sizes_flags_and_dimension_names() -> None:
    config = ParallelismConfig(dp_replicate_size=2, dp_shard_size=3, tp_size=2, cp_size=2)
    assert config.total_size == 24
    assert config.data_parallel_size == 6 and config.non_data_parallel_size == 4
    assert config.dp_replicate_enabled and config.dp_shard_enabled and config.tp_enabled and config.cp_enabled
    assert not config.sp_enabled
    assert config.active_mesh_dims == ["dp_replicate", "dp_shard", "cp", "tp"]
    assert config.dp_dim_names == ["dp_replicate", "dp_shard"]
    assert config.non_dp_dim_names == ["cp", "tp"]
    assert config.dp_shard_cp_dim_names == ["dp_shard", "cp"]
    assert config.dp_cp_dim_names == ["dp_replicate", "dp_shard", "cp"]
    assert config.fsdp_dim_names == ["dp_replicate", "dp_shard", "cp"]


def test_get_mesh_gives_enabled_names_and_sizes_outermost_first() -> None:
    config = ParallelismConfig(tp_size=4, dp_replicate_size=2, cp_size=3)
    assert config._get_mesh() == (("dp_replicate", "cp", "tp"), (2, 3, 4))
    assert ParallelismConfig(dp_shard_size=8)._get_mesh() == (("dp_shard",), (8,))
    assert ParallelismConfig()._get_mesh() == ((), ())


def test_to_json_round_trips_sizes_and_handlers() -> None:
    config = ParallelismConfig(
        dp_replicate_size=2, tp_handler=TorchTensorParallelConfig(enable_async_tp=True),
        cp_handler=TorchContextParallelConfig(),
    )  # fmt: skip
    data = json.loads(config.to_json())
    assert data["dp_replicate_size"] == 2 and data["tp_size"] == 1
    assert data["tp_handler"] == {"enable_async_tp": True}
    assert data["cp_handler"] == {"cp_comm_strategy": "allgather"}
    assert "device_mesh" not in data


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"tp_size": 0}, "tp_size=0"),
        ({"dp_shard_size": 1.5}, "dp_shard_size=1.5"),
        ({"cp_backend": "ring"}, "cp_backend='ring'"),
        ({"cp_size": 2, "sp_size": 2}, "use one of them"),
        ({"ep_size": 0}, "ep_size=0"),
        ({"ep_size": 2, "pp_size": 2}, r"ep_size=2, pp_size=2\): ep with pp is not supported yet"),
        ({"ep_size": 2, "sp_size": 2}, "ep with sp is not supported yet"),
    ],
)
def test_invalid_values_are_errors_naming_them(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ParallelismConfig(**kwargs)  # type: ignore[arg-type]


def test_deepspeed_ulysses_and_cpu_context_parallelism_are_refused_with_the_reason() -> None:
    with pytest.raises(NotAvailableYetError, match="sp_size=2, sp_backend='deepspeed'"):
        ParallelismConfig(sp_size=2, sp_backend="deepspeed").build_device_mesh("cpu")
    with pytest.raises(NotAvailableYetError, match="sp_size=2, sp_backend='deepspeed'"):
        Accelerator(cpu=True, parallelism_config=ParallelismConfig(sp_size=2), deepspeed_plugin=_deepspeed())
    with pytest.raises(NotAvailableYetError, match="cp_size=2.*no CPU kernel"):
        ParallelismConfig(cp_size=2).build_device_mesh("cpu")
    with pytest.raises(NotAvailableYetError, match=r"cp_size=2\) on cpu"):
        Accelerator(cpu=True, parallelism_config=ParallelismConfig(cp_size=2))


@pytest.mark.parametrize(
    "sizes", [{"tp_size": 2}, {"dp_shard_size": 2}, {"dp_replicate_size": 2, "tp_size": 2}]
)
def test_sizes_that_do_not_multiply_to_the_world_are_errors_naming_each(sizes: dict[str, int]) -> None:
    with pytest.raises(
        ValueError,
        match=r"spans \d processes \(dp_replicate_size=\d, dp_shard_size=\d, cp_size=1, "
        r"sp_size=1, tp_size=\d.*this run has 1",
    ):
        Accelerator(cpu=True, parallelism_config=ParallelismConfig(**sizes))  # type: ignore[arg-type]


def test_unset_dp_shard_takes_the_processes_the_other_sizes_leave() -> None:
    config = ParallelismConfig(tp_size=2)
    config.validate(8)
    assert (config.dp_shard_size, config.tp_size, config.total_size) == (4, 2, 8)
    given = ParallelismConfig(dp_shard_size=1, tp_size=2)
    with pytest.raises(ValueError, match="dp_shard_size=1.*this run has 8"):
        given.validate(8)
    assert ParallelismConfig(dp_replicate_size=2, tp_size=2).coordinates(3) == {
        "pp": 0, "dp_replicate": 1, "dp_shard": 0, "cp": 0, "sp": 0, "tp": 1,
    }  # fmt: skip
    assert ParallelismConfig(dp_shard_size=2, tp_size=2).data_parallel_index(3) == 1


def test_one_process_needs_no_mesh_and_checks_the_total() -> None:
    accelerator = Accelerator(cpu=True, parallelism_config=ParallelismConfig())
    assert accelerator.parallelism_config is not None and accelerator.torch_device_mesh is None
    with pytest.raises(ValueError, match="needs a torch.distributed process group"):
        ParallelismConfig().build_device_mesh("cpu")
    with pytest.raises(ValueError, match="spans 2 processes .* this run has 1"):
        ParallelismConfig(dp_replicate_size=2).get_device_mesh("cpu")
    with pytest.raises(ValueError, match="pass device_type"):
        ParallelismConfig().get_device_mesh()


def test_accelerator_refuses_what_is_not_a_parallelism_config() -> None:
    with pytest.raises(TypeError, match="needs a ParallelismConfig, got object"):
        Accelerator(cpu=True, parallelism_config=object())  # type: ignore[arg-type]


def _data_parallel_mesh() -> dict[str, object]:
    accelerator = Accelerator(cpu=True, parallelism_config=ParallelismConfig(dp_replicate_size=2))
    mesh = accelerator.torch_device_mesh
    value = torch.tensor([float(accelerator.process_index + 1)])
    dist.all_reduce(value, group=mesh.get_group("dp_replicate"))
    return {
        "names": mesh.mesh_dim_names,
        "shape": tuple(mesh.shape),
        "local_rank": mesh.get_local_rank("dp_replicate"),
        "sum": value.item(),
        "same_as_state": accelerator.state.device_mesh is mesh,
        "dp_rank": accelerator.data_parallel_rank,
    }


def test_two_processes_get_a_one_dimensional_data_parallel_mesh(pool2: WorkerPool) -> None:
    results = pool2.run(_data_parallel_mesh)
    for rank, result in enumerate(results):
        assert result == {
            "names": ("dp_replicate",), "shape": (2,), "local_rank": rank, "sum": 3.0, "same_as_state": True,
            "dp_rank": rank,
        }  # fmt: skip


def test_unset_sizes_come_from_the_launchers_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    # As upstream: a ParallelismConfig() built inside `accelerate launch --parallelism_config_tp_size 2`
    # has the launcher's sizes (with or without ACCELERATE_USE_PARALLELISM_CONFIG); given ones win.
    monkeypatch.setenv("PARALLELISM_CONFIG_TP_SIZE", "2")
    monkeypatch.setenv("PARALLELISM_CONFIG_DP_SHARD_SIZE", "3")
    monkeypatch.setenv("PARALLELISM_CONFIG_CP_BACKEND", "torch")
    config = ParallelismConfig()
    assert (config.tp_size, config.dp_shard_size, config.dp_replicate_size, config.cp_size) == (2, 3, 1, 1)
    assert config.total_size == 6 and config.cp_backend == "torch"
    assert ParallelismConfig(tp_size=1).tp_size == 1
    monkeypatch.setenv("PARALLELISM_CONFIG_TP_SIZE", "two")
    with pytest.raises(ValueError, match="PARALLELISM_CONFIG_TP_SIZE='two' must be an integer"):
        ParallelismConfig()


def test_an_explicit_config_keeps_the_launchers_tp_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARALLELISM_CONFIG_TP_SIZE", "2")
    # One process here: the launcher's tp_size=2 is kept, so the run says it needs two processes
    # instead of silently training without tensor parallelism.
    with pytest.raises(ValueError, match="tp_size=2"):
        Accelerator(cpu=True, parallelism_config=ParallelismConfig())


def test_context_parallel_config_constructs_on_cpu() -> None:
    # Upstream builds it anywhere; only running context parallelism needs CUDA.
    config = ParallelismConfig(cp_size=2)
    assert config.cp_enabled and config.total_size == 2


def test_dimensions_in_use_get_upstreams_default_handlers() -> None:
    config = ParallelismConfig(tp_size=2, cp_size=2, dp_shard_size=2)
    assert (
        config.tp_handler == TorchTensorParallelConfig() and config.cp_handler == TorchContextParallelConfig()
    )
    plain = ParallelismConfig(dp_shard_size=2)
    assert plain.tp_handler is None and plain.cp_handler is None
    mine = TorchTensorParallelConfig(enable_async_tp=True)
    assert ParallelismConfig(tp_size=2, tp_handler=mine).tp_handler is mine


def _deepspeed() -> object:
    from accelerate.utils import DeepSpeedPlugin

    return DeepSpeedPlugin(zero_stage=2)


def test_an_unset_sp_backend_follows_the_engine_and_a_given_one_must_match_it() -> None:
    config = ParallelismConfig(sp_size=2)
    assert (
        config.sp_backend == "torch" and ParallelismConfig().sp_backend == "deepspeed"
    )  # upstream's default at 1
    config.resolve_sp_backend(deepspeed_engine=True)
    assert config.sp_backend == "deepspeed"  # upstream's meaning where DeepSpeed is the engine
    config = ParallelismConfig(sp_size=2, sp_backend="deepspeed")
    with pytest.raises(ValueError, match="sp_backend='deepspeed'.*no DeepSpeed engine.*sp_backend='torch'"):
        config.resolve_sp_backend(deepspeed_engine=False)
    with pytest.raises(ValueError, match="sp_backend='deepspeed'.*no DeepSpeed engine"):
        Accelerator(cpu=True, parallelism_config=ParallelismConfig(sp_size=2, sp_backend="deepspeed"))
    with pytest.raises(ValueError, match="sp_backend='torch'.*DeepSpeed engine"):
        ParallelismConfig(sp_size=2, sp_backend="torch").resolve_sp_backend(deepspeed_engine=True)


def test_native_sequence_parallelism_is_a_mesh_dimension_fsdp_shards_over() -> None:
    config = ParallelismConfig(dp_shard_size=2, sp_size=2)
    assert config.active_mesh_dims == ["dp_shard", "sp"] and config.total_size == 4
    assert config.shard_dim_names == ["dp_shard", "sp"] and config.dp_shard_cp_dim_names == ["dp_shard"]
    assert config.non_data_parallel_size == 2 and config.data_parallel_size == 2
    assert config.coordinates(3) == {"dp_replicate": 0, "dp_shard": 1, "pp": 0, "cp": 0, "sp": 1, "tp": 0}
    assert config.data_parallel_index(2) == config.data_parallel_index(3) == 1  # one sp group, one data shard
    with pytest.raises(ValueError, match="sp_size=2, tp_size=2.*both split the attention heads"):
        ParallelismConfig(sp_size=2, tp_size=2)
    with pytest.raises(ValueError, match="sp_backend='ring'"):
        ParallelismConfig(sp_size=2, sp_backend="ring")
    with pytest.raises(ValueError, match=r"sp_size=2, tp_size=1.*this run has 1"):
        Accelerator(cpu=True, parallelism_config=ParallelismConfig(sp_size=2))


def test_ep_is_carved_from_dp_shard_and_must_divide_it() -> None:
    config = ParallelismConfig(ep_size=2)
    config.validate(4)  # adds no process: dp_shard takes all 4, ep splits it into 2 x 2
    assert (config.total_size, config.dp_shard_size, config.ep_enabled) == (4, 4, True)
    assert [config.coordinates(r)["ep"] for r in range(4)] == [0, 1, 0, 1]
    assert "ep" not in ParallelismConfig(dp_shard_size=2).coordinates(1)
    with pytest.raises(
        ValueError, match=r"ep_size=4, dp_shard_size=2\): .*ep_size must divide dp_shard_size"
    ):
        ParallelismConfig(ep_size=4, dp_shard_size=2).validate(2)
