"""accelerate.utils.dataclasses: TorchDynamoPlugin, the enums, ProfileKwargs, the parallelism handler
configs, get_module_class_from_name, and the names re-exported from their homes."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import torch

from accelerate import Accelerator
from accelerate.utils import dataclasses as dc


def test_torch_dynamo_plugin_fields_and_kwargs() -> None:
    assert [f.name for f in dataclasses.fields(dc.TorchDynamoPlugin)] == [
        "backend", "mode", "fullgraph", "dynamic", "options", "disable", "use_regional_compilation",
    ]  # fmt: skip
    assert dc.DynamoPlugin is dc.TorchDynamoPlugin
    # Upstream's defaults, filled at construction (outside a launch: no compilation).
    assert dc.TorchDynamoPlugin().to_kwargs() == {"backend": "no", "mode": "default", "fullgraph": False}
    plugin = dc.TorchDynamoPlugin(backend="INDUCTOR", mode="max-autotune", dynamic=False, options={"x": 1})
    assert plugin.enabled
    assert plugin.to_kwargs() == {"backend": "inductor", "mode": "max-autotune", "fullgraph": False, "dynamic": False,
                                  "options": {"x": 1}}  # fmt: skip
    assert dc.TorchDynamoPlugin(backend=dc.DynamoBackend.EAGER, disable=True).to_kwargs() == {
        "backend": "eager", "mode": "default", "fullgraph": False, "disable": True,
    }  # fmt: skip


def test_dynamo_plugin_with_backend_none_defers_to_the_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    # What transformers' Trainer passes when torch_compile is off.
    model = Accelerator(cpu=True, dynamo_plugin=dc.TorchDynamoPlugin(backend=None, mode=None)).prepare(
        torch.nn.Linear(2, 2)
    )
    assert isinstance(model, torch.nn.Linear)
    from accelerate.state import reset_state

    reset_state()
    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "eager")
    accelerator = Accelerator(cpu=True, dynamo_plugin=dc.TorchDynamoPlugin())
    # Upstream's plugin holds the enum member (upper-case value) whatever the case it was given in.
    assert accelerator.dynamo_plugin.backend == dc.DynamoBackend.EAGER
    assert accelerator.state.dynamo_backend == dc.DynamoBackend.EAGER
    assert accelerator.state.dynamo_plugin is accelerator.dynamo_plugin


def test_dynamo_plugin_reads_the_launchers_settings_when_built(monkeypatch: pytest.MonkeyPatch) -> None:
    # As upstream: TorchDynamoPlugin() inside `accelerate launch --dynamo_backend ...` has the launcher's settings.
    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "inductor")
    monkeypatch.setenv("ACCELERATE_DYNAMO_MODE", "reduce-overhead")
    monkeypatch.setenv("ACCELERATE_DYNAMO_USE_FULLGRAPH", "true")
    monkeypatch.setenv("ACCELERATE_DYNAMO_USE_DYNAMIC", "false")
    monkeypatch.setenv("ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", "1")
    plugin = dc.TorchDynamoPlugin()
    assert plugin.backend == dc.DynamoBackend.INDUCTOR and plugin.mode == "reduce-overhead"
    assert (plugin.fullgraph, plugin.dynamic, plugin.use_regional_compilation) == (True, False, True)
    assert dc.TorchDynamoPlugin(backend="eager", fullgraph=False).fullgraph is False  # given fields win
    monkeypatch.delenv("ACCELERATE_DYNAMO_USE_DYNAMIC")
    assert dc.TorchDynamoPlugin().dynamic is None  # unset: torch decides, as upstream


def test_dynamo_backend_argument_fills_an_unset_plugin_backend() -> None:
    accelerator = Accelerator(
        cpu=True, dynamo_backend="eager", dynamo_plugin=dc.TorchDynamoPlugin(mode="default")
    )
    assert accelerator.dynamo_plugin.backend == dc.DynamoBackend.EAGER


def test_dynamo_plugin_errors() -> None:
    with pytest.raises(ValueError, match="set the backend in one place"):
        Accelerator(cpu=True, dynamo_backend="eager", dynamo_plugin=dc.TorchDynamoPlugin(backend="inductor"))


def test_enums() -> None:
    assert "INDUCTOR" in dc.DynamoBackend and "inductor" not in dc.DynamoBackend
    assert dc.DynamoBackend.INDUCTOR in dc.DynamoBackend and dc.RNGType.TORCH not in dc.DynamoBackend
    assert str(dc.DynamoBackend.NO) == "NO" and dc.DynamoBackend("EAGER") is dc.DynamoBackend.EAGER
    assert dc.LoggerType.list() == [
        "all", "aim", "tensorboard", "wandb", "comet_ml", "mlflow", "clearml", "dvclive", "swanlab", "trackio",
    ]  # fmt: skip
    assert dc.RNGType("generator") is dc.RNGType.GENERATOR and dc.RNGType.TORCH == "torch"
    assert dc.SageMakerDistributedType.DATA_PARALLEL.value == "DATA_PARALLEL"
    assert isinstance(dc.EnumWithContains, type) and issubclass(dc.BaseEnum, dc.BaseEnum)


def test_names_defined_elsewhere_are_the_same_objects() -> None:
    from accelerate.state import ComputeEnvironment, DistributedType
    from accelerate.utils.modeling import CustomDtype

    assert dc.DistributedType is DistributedType
    assert dc.ComputeEnvironment is ComputeEnvironment
    assert dc.CustomDtype is CustomDtype
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        dc.Nope  # noqa: B018


def test_dataclasses_module_stays_torch_free() -> None:
    code = "import sys, accelerate.utils.dataclasses as d; d.TorchDynamoPlugin(); d.ProfileKwargs(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_profile_kwargs_validation_and_build() -> None:
    with pytest.raises(ValueError, match="'gpu'"):
        dc.ProfileKwargs(activities=["gpu"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="unknown keys \\['steps'\\]"):
        dc.ProfileKwargs(schedule_option={"steps": 1})
    assert dc.ProfileKwargs(record_shapes=True).to_kwargs() == {"record_shapes": True}
    profiler = dc.ProfileKwargs(
        activities=["cpu"], schedule_option={"wait": 0, "warmup": 1, "active": 1}
    ).build()
    assert isinstance(profiler, torch.profiler.profile)
    assert profiler.activities == {torch.profiler.ProfilerActivity.CPU}


def test_parallelism_handler_configs() -> None:
    assert dc.TorchContextParallelConfig().cp_comm_strategy == "allgather"
    with pytest.raises(ValueError, match="'ring'"):
        dc.TorchContextParallelConfig(cp_comm_strategy="ring")  # type: ignore[arg-type]
    assert dc.TorchTensorParallelConfig().enable_async_tp is False
    assert dc.TorchTensorParallelPlugin().tp_size == 1
    assert dc.DeepSpeedSequenceParallelConfig(sp_seq_length=8).sp_seq_length == 8


def test_get_module_class_from_name() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.ReLU()))
    assert dc.get_module_class_from_name(model, "ReLU") is torch.nn.ReLU
    assert dc.get_module_class_from_name(model, "Sequential") is torch.nn.Sequential
    assert dc.get_module_class_from_name(model, "Conv2d") is None
