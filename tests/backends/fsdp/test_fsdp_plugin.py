"""FullyShardedDataParallelPlugin, the wrap policies and the launcher's FSDP settings (one process, no group)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from accelerate.backends.fsdp.launch import FSDPLaunchError, resolve_fsdp
from accelerate.backends.fsdp.plugin import fsdp2_layout
from accelerate.backends.fsdp.spec import resolve_fsdp_plugin
from accelerate.backends.fsdp.wrap import modules_to_shard
from accelerate.backends.resolve import asked_rows
from accelerate.backends.spec import BackendRequest
from accelerate.config.config_file import LaunchConfig
from accelerate.config.env import read_launch_env
from accelerate.utils import FullyShardedDataParallelPlugin
from tests.backends.fsdp.fsdp_models import BertLayer, Block, make_model


def test_defaults_follow_the_version() -> None:
    v1 = FullyShardedDataParallelPlugin()
    assert (v1.fsdp_version, v1.sharding_strategy, v1.reshard_after_forward) == (1, "FULL_SHARD", True)
    assert v1.state_dict_type == "FULL_STATE_DICT" and v1.use_orig_params and not v1.cpu_offload
    v2 = FullyShardedDataParallelPlugin(fsdp_version=2)
    assert (v2.sharding_strategy, v2.reshard_after_forward, v2.state_dict_type) == (
        None,
        True,
        "SHARDED_STATE_DICT",
    )
    assert v2.auto_wrap_policy is None and v2.limit_all_gathers
    # Naming blocks (or a size) without a policy asks for that policy.
    assert (
        FullyShardedDataParallelPlugin(transformer_cls_names_to_wrap=["Block"]).auto_wrap_policy
        == "transformer_based_wrap"
    )
    assert FullyShardedDataParallelPlugin(min_num_params=10).auto_wrap_policy == "size_based_wrap"


_LAUNCHED = {
    "ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "FSDP_RESHARD_AFTER_FORWARD": "false",
    "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP", "FSDP_TRANSFORMER_CLS_TO_WRAP": "Block, BertLayer",
    "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT", "FSDP_CPU_RAM_EFFICIENT_LOADING": "true",
    "FSDP_ACTIVATION_CHECKPOINTING": "true", "FSDP_MIN_NUM_PARAMS": "7",
}  # fmt: skip


def test_the_launcher_variables_fill_unset_fields_when_the_run_is_resolved() -> None:
    # The plugin is pure data; the run's resolution step (what Accelerator() calls) reads the launcher.
    plugin = resolve_fsdp_plugin(None, read_launch_env(_LAUNCHED))
    assert (plugin.fsdp_version, plugin.reshard_after_forward, plugin.auto_wrap_policy) == (
        2,
        False,
        "transformer_based_wrap",
    )
    assert plugin.transformer_cls_names_to_wrap == ["Block", "BertLayer"] and plugin.min_num_params == 7
    assert plugin.state_dict_type == "FULL_STATE_DICT" and plugin.activation_checkpointing
    # Loading on rank 0 only means prepare must broadcast.
    assert plugin.cpu_ram_efficient_loading and plugin.sync_module_states
    # An argument wins over the variable, and so does a field assigned after construction.
    given = FullyShardedDataParallelPlugin(reshard_after_forward=True)
    given.min_num_params = 3
    resolved = resolve_fsdp_plugin(given, read_launch_env(_LAUNCHED))
    assert resolved.reshard_after_forward is True and resolved.min_num_params == 3
    assert resolved.fsdp_version == 2 and resolved.state_dict_type == "FULL_STATE_DICT"
    # The caller's plugin is not changed (the run holds a copy).
    assert resolved is not given and (given.fsdp_version, given.state_dict_type) == (2, "SHARDED_STATE_DICT")
    assert given.activation_checkpointing is False
    # An FSDP2-only setting implies fsdp_version=2 unless the launcher (or the caller) says 1.
    with pytest.raises(ValueError, match="FSDP2 setting"):
        resolve_fsdp_plugin(given, read_launch_env({**_LAUNCHED, "FSDP_VERSION": "1"}))
    # Without --use_fsdp (or with DeepSpeed) there is no plugin to resolve.
    assert resolve_fsdp_plugin(None, read_launch_env({})) is None
    # The launcher's --use_fsdp steps aside for a deepspeed_plugin argument (the backend table's conflict).
    request = BackendRequest(arguments={"deepspeed_plugin": object()}, launch=read_launch_env(_LAUNCHED))
    assert [row.name for row in asked_rows(request)] == ["deepspeed"]


def test_the_plugin_reads_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in _LAUNCHED.items():
        monkeypatch.setenv(key, value)
    plugin = FullyShardedDataParallelPlugin()  # upstream's reads the variables here; ours at resolution
    assert (plugin.fsdp_version, plugin.state_dict_type, plugin.auto_wrap_policy) == (
        1,
        "FULL_STATE_DICT",
        None,
    )
    assert resolve_fsdp_plugin(plugin, read_launch_env()).fsdp_version == 2  # the launch settings, read once


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [("FULL_SHARD", (True, "shard")), ("SHARD_GRAD_OP", (False, "shard")), ("NO_SHARD", (False, "replicate")),
     ("HYBRID_SHARD", (True, "hybrid")), ("HYBRID_SHARD_ZERO2", (False, "hybrid")), (None, (True, "shard"))],
)  # fmt: skip
def test_fsdp1_strategies_map_onto_fsdp2(strategy: str | None, expected: tuple[bool, str]) -> None:
    assert fsdp2_layout(strategy, None) == expected


def test_fsdp1_spellings_of_a_strategy() -> None:
    from torch.distributed.fsdp import ShardingStrategy

    assert FullyShardedDataParallelPlugin(sharding_strategy=2).sharding_strategy == "SHARD_GRAD_OP"
    assert (
        FullyShardedDataParallelPlugin(sharding_strategy=ShardingStrategy.NO_SHARD).mesh_kind == "replicate"
    )
    assert (
        FullyShardedDataParallelPlugin(sharding_strategy="hybrid_shard").sharding_strategy == "HYBRID_SHARD"
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"fsdp_version": 2, "sharding_strategy": "FULL_SHARD"}, "use reshard_after_forward"),
        ({"fsdp_version": 1, "reshard_after_forward": False}, "FSDP2 setting"),
        ({"fsdp_version": 3}, "must be 1 or 2"),
        ({"sharding_strategy": "HALF_SHARD"}, "FULL_SHARD, SHARD_GRAD_OP"),
        ({"state_dict_type": "LOCAL_STATE_DICT"}, "SHARDED_STATE_DICT .resharding-safe"),
        ({"auto_wrap_policy": "layer_wrap"}, "TRANSFORMER_BASED_WRAP"),
        ({"mixed_precision_policy": {"param_dtype": "fp8"}}, "dtype 'fp8'"),
        ({"activation_checkpointing": "maybe"}, "not a boolean"),
    ],
)
def test_bad_settings_name_the_field(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        FullyShardedDataParallelPlugin(**kwargs)  # type: ignore[arg-type]


def test_mixed_precision_policies() -> None:
    from torch.distributed.fsdp import MixedPrecision, MixedPrecisionPolicy

    plugin = FullyShardedDataParallelPlugin(
        mixed_precision_policy={"param_dtype": "bf16", "reduce_dtype": "fp32"}
    )
    assert plugin.mixed_precision_policy == MixedPrecisionPolicy(
        param_dtype=torch.bfloat16, reduce_dtype=torch.float32
    )
    fsdp1 = FullyShardedDataParallelPlugin(mixed_precision_policy=MixedPrecision(param_dtype=torch.float16))
    assert fsdp1.mixed_precision_policy.param_dtype == torch.float16
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2)
    plugin.set_mixed_precision("bf16")  # the Accelerator's mode: bf16 compute, fp32 reduction
    assert plugin.mixed_precision_policy == MixedPrecisionPolicy(
        param_dtype=torch.bfloat16, reduce_dtype=torch.float32
    )
    plugin.set_mixed_precision("fp16")  # an explicit policy is kept unless override=True
    assert plugin.mixed_precision_policy.param_dtype == torch.bfloat16
    plugin.set_mixed_precision("fp16", override=True)
    assert plugin.mixed_precision_policy.param_dtype == torch.float16


def _picked(model: nn.Module, **kwargs: object) -> list[str]:
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, **kwargs)  # type: ignore[arg-type]
    names = {id(m): n for n, m in model.named_modules()}
    return [names[id(m)] for m in modules_to_shard(plugin, model)]


def test_wrap_policies_pick_blocks_children_first() -> None:
    model = make_model()
    assert _picked(
        model, auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap=["Block"]
    ) == [f"blocks.{i}" for i in range(4)]
    assert _picked(model, auto_wrap_policy="no_wrap") == [] == _picked(model)
    # Size-based: each block (1,168 parameters) reaches 1,000 on its own; their ModuleList holds nothing new.
    assert _picked(model, auto_wrap_policy="size_based_wrap", min_num_params=1000) == [
        f"blocks.{i}" for i in range(4)
    ]
    assert _picked(model, auto_wrap_policy="size_based_wrap", min_num_params=500) == [
        f"blocks.{i}.{layer}" for i in range(4) for layer in ("fc1", "fc2")
    ]
    # A model's _no_split_modules stands in for missing names (as transformers models declare them).
    bert = make_model(block=BertLayer)
    bert._no_split_modules = ["BertLayer"]  # type: ignore[assignment]
    assert len(_picked(bert, auto_wrap_policy="transformer_based_wrap")) == 4


def test_a_callable_policy_is_called_like_fsdp1s() -> None:
    def policy(module: nn.Module, recurse: bool, nonwrapped_numel: int) -> bool:
        return isinstance(module, Block) and not recurse and nonwrapped_numel > 0

    assert len(_picked(make_model(), auto_wrap_policy=policy)) == 4


def test_a_wrap_class_matching_nothing_lists_the_model_classes() -> None:
    with pytest.raises(
        ValueError, match=r"\['GPT2Block'\].*TinyTransformer, Linear, ModuleList, Block, LayerNorm"
    ):
        _picked(
            make_model(),
            auto_wrap_policy="transformer_based_wrap",
            transformer_cls_names_to_wrap=["GPT2Block"],
        )


# --- the launcher ----------------------------------------------------------------------------------
def test_flags_become_fsdp_variables_and_a_translation_note() -> None:
    launch = resolve_fsdp(
        {"use_fsdp": True, "fsdp_sharding_strategy": "shard_grad_op", "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
         "fsdp_transformer_layer_cls_to_wrap": "Block", "fsdp_activation_checkpointing": "True"},
        None, "<config>", 2,
    )  # fmt: skip
    assert launch.env == {
        "ACCELERATE_USE_FSDP": "true", "FSDP_SHARDING_STRATEGY": "SHARD_GRAD_OP",
        "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP", "FSDP_TRANSFORMER_CLS_TO_WRAP": "Block",
        "FSDP_ACTIVATION_CHECKPOINTING": "true",
    }  # fmt: skip
    assert launch.notes == [
        "FSDP: fsdp_version 1, sharding_strategy SHARD_GRAD_OP -> FSDP2 fully_shard(reshard_after_forward=False), "
        "shard over all processes."
    ]


def test_config_section_with_flags_winning() -> None:
    config = LaunchConfig(
        distributed_type="FSDP",
        fsdp_config={
            "fsdp_version": 2,
            "fsdp_reshard_after_forward": True,
            "fsdp_state_dict_type": "FULL_STATE_DICT",
        },
    )
    launch = resolve_fsdp({"fsdp_reshard_after_forward": "false"}, config, "cfg.yaml", 1)
    assert launch.env["FSDP_RESHARD_AFTER_FORWARD"] == "false" and launch.env["FSDP_VERSION"] == "2"
    assert launch.env["FSDP_STATE_DICT_TYPE"] == "FULL_STATE_DICT"
    assert "fully_shard(reshard_after_forward=False)" in launch.notes[0]
    assert "one process holds the whole model" in launch.notes[-1]
    # Without FSDP the section is not read (the config review warns about it instead).
    assert resolve_fsdp({}, LaunchConfig(fsdp_config={"fsdp_version": 2}), "cfg.yaml", 2).env == {}


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        ({"fsdp_version": "2"}, "--fsdp_version configures FSDP, which is off"),
        (
            {"use_fsdp": True, "fsdp_version": "2", "fsdp_sharding_strategy": "FULL_SHARD"},
            "fsdp_reshard_after_forward",
        ),
        ({"use_fsdp": True, "fsdp_reshard_after_forward": "true"}, "FSDP2 setting, but fsdp_version is 1"),
        (
            {"use_fsdp": True, "fsdp_auto_wrap_policy": "EVERYTHING"},
            "--fsdp_auto_wrap_policy='EVERYTHING' is not one",
        ),
        (
            {"use_fsdp": True, "fsdp_offload_params": "sometimes"},
            "--fsdp_offload_params='sometimes' is not a boolean",
        ),
    ],
)
def test_bad_fsdp_launch_settings(flags: dict[str, object], match: str) -> None:
    with pytest.raises(FSDPLaunchError, match=match):
        resolve_fsdp(flags, None, "<config>", 2)
