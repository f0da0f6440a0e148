"""Constants are upstream's facts and agree with the names the library really writes."""

from __future__ import annotations

import operator
import subprocess
import sys

import torch

from accelerate.checkpointing import rng, training_state
from accelerate.storage import model_files
from accelerate.utils import constants


def test_checkpoint_names_agree_with_what_checkpointing_writes() -> None:
    assert constants.SAFE_WEIGHTS_NAME == model_files.SAFE_WEIGHTS_NAME == "model.safetensors"
    assert constants.WEIGHTS_NAME == model_files.WEIGHTS_NAME == "pytorch_model.bin"
    assert constants.WEIGHTS_INDEX_NAME == model_files.WEIGHTS_INDEX_NAME
    assert constants.SAFE_WEIGHTS_INDEX_NAME == model_files.SAFE_WEIGHTS_INDEX_NAME
    assert constants.MODEL_NAME == training_state.MODEL_NAME
    assert constants.OPTIMIZER_NAME == training_state.OPTIMIZER_NAME
    assert constants.SCALER_NAME == training_state.SCALER_NAME
    assert constants.RNG_STATE_NAME == rng.RNG_STATE_NAME
    assert (
        constants.SAFE_WEIGHTS_PATTERN_NAME.format(suffix="-00001-of-00002")
        == "model-00001-of-00002.safetensors"
    )


def test_operations_table() -> None:
    table = constants.STR_OPERATION_TO_FUNC
    assert table[">="] is operator.ge and table["!="] is operator.ne
    assert set(table) == {">", ">=", "==", "!=", "<=", "<"}


def test_upcasting_layers_are_torch_classes() -> None:
    layers = constants.SUPPORTED_PYTORCH_LAYERS_FOR_UPCASTING
    assert torch.nn.Linear in layers and torch.nn.Conv2d in layers
    assert all(issubclass(layer, torch.nn.Module) for layer in layers)


def test_cuda_types_are_a_prefix_of_the_torch_distributed_ones() -> None:
    n = len(constants.CUDA_DISTRIBUTED_TYPES)
    assert constants.TORCH_DISTRIBUTED_OPERATION_TYPES[:n] == constants.CUDA_DISTRIBUTED_TYPES
    assert "MULTI_CPU" in constants.TORCH_DISTRIBUTED_OPERATION_TYPES


def test_torch_launch_params_are_torchrun_options() -> None:
    from torch.distributed.run import get_args_parser

    options = {action.dest for action in get_args_parser()._actions}
    # single-letter aliases (m, r, t) are spellings of module / redirects / tee
    assert {p for p in constants.TORCH_LAUNCH_PARAMS if len(p) > 1} <= options


def test_constants_module_imports_without_torch() -> None:
    code = "import sys; import accelerate.utils.constants as c; c.MODEL_NAME; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
