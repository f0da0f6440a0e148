"""Hardware- or service-only features: names with upstream's signatures whose use raises one clear error.

Every face made by ``hardware_only`` is found by walking the modules (so a new one is covered
without listing it), called with placeholder arguments, and must raise ``NotAvailableYetError``
naming the feature and what it needs. The few functions in those modules that can answer here
(layer filters, "does this model hold X layers") are checked to answer truthfully instead.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable
from typing import Any

import pytest
import torch

from accelerate.utils.errors import NotAvailableYetError, hardware_only, requires_hardware

FACE_MODULES = [
    "accelerate.backends.megatron_lm",
    "accelerate.utils.hardware_dataclasses",
]
# Functions in those modules that work here, and are therefore not faces.
ANSWERS_HERE = {
    "accelerate.utils.hardware_dataclasses": {"add_model_config_to_megatron_parser"},
}  # fmt: skip


def _faces() -> list[tuple[str, Callable[..., Any]]]:
    """(label, callable) for every hardware-only function, class constructor and method."""
    found: list[tuple[str, Callable[..., Any]]] = []
    for module_name in FACE_MODULES:
        module = importlib.import_module(module_name)
        for name, obj in vars(module).items():
            if getattr(obj, "__module__", None) != module_name or name.startswith("_"):
                continue
            if inspect.isclass(obj):
                if "hardware_requirement" in vars(obj):
                    found.append((f"{module_name}.{name}()", obj))
                for attr, member in vars(obj).items():
                    if attr != "__init__" and hasattr(member, "hardware_requirement"):
                        found.append((f"{module_name}.{name}.{attr}", member))
            elif inspect.isfunction(obj) and hasattr(obj, "hardware_requirement"):
                found.append((f"{module_name}.{name}", obj))
    return found


FACES = _faces()


def _placeholder_call(func: Callable[..., Any]) -> Any:
    """Calls ``func`` with ``None`` for each required parameter (the values never matter to a face)."""
    target = func.__init__ if inspect.isclass(func) else func  # type: ignore[misc]
    args = [
        None
        for p in inspect.signature(target).parameters.values()
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return func(*args)


def test_faces_were_found() -> None:
    labels = {label for label, _ in FACES}
    assert len(FACES) > 40
    assert "accelerate.backends.megatron_lm.MegatronEngine()" in labels
    assert "accelerate.utils.hardware_dataclasses.MegatronLMPlugin.set_mixed_precision" in labels


@pytest.mark.parametrize("label, face", FACES, ids=[label for label, _ in FACES])
def test_using_a_face_raises_the_one_error(label: str, face: Callable[..., Any]) -> None:
    feature, needs = face.hardware_requirement  # type: ignore[attr-defined]
    with pytest.raises(NotAvailableYetError) as info:
        _placeholder_call(face)
    message = str(info.value)
    assert feature in message and needs in message
    # Names the exact call (an alias names the function it aliases; a class, its __init__).
    assert (f"{face.__name__}.__init__`" if inspect.isclass(face) else f"{face.__name__}`") in message


@pytest.mark.parametrize("module_name", FACE_MODULES)
def test_every_public_function_is_a_face_or_answers_here(module_name: str) -> None:
    module = importlib.import_module(module_name)
    plain = {
        name
        for name, obj in vars(module).items()
        if inspect.isfunction(obj)
        and obj.__module__ == module_name
        and not name.startswith("_")
        and not hasattr(obj, "hardware_requirement")
    }
    assert plain == ANSWERS_HERE.get(module_name, set())


def test_faces_keep_upstreams_signature() -> None:
    from accelerate.utils.bnb import load_and_quantize_model
    from accelerate.utils.megatron_lm import MegatronLMDummyScheduler, initialize

    assert str(inspect.signature(initialize)).startswith(
        "(accelerator: 'Any', extra_args_provider: 'Any' = None"
    )
    assert inspect.signature(load_and_quantize_model).parameters["offload_state_dict"].default is False
    assert list(inspect.signature(MegatronLMDummyScheduler).parameters) == [
        "optimizer", "total_num_steps", "warmup_num_steps", "kwargs",
    ]  # fmt: skip


def test_the_helper_builds_one_message_shape() -> None:
    error = requires_hardware("Feature X", "a widget")
    assert isinstance(error, NotImplementedError)
    assert str(error).startswith("Feature X cannot run in this accelerate: it needs a widget")

    @hardware_only("Feature Y", "a gadget")
    def face(a: int, b: int = 2) -> int: ...

    assert list(inspect.signature(face).parameters) == ["a", "b"]
    with pytest.raises(NotAvailableYetError, match=r"Feature Y \(`.*face`\) cannot run.*needs a gadget"):
        face(1)


def test_is_probes_agree_with_the_faces() -> None:
    # The faces exist because the packages are missing here: the probes must say so.
    from accelerate.utils import imports

    assert not imports.is_megatron_lm_available() or importlib.util.find_spec("megatron") is not None
    assert imports.is_transformer_engine_available() is (
        importlib.util.find_spec("transformer_engine") is not None
    )


# ---- The functions that answer here. ----


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(32, 64)
        self.odd = torch.nn.Linear(64, 10)
        self.body = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU())
        self.head = torch.nn.Linear(64, 32)


def test_layer_queries_answer_false_without_the_packages() -> None:
    from accelerate.utils import imports
    from accelerate.utils.ao import has_ao_layers
    from accelerate.utils.bnb import has_4bit_bnb_layers
    from accelerate.utils.transformer_engine import has_transformer_engine_layers

    net = _Net()
    if not imports.is_bnb_available():
        assert has_4bit_bnb_layers(net) is False
    if not imports.is_transformer_engine_available():
        assert has_transformer_engine_layers(net) is False
    if not imports.is_torchao_available():
        assert has_ao_layers(net) is False


def test_ao_layer_filters() -> None:
    from accelerate.utils.ao import filter_linear_layers, find_first_last_linear_layers

    net = _Net()
    assert find_first_last_linear_layers(net) == ("embed", "head")
    assert find_first_last_linear_layers(torch.nn.ReLU()) == (None, None)
    first, last = find_first_last_linear_layers(net)
    decisions = {
        name: filter_linear_layers(module, name, [first, last])
        for name, module in net.named_modules()
        if isinstance(module, torch.nn.Linear)
    }
    # odd: 10 outputs is not a multiple of 16; embed/head are the first and last layers.
    assert decisions == {"embed": False, "odd": False, "body.0": True, "head": False}


def test_bnb_parameter_device_and_pippy_batch_size() -> None:
    from accelerate.inference import find_pippy_batch_size
    from accelerate.utils.bnb import get_parameter_device

    assert get_parameter_device(_Net()) == torch.device("cpu")
    with pytest.raises(ValueError, match="no parameters"):
        get_parameter_device(torch.nn.ReLU())
    assert find_pippy_batch_size((torch.zeros(5, 2),), {}) == 5
    assert find_pippy_batch_size((), {"input_ids": torch.zeros(3, 7)}) == 3
    assert find_pippy_batch_size((), {}) is None
