"""The mixed-precision vocabulary is defined once (PrecisionType) and every entry point uses it."""

from __future__ import annotations

import argparse

import pytest

from accelerate.config.config_file import ConfigFileError, config_from_dict
from accelerate.utils.dataclasses import (
    AVAILABLE_MIXED_PRECISION_MODES,
    MIXED_PRECISION_MODES,
    PrecisionType,
    check_mixed_precision,
)


def test_the_public_faces_are_the_one_enum() -> None:
    import accelerate.state
    import accelerate.utils

    assert accelerate.state.PrecisionType is PrecisionType
    assert accelerate.utils.PrecisionType is PrecisionType
    assert MIXED_PRECISION_MODES == ("no", "fp16", "bf16", "fp8")
    assert AVAILABLE_MIXED_PRECISION_MODES == ("no", "fp16", "bf16", "fp8")


@pytest.mark.parametrize("value", ["no", "FP16", "bf16", PrecisionType.BF16, None])
def test_check_accepts_every_available_spelling(value: object) -> None:
    assert check_mixed_precision(value) == ("no" if value is None else str(value).lower())


def test_check_accepts_fp8_and_refuses_others_as_unknown() -> None:
    assert check_mixed_precision(PrecisionType.FP8, origin="where") == "fp8"
    with pytest.raises(
        ValueError, match="where: 'fp32' is not a mixed-precision mode; use one of 'no', 'fp16'"
    ):
        check_mixed_precision("fp32", origin="where")


def test_config_file_schema_accepts_the_vocabulary_and_names_it() -> None:
    for mode in MIXED_PRECISION_MODES:  # fp8 loads; the launch refuses it with the way out
        assert config_from_dict({"mixed_precision": mode.upper()}).mixed_precision == mode
    with pytest.raises(ConfigFileError, match="one of no, fp16, bf16, fp8"):
        config_from_dict({"mixed_precision": "fp32"})


def _choices(parser: argparse.ArgumentParser, dest: str) -> tuple[str, ...]:
    (action,) = [a for a in parser._actions if a.dest == dest]
    return tuple(action.choices or ())


def test_cli_choices_come_from_the_vocabulary() -> None:
    from accelerate.commands.launch import add_launch_arguments

    parser = argparse.ArgumentParser()
    add_launch_arguments(parser)
    assert _choices(parser, "mixed_precision") == MIXED_PRECISION_MODES
    from accelerate.commands import config as config_command

    subparsers = argparse.ArgumentParser().add_subparsers()
    config_command.add_parser(subparsers)
    default = subparsers.choices["config"]._subparsers._group_actions[0].choices["default"]  # type: ignore[union-attr]
    assert _choices(default, "mixed_precision") == AVAILABLE_MIXED_PRECISION_MODES


def test_one_mode_to_dtype_table_for_autocast_and_the_fsdp_policy() -> None:
    import torch

    from accelerate.backends.fsdp.plugin import FullyShardedDataParallelPlugin
    from accelerate.precision.amp import Precision
    from accelerate.utils.dataclasses import mixed_precision_dtype

    # fp8 keeps fp32 parameters (its layers cast themselves); its autocast is bf16, as upstream's.
    expected = {"no": None, "fp16": torch.float16, "bf16": torch.bfloat16, "fp8": None}
    assert {mode: mixed_precision_dtype(mode) for mode in AVAILABLE_MIXED_PRECISION_MODES} == expected
    for mode in ("no", "bf16"):  # fp16 on CPU works too, but builds a GradScaler this check does not need
        assert Precision(mode, torch.device("cpu")).dtype == expected[mode]
    assert Precision("fp8", torch.device("cpu")).dtype == torch.bfloat16
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2)
    plugin.set_mixed_precision(PrecisionType.BF16)
    assert plugin.mixed_precision_policy.param_dtype == torch.bfloat16
    # A misspelt mode used to leave the model in fp32 silently; now it is named.
    with pytest.raises(ValueError, match="'bf61' is not a mixed-precision mode"):
        plugin.set_mixed_precision("bf61", override=True)
