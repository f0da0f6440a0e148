"""DeepSpeedPlugin, HfDeepSpeedConfig and "auto" filling: one process, no engine is built."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from accelerate import Accelerator, DistributedType
from accelerate.backends.deepspeed.setup import PrepareFacts, complete_config
from accelerate.utils import (
    DeepSpeedPlugin,
    DummyOptim,
    DummyScheduler,
    GradientAccumulationPlugin,
    HfDeepSpeedConfig,
)


def _loader(batch_size: int = 4) -> DataLoader:
    return DataLoader(TensorDataset(torch.randn(16, 3), torch.randn(16, 1)), batch_size=batch_size)


def test_plugin_defaults_match_upstream() -> None:
    plugin = DeepSpeedPlugin()
    assert plugin.zero_stage == 2 and plugin.gradient_accumulation_steps == "auto"
    assert plugin.offload_optimizer_device == "none" and plugin.offload_param_device == "none"
    assert plugin.zero3_init_flag is False and plugin.zero3_save_16bit_model is False
    assert plugin.is_train_batch_min is True
    config = plugin.deepspeed_config
    assert config["zero_optimization"]["stage"] == 2
    assert config["train_micro_batch_size_per_gpu"] == "auto" and config["gradient_clipping"] == 0.0


def test_plugin_reads_a_json_file_and_fills_its_autos_from_fields(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": "auto"}, "gradient_clipping": 0.5}))
    plugin = DeepSpeedPlugin(hf_ds_config=str(path), zero_stage=3)
    assert plugin.get_value("zero_optimization.stage") == 3 and plugin.zero_stage == 3
    assert plugin.gradient_clipping == 0.5  # the file's concrete value sets the field
    assert plugin.hf_ds_config.is_zero3() and not plugin.hf_ds_config.is_offload()


def test_hf_deepspeed_config_lookups() -> None:
    cfg = HfDeepSpeedConfig(
        {
            "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
            "fp16": {"enabled": False},
        }
    )
    assert (
        cfg.is_zero2()
        and cfg.is_offload()
        and cfg.is_false("fp16.enabled")
        and not cfg.is_true("fp16.enabled")
    )
    assert cfg.get_value("zero_optimization.offload_optimizer.device") == "cpu"
    assert cfg.get_value("missing.key", 7) == 7
    cfg.del_config_sub_tree("fp16")
    assert "fp16" not in cfg.config
    with pytest.raises(ValueError, match="missing"):
        cfg.del_config_sub_tree("missing", must_exist=True)


def test_autos_filled_from_what_prepare_knows() -> None:
    config = {
        "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
        "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto", "betas": "auto"}},
        "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": "auto", "warmup_num_steps": "auto", "warmup_max_lr": "auto"}},
    }  # fmt: skip
    model = torch.nn.Linear(3, 1)
    optimizer = DummyOptim(model.parameters(), lr=0.1, weight_decay=0.01, betas=(0.8, 0.9))
    facts = PrepareFacts(
        4, 2, 2, model, optimizer, DummyScheduler(optimizer, total_num_steps=100, warmup_num_steps=10)
    )
    done = complete_config(config, facts)
    assert (
        done["train_micro_batch_size_per_gpu"],
        done["gradient_accumulation_steps"],
        done["train_batch_size"],
    ) == (4, 2, 16)
    assert done["optimizer"]["params"] == {"lr": 0.1, "weight_decay": 0.01, "betas": [0.8, 0.9]}
    assert done["scheduler"]["params"] == {
        "total_num_steps": 100,
        "warmup_num_steps": 10,
        "warmup_max_lr": 0.1,
    }
    assert config["train_batch_size"] == "auto"  # the plugin's own config is left as the user wrote it


def test_an_auto_nothing_fills_names_the_key_and_the_fix() -> None:
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"},
    }
    with pytest.raises(
        ValueError, match=r"zero_optimization.reduce_bucket_size: \"auto\" \(set it in the config"
    ):
        complete_config(config, PrepareFacts(4, 1, 2, torch.nn.Linear(2, 2), None, None))


def test_json_contradicting_the_dataloader_names_both() -> None:
    plugin = DeepSpeedPlugin(
        hf_ds_config={"train_micro_batch_size_per_gpu": 8, "zero_optimization": {"stage": 2}}
    )
    accelerator = Accelerator(deepspeed_plugin=plugin)
    assert (
        accelerator.distributed_type == DistributedType.DEEPSPEED and accelerator.deepspeed_plugin is plugin
    )
    model = torch.nn.Linear(3, 1)
    with pytest.raises(
        ValueError,
        match=r"train_micro_batch_size_per_gpu=8, but the prepared DataLoader's batch size per process gives 4",
    ):
        accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), _loader(4))


def test_json_accumulation_wins_over_the_accelerator_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    # As upstream: the config's concrete value wins, the Accelerator follows it (a warning, no error).
    plugin = DeepSpeedPlugin(
        hf_ds_config={"gradient_accumulation_steps": 4, "zero_optimization": {"stage": 1}}
    )
    with caplog.at_level(logging.WARNING):
        accelerator = Accelerator(deepspeed_plugin=plugin, gradient_accumulation_steps=2)
    assert "GradientAccumulationPlugin has 2, DeepSpeed config has 4. Using DeepSpeed's value." in caplog.text
    assert accelerator.gradient_accumulation_steps == 4
    assert plugin.deepspeed_config["gradient_accumulation_steps"] == 4


def test_json_accumulation_wins_over_a_gradient_accumulation_plugin() -> None:
    # transformers' Trainer always passes GradientAccumulationPlugin(num_steps=1).
    plugin = DeepSpeedPlugin(
        hf_ds_config={"gradient_accumulation_steps": 2, "zero_optimization": {"stage": 1}}
    )
    given = GradientAccumulationPlugin(num_steps=1, sync_with_dataloader=False)
    accelerator = Accelerator(deepspeed_plugin=plugin, gradient_accumulation_plugin=given)
    assert accelerator.gradient_accumulation_steps == 2
    assert accelerator.gradient_state.plugin_kwargs["sync_with_dataloader"] is False
    assert given.num_steps == 1  # the caller's plugin is not changed


def test_auto_accumulation_takes_the_gradient_accumulation_plugin() -> None:
    plugin = DeepSpeedPlugin(
        hf_ds_config={"gradient_accumulation_steps": "auto", "zero_optimization": {"stage": 1}}
    )
    accelerator = Accelerator(
        deepspeed_plugin=plugin, gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=3)
    )
    assert accelerator.gradient_accumulation_steps == 3
    assert plugin.deepspeed_config["gradient_accumulation_steps"] == 3


def test_json_precision_contradicting_the_accelerator_names_both() -> None:
    plugin = DeepSpeedPlugin(hf_ds_config={"fp16": {"enabled": True}, "zero_optimization": {"stage": 1}})
    with pytest.raises(
        ValueError, match=r"fp16.enabled=true, but the Accelerator's mixed_precision is 'bf16'"
    ):
        Accelerator(deepspeed_plugin=plugin, mixed_precision="bf16")


def test_optimizer_in_both_the_json_and_the_code_is_refused() -> None:
    plugin = DeepSpeedPlugin(
        hf_ds_config={
            "optimizer": {"type": "AdamW", "params": {"lr": 0.1}},
            "zero_optimization": {"stage": 2},
        }
    )
    accelerator = Accelerator(deepspeed_plugin=plugin)
    model = torch.nn.Linear(3, 1)
    with pytest.raises(ValueError, match="DummyOptim"):
        accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), _loader())


def test_fsdp_and_deepspeed_together_is_an_error_naming_both() -> None:
    with pytest.raises(ValueError, match=r"fsdp_plugin \(FSDP\) and deepspeed_plugin \(DeepSpeed\)"):
        Accelerator(deepspeed_plugin=DeepSpeedPlugin(), fsdp_plugin=object())


def test_named_plugins_and_selection() -> None:
    student, teacher = DeepSpeedPlugin(zero_stage=2), DeepSpeedPlugin(zero_stage=3)
    accelerator = Accelerator(deepspeed_plugins={"student": student, "teacher": teacher})
    assert accelerator.deepspeed_plugin is student and student.selected and not teacher.selected
    accelerator.state.select_deepspeed_plugin("teacher")
    assert accelerator.deepspeed_plugin is teacher and not student.selected
    assert accelerator.state.get_deepspeed_plugin("student") is student
    from accelerate.utils import get_active_deepspeed_plugin

    assert get_active_deepspeed_plugin(accelerator.state) is teacher
    with pytest.raises(ValueError, match="'nobody'"):
        accelerator.state.select_deepspeed_plugin("nobody")


def test_missing_deepspeed_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from accelerate.backends.deepspeed.runtime import import_deepspeed

    monkeypatch.setitem(
        sys.modules, "deepspeed", None
    )  # what Python does for a package that is not installed
    with pytest.raises(ImportError, match="pip install --no-build-isolation deepspeed"):
        import_deepspeed()
