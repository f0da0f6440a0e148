"""DeepSpeedPlugin is pure data; the launcher's settings reach it through resolve_deepspeed_plugins.

One process, no engine: what a plugin shows before and after an Accelerator takes it.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from accelerate import Accelerator
from accelerate.backends.deepspeed.launch import launched_fields, resolve_deepspeed_plugins
from accelerate.config.env import LaunchEnv, read_launch_env
from accelerate.utils import DeepSpeedPlugin


def _resolve(plugin: DeepSpeedPlugin | None, **env: object) -> DeepSpeedPlugin:
    named = resolve_deepspeed_plugins(plugin, None, launched=True, launch_env=LaunchEnv(**env))  # type: ignore[arg-type]
    assert named is not None
    return named["default"]


def test_the_plugin_reads_no_environment_and_the_accelerator_applies_the_launcher(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "cpu")
    plugin = DeepSpeedPlugin()
    # Before any Accelerator: the plugin's own fields and upstream's defaults.
    assert plugin.zero_stage == 2 and plugin.offload_optimizer_device == "none"
    accelerator = Accelerator(deepspeed_plugin=plugin)
    assert accelerator.state.deepspeed_plugin is plugin
    assert plugin.zero_stage == 3 and plugin.deepspeed_config["zero_optimization"]["stage"] == 3
    assert plugin.deepspeed_config["zero_optimization"]["offload_optimizer"]["device"] == "cpu"


def test_launched_without_a_plugin_builds_one_from_the_flags() -> None:
    plugin = _resolve(None, zero_stage=3, gradient_clipping="0.5", zero3_save_16bit_model=True)
    assert (plugin.zero_stage, plugin.gradient_clipping, plugin.zero3_save_16bit_model) == (3, 0.5, True)
    assert plugin.deepspeed_config["gradient_clipping"] == 0.5 and plugin.selected


def test_fields_the_code_set_win_over_the_launcher() -> None:
    plugin = _resolve(DeepSpeedPlugin(zero_stage=1), zero_stage=3, offload_param_device="cpu")
    assert plugin.zero_stage == 1 and plugin.deepspeed_config["zero_optimization"]["stage"] == 1
    assert plugin.offload_param_device == "cpu"


def test_a_field_set_after_construction_counts_as_the_codes() -> None:
    plugin = DeepSpeedPlugin()
    plugin.zero3_save_16bit_model = True
    _resolve(plugin, zero_stage=3, zero3_save_16bit_model=False)
    assert plugin.zero_stage == 3 and plugin.zero3_save_16bit_model is True


def test_a_code_given_file_keeps_its_dict_and_the_launcher_fills_its_autos() -> None:
    plugin = DeepSpeedPlugin(
        hf_ds_config={"zero_optimization": {"stage": "auto"}, "gradient_clipping": "auto"}
    )
    config = plugin.deepspeed_config
    assert plugin.zero_stage is None  # "auto": unknown until the launcher's --zero_stage may fill it
    _resolve(plugin, zero_stage=3, gradient_clipping="2.0")
    assert plugin.deepspeed_config is config and config["zero_optimization"]["stage"] == 3
    assert plugin.zero_stage == 3 and config["gradient_clipping"] == 2.0 and plugin.hf_ds_config.is_zero3()


def test_a_stage_nothing_fills_names_the_fix() -> None:
    plugin = DeepSpeedPlugin(hf_ds_config={"zero_optimization": {"stage": "auto"}})
    with pytest.raises(ValueError, match=r"--zero_stage"):
        _resolve(plugin)


def test_a_launched_config_file_replaces_the_fields_config_in_place(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 1}, "train_micro_batch_size_per_gpu": "auto"}))
    plugin = DeepSpeedPlugin()
    config = plugin.deepspeed_config
    _resolve(plugin, deepspeed_config_file=str(path), zero_stage=3)
    assert plugin.deepspeed_config is config and plugin.hf_ds_config.config is config
    assert plugin.zero_stage == 1 and config["zero_optimization"] == {"stage": 1}  # the file's value wins
    assert plugin.offload_optimizer_device is None  # with a file, no upstream default for unset fields


def test_zero3_init_waits_for_the_launched_stage() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning at construction: the launcher may say stage 3
        plugin = DeepSpeedPlugin(zero3_init_flag=True)
        _resolve(plugin, zero_stage=3)
    assert plugin.zero3_init_flag is True and plugin.zero_stage == 3
    alone = DeepSpeedPlugin(zero3_init_flag=True)
    with pytest.warns(UserWarning, match="only applies to ZeRO stage 3"):
        _resolve(alone)
    assert alone.zero3_init_flag is False


def test_the_launcher_is_applied_once() -> None:
    plugin = _resolve(DeepSpeedPlugin(), zero_stage=3)
    resolve_deepspeed_plugins(plugin, None, launched=True, launch_env=LaunchEnv(zero_stage=1))
    assert plugin.zero_stage == 3


def test_launched_fields_name_plugin_fields() -> None:
    env = read_launch_env(
        {"ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES": "Block", "ACCELERATE_DEEPSPEED_CONFIG_FILE": "x"}
    )
    fields = launched_fields(env)
    assert fields["transformer_moe_cls_names"] == "Block" and fields["hf_ds_config"] == "x"
    assert set(fields) <= set(DeepSpeedPlugin.__dataclass_fields__)
