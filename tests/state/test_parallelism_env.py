"""The run's ParallelismConfig from the launcher's variables, from torch_tp_plugin, or from the script (which wins)."""

from __future__ import annotations

import warnings

import pytest

from accelerate import Accelerator
from accelerate.config.env import read_launch_env
from accelerate.state import AcceleratorState
from accelerate.state.parallelism import ParallelismConfig
from accelerate.state.parallelism_env import (
    TP_PLUGIN_DEPRECATION,
    parallelism_config_from_env,
    resolve_parallelism_config,
)
from accelerate.utils import TorchTensorParallelPlugin
from accelerate.utils.errors import NotAvailableYetError
from accelerate.utils.parallel_configs import DeepSpeedSequenceParallelConfig, TorchContextParallelConfig

ON = {"ACCELERATE_USE_PARALLELISM_CONFIG": "true"}


def test_nothing_without_the_switch() -> None:
    assert parallelism_config_from_env(read_launch_env({"PARALLELISM_CONFIG_TP_SIZE": "2"})) is None


def test_sizes_and_backends_from_the_variables() -> None:
    config = parallelism_config_from_env(read_launch_env({**ON, "PARALLELISM_CONFIG_DP_SHARD_SIZE": "2",
                                                          "PARALLELISM_CONFIG_TP_SIZE": "2"}))  # fmt: skip
    assert config is not None
    assert (config.dp_replicate_size, config.dp_shard_size, config.tp_size, config.cp_size, config.sp_size) == (
        1, 2, 2, 1, 1,
    )  # fmt: skip
    assert config.total_size == 4 and config.cp_handler is None and config.sp_handler is None


def test_handlers_only_for_dimensions_in_use() -> None:
    config = parallelism_config_from_env(read_launch_env({
        **ON, "PARALLELISM_CONFIG_CP_SIZE": "2", "PARALLELISM_CONFIG_CP_COMM_STRATEGY": "alltoall"}))  # fmt: skip
    assert config is not None and config.cp_handler == TorchContextParallelConfig(cp_comm_strategy="alltoall")
    config = parallelism_config_from_env(read_launch_env({
        **ON, "PARALLELISM_CONFIG_SP_SIZE": "2", "PARALLELISM_CONFIG_SP_SEQ_LENGTH": "128",
        "PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE": "false",
        "PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION": "sdpa"}))  # fmt: skip
    assert config is not None and config.sp_handler == DeepSpeedSequenceParallelConfig(128, False, "sdpa")
    with pytest.raises(ValueError, match="PARALLELISM_CONFIG_SP_SEQ_LENGTH='long' must be a whole number"):
        parallelism_config_from_env(read_launch_env({**ON, "PARALLELISM_CONFIG_SP_SIZE": "2",
                                                     "PARALLELISM_CONFIG_SP_SEQ_LENGTH": "long"}))  # fmt: skip


def test_the_scripts_config_wins_without_a_warning() -> None:
    mine = ParallelismConfig(dp_replicate_size=1)
    launch = read_launch_env({**ON, "PARALLELISM_CONFIG_TP_SIZE": "2"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert resolve_parallelism_config(mine, None, launch) is mine
    assert resolve_parallelism_config(None, None, launch).tp_size == 2
    assert resolve_parallelism_config(None, None, None) is None  # a direct AcceleratorState reads no launcher


def test_torch_tp_plugin_means_a_tp_size_with_upstreams_warning() -> None:
    with pytest.warns(FutureWarning, match="TorchTensorParallelPlugin` is deprecated"):
        config = resolve_parallelism_config(None, TorchTensorParallelPlugin(tp_size=2))
    assert config == ParallelismConfig(tp_size=2)
    with pytest.warns(FutureWarning):  # an explicit config still wins over the plugin, as upstream
        assert (
            resolve_parallelism_config(ParallelismConfig(), TorchTensorParallelPlugin(tp_size=2)).tp_size == 1
        )
    with pytest.warns(FutureWarning), pytest.raises(TypeError, match="needs a TorchTensorParallelPlugin"):
        resolve_parallelism_config(None, object())
    assert "ParallelismConfig` with `tp_size`" in TP_PLUGIN_DEPRECATION


def test_accelerator_builds_the_launchers_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELERATE_USE_PARALLELISM_CONFIG", "true")
    monkeypatch.setenv("PARALLELISM_CONFIG_DP_REPLICATE_SIZE", "1")
    accelerator = Accelerator(cpu=True)
    assert accelerator.parallelism_config == ParallelismConfig(dp_replicate_size=1)
    assert accelerator.state.parallelism_config is accelerator.parallelism_config


def test_accelerator_with_torch_tp_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.warns(FutureWarning, match="deprecated"):
        accelerator = Accelerator(cpu=True, torch_tp_plugin=TorchTensorParallelPlugin(tp_size=1))
    assert accelerator.parallelism_config == ParallelismConfig(tp_size=1)


def test_a_mismatched_launcher_config_is_an_error_naming_the_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    # One process, but the variables describe two (set by hand: the launcher itself refuses this).
    monkeypatch.setenv("ACCELERATE_USE_PARALLELISM_CONFIG", "true")
    monkeypatch.setenv("PARALLELISM_CONFIG_DP_REPLICATE_SIZE", "2")
    with pytest.raises((ValueError, NotAvailableYetError), match="2"):
        Accelerator(cpu=True)


def test_direct_accelerator_state_maps_the_plugin() -> None:
    with pytest.warns(FutureWarning):
        state = AcceleratorState(cpu=True, torch_tp_plugin=TorchTensorParallelPlugin(tp_size=1))
    assert state.parallelism_config == ParallelismConfig(tp_size=1)
