"""The names issue 10's Trainer path added match upstream 1.15's interface (reference walk).

Reuses the reference parser's helpers from tests/utils/test_reference_api.py for the sections and
names this area provides: each name imports from its upstream path with the same parameters,
fields and methods; every FSDP/DeepSpeed face raises NotAvailableYetError when used; and a live
Accelerator has every attribute upstream's has. Skipped when the reference file is absent.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest

from tests.utils.test_reference_api import (
    REFERENCE,
    Entry,
    _parse,
    test_name_imports_with_upstreams_signature,
)

WHOLE = {
    "accelerate.utils.fsdp_utils", "accelerate.utils.deepspeed", "accelerate.utils.launch", "accelerate.launchers",
    "accelerate.parallelism_config",
}  # fmt: skip
DATACLASSES = {
    "BaseEnum", "ComputeEnvironment", "CustomDtype", "DeepSpeedSequenceParallelConfig", "DistributedType",
    "DynamoBackend", "EnumWithContains", "LoggerType", "PrecisionType", "ProfileKwargs", "ProfilerActivity",
    "RNGType", "SageMakerDistributedType", "TorchContextParallelConfig", "TorchDynamoPlugin",
    "TorchTensorParallelConfig", "TorchTensorParallelPlugin", "get_module_class_from_name",
}  # fmt: skip
NAMES = {
    "accelerate": {"ParallelismConfig", "ProfileKwargs", "DDPCommunicationHookType"},
    "accelerate.utils.dataclasses": DATACLASSES,
    "accelerate.utils.modeling": {"get_grad_scaler", "get_mixed_precision_context_manager", "is_peft_model"},
    "accelerate.state": {"AcceleratorState", "GradientState", "ThreadLocalSharedDict", "do_nothing", "is_initialized"},
    "accelerate.utils": DATACLASSES - {"BaseEnum", "EnumWithContains", "ProfilerActivity", "get_module_class_from_name"} | {
        "ParallelismConfig", "is_peft_model", "get_grad_scaler", "get_mixed_precision_context_manager",
        "PrepareForLaunch", "prepare_deepspeed_cmd_env", "prepare_multi_gpu_env",
        "prepare_sagemager_args_inputs", "prepare_simple_launcher_cmd_env", "prepare_tpu", "DeepSpeedEngineWrapper",
        "DeepSpeedOptimizerWrapper", "DeepSpeedSchedulerWrapper", "DummyOptim", "DummyScheduler", "HfDeepSpeedConfig",
        "get_active_deepspeed_plugin", "map_pytorch_optim_to_deepspeed", "load_fsdp_model", "load_fsdp_optimizer",
        "save_fsdp_model", "save_fsdp_optimizer", "merge_fsdp_weights", "enable_fsdp_ram_efficient_loading",
        "disable_fsdp_ram_efficient_loading",
    },
}  # fmt: skip

# One-per-process states construct through __new__ (inspect reports its *args/**kwargs), and a
# metaclass's signature includes `cls`: their methods are checked, not their constructors.
NO_CONSTRUCTOR_CHECK = {"AcceleratorState", "GradientState", "EnumWithContains"}
# The states forward to the process state or set attributes per instance: checked on live objects.
LIVE_MEMBERS: dict[str, list[str]] = {"AcceleratorState": [], "GradientState": []}


def _entries() -> list[Entry]:
    entries = _parse(REFERENCE, keep=lambda module, name, _: module in WHOLE or name in NAMES.get(module, ()))
    for entry in entries:
        if entry.name in LIVE_MEMBERS and entry.methods:
            LIVE_MEMBERS[entry.name] = re.findall(r"\.(\w+)", entry.methods)
            entry.methods = None
        if entry.name in NO_CONSTRUCTOR_CHECK:
            entry.params = None
        if entry.kind == "value":
            entry.value = None  # constants of these sections are checked by their own areas' tests
    return entries


ENTRIES = _entries() if REFERENCE.exists() else []
pytestmark = pytest.mark.skipif(not REFERENCE.exists(), reason=f"reference list {REFERENCE} not present")


def test_every_listed_name_is_in_the_reference() -> None:
    found = {(e.module, e.name) for e in ENTRIES}
    wanted = {(module, name) for module, names in NAMES.items() for name in names}
    assert wanted <= found, sorted(wanted - found)
    assert {e.module for e in ENTRIES} >= WHOLE


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: f"{e.module}:{e.name}")
def test_trainer_path_names_match_upstream(entry: Entry) -> None:
    if entry.kind == "value":
        import importlib

        assert hasattr(importlib.import_module(entry.module), entry.name)
        return
    test_name_imports_with_upstreams_signature(entry)


def _dummy_args(obj: Any) -> list[Any]:
    params = [p for p in inspect.signature(obj).parameters.values() if p.name != "self"]
    return [
        None for p in params if p.default is inspect.Parameter.empty and p.kind is p.POSITIONAL_OR_KEYWORD
    ]


def test_a_live_accelerator_has_upstreams_attributes() -> None:
    from accelerate import Accelerator

    line = next(line for line in REFERENCE.read_text().splitlines() if line.startswith("- Accelerator: "))
    accelerator = Accelerator(cpu=True)
    missing = [name for name in line[len("- Accelerator: ") :].split(", ") if not hasattr(accelerator, name)]
    assert missing == []


def test_live_states_have_upstreams_members() -> None:
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    for name, members in LIVE_MEMBERS.items():
        assert members, f"no members of {name} found in the reference"
        live = accelerator.state if name == "AcceleratorState" else accelerator.gradient_state
        assert [m for m in members if not hasattr(live, m)] == [], name
