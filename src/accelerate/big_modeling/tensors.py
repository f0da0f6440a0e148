"""Reading and replacing one parameter or buffer of a module by its dotted name; tied weights."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

DeviceLike = int | str | torch.device
# data pointer of an offloaded value -> {execution device -> the copy already made there}
TiedParamsMap = dict[int, dict[DeviceLike, torch.Tensor]]


def _split(module: nn.Module, tensor_name: str) -> tuple[nn.Module, str]:
    if "." not in tensor_name:
        return module, tensor_name
    path, _, attr = tensor_name.rpartition(".")
    try:
        return module.get_submodule(path), attr
    except AttributeError as error:
        raise ValueError(
            f"{type(module).__name__} has no submodule {path!r} (looking up {tensor_name!r})"
        ) from error


def _torch_device(device: DeviceLike) -> torch.device:
    if isinstance(device, int):
        return torch.device("cuda", device)
    return torch.device(device)


def set_module_tensor_to_device(
    module: nn.Module,
    tensor_name: str,
    device: DeviceLike,
    value: Any = None,
    dtype: str | torch.dtype | None = None,
    fp16_statistics: torch.Tensor | None = None,
    tied_params_map: TiedParamsMap | None = None,
    non_blocking: bool = False,
    clear_cache: bool = True,
) -> None:
    """Puts the parameter or buffer ``tensor_name`` (e.g. ``"encoder.0.weight"``) on ``device``.

    Args:
        module: the model holding the tensor.
        tensor_name: dotted name as in ``module.state_dict()``.
        device: where the tensor goes (``"meta"`` releases its memory).
        value: new contents (a tensor or anything ``torch.tensor`` accepts); required when the tensor is
            on the meta device now. Cast to the current dtype unless ``dtype`` is given (integer and bool
            values are never cast to ``dtype``).
        dtype: dtype for floating ``value``.
        fp16_statistics: the per-row scales of a bitsandbytes 8-bit weight (its ``SCB``), given with
            the int8 ``value`` of that weight: the layer computes with both.
        tied_params_map: copies already made per ``value`` data pointer and device; a tied weight
            reuses the copy instead of making a second one.
        non_blocking: asynchronous host-to-device copy.
        clear_cache: empty the accelerator's cache after moving to it.

    Example:
        >>> with init_empty_weights():
        ...     layer = nn.Linear(2, 2)
        >>> set_module_tensor_to_device(layer, "weight", "cpu", value=torch.ones(2, 2))
    """
    owner, name = _split(module, tensor_name)
    if fp16_statistics is not None and not is_int8_parameter(owner._parameters.get(name)):
        raise ValueError(
            f"set_module_tensor_to_device(fp16_statistics=...): {tensor_name!r} of {type(owner).__name__} is not "
            "the weight of a bitsandbytes 8-bit layer (an Int8Params), the only tensor that takes quantization "
            "statistics; pass fp16_statistics=None."
        )
    set_owned_tensor(
        owner, name, tensor_name, device, value, dtype, tied_params_map, non_blocking, clear_cache
    )
    if fp16_statistics is not None:
        # The int8 values are the weight itself; the layer finds its scales beside them (bitsandbytes
        # reads ``weight.SCB`` on the next forward).
        owner._parameters[name].SCB = fp16_statistics.to(_torch_device(device))  # type: ignore[union-attr]


def is_int8_parameter(tensor: torch.Tensor | None) -> bool:
    """Whether ``tensor`` is bitsandbytes' ``Int8Params``, told by name (no bitsandbytes import here)."""
    return any(
        cls.__name__ == "Int8Params" and cls.__module__.startswith("bitsandbytes")
        for cls in type(tensor).__mro__
    )


def set_owned_tensor(
    owner: nn.Module,
    name: str,
    tensor_name: str,
    device: DeviceLike,
    value: Any = None,
    dtype: str | torch.dtype | None = None,
    tied_params_map: TiedParamsMap | None = None,
    non_blocking: bool = False,
    clear_cache: bool = True,
) -> None:
    """:func:`set_module_tensor_to_device` for a submodule already looked up: ``owner`` holds the
    tensor as ``name``; ``tensor_name`` (its full dotted name) is for messages. A loader placing many
    tensors looks their modules up once instead of walking the dotted path for each."""
    if name not in owner._parameters and name not in owner._buffers:
        raise ValueError(
            f"{type(owner).__name__} has no parameter or buffer named {name!r} (from {tensor_name!r}); "
            f"it has {sorted([*owner._parameters, *owner._buffers])}"
        )
    is_buffer = name in owner._buffers
    old = owner._buffers[name] if is_buffer else owner._parameters[name]
    if old is None:
        raise ValueError(f"{tensor_name!r} is registered as None; there is no tensor to move")
    target = _torch_device(device)
    if value is not None and tied_params_map is not None:
        known = tied_params_map.get(value.data_ptr(), {}) if isinstance(value, torch.Tensor) else {}
        if device in known:
            # A tied weight already copied to this device by another module's hook: share that copy.
            _store(owner, name, known[device], old, is_buffer)
            return
    if old.device.type == "meta" and target.type != "meta" and value is None:
        raise ValueError(
            f"{tensor_name!r} is on the meta device and has no data; pass value=... to put it on {device}"
        )
    if value is not None:
        if not isinstance(value, torch.Tensor):
            value = torch.tensor(value)
        # Upstream's check and words; a bitsandbytes 4-bit parameter is stored packed, in another shape.
        if value.shape != old.shape and type(old).__name__ != "Params4bit":
            raise ValueError(
                f'Trying to set a tensor of shape {value.shape} in "{name}" (which has shape {old.shape}), '
                "this looks incorrect."
            )
        if dtype is None:
            value = value.to(old.dtype) if value.is_floating_point() or value.dtype == old.dtype else value
        elif value.is_floating_point():
            value = value.to(getattr(torch, dtype.replace("torch.", "")) if isinstance(dtype, str) else dtype)
    with torch.no_grad():
        new = (old if value is None else value).to(target, non_blocking=non_blocking)
    if value is not None and tied_params_map is not None and value.data_ptr() in tied_params_map:
        tied_params_map[value.data_ptr()].setdefault(device, new)
    _store(owner, name, new, old, is_buffer)
    if clear_cache and target.type not in ("cpu", "meta"):
        from accelerate.utils.memory import clear_device_cache

        clear_device_cache()


def _store(owner: nn.Module, name: str, new: torch.Tensor, old: torch.Tensor, is_buffer: bool) -> None:
    if is_buffer:
        owner._buffers[name] = new
        return
    params: dict[str, Any] = owner._parameters
    if isinstance(new, nn.Parameter) and type(new) is type(old):
        params[name] = new
        return
    if old.device.type != "meta" and new.device.type != "meta" and type(old) is nn.Parameter:
        # Swap the storage in place: tied names and optimizers that hold this parameter keep seeing it.
        old.data = new
        return
    param = type(old)(new, requires_grad=old.requires_grad) if isinstance(old, nn.Parameter) else new
    if isinstance(old, nn.Parameter):
        param.__dict__.update(old.__dict__)  # attributes libraries tag parameters with
        if type(old).to is not torch.Tensor.to:
            # A parameter class with its own .to() does its work there: bitsandbytes' Int8Params and
            # Params4bit quantize the value when it reaches its device, so a checkpoint streamed into
            # their layers is quantized weight by weight.
            param = param.to(new.device)
    params[name] = param


def named_module_tensors(
    module: nn.Module,
    include_buffers: bool = True,
    recurse: bool = False,
    remove_non_persistent: bool = False,
) -> Iterator[tuple[str, torch.Tensor]]:
    """Parameters, then buffers (unless ``include_buffers=False``) of ``module`` with their names.

    ``recurse`` includes submodules; ``remove_non_persistent`` leaves out buffers that are not part
    of the state dict (they cannot be found in a checkpoint or an offload folder).
    """
    yield from module.named_parameters(recurse=recurse)
    if include_buffers:
        skip = (
            get_non_persistent_buffers(module, recurse=recurse, fqns=True) if remove_non_persistent else set()
        )
        for name, buffer in module.named_buffers(recurse=recurse):
            if name not in skip:
                yield name, buffer


def get_non_persistent_buffers(module: nn.Module, recurse: bool = False, fqns: bool = False) -> set[str]:
    """Names of the buffers registered with ``persistent=False`` (full dotted names with ``fqns``)."""
    if not recurse:
        return set(module._non_persistent_buffers_set)
    names: set[str] = set()
    for prefix, sub in module.named_modules():
        for name in sub._non_persistent_buffers_set:
            names.add(f"{prefix}.{name}" if fqns and prefix else name)
    return names


def id_tensor_storage(tensor: torch.Tensor) -> tuple[torch.device, int, int]:
    """Identifies the storage behind ``tensor``: two views of one storage give the same triple."""
    if tensor.device.type == "meta":
        # Meta tensors have no storage; their identity is the best available key.
        return tensor.device, id(tensor), 0
    storage = tensor.untyped_storage()
    return tensor.device, storage.data_ptr(), storage.nbytes()


def find_tied_parameters(model: nn.Module, **kwargs: Any) -> list[list[str]]:
    """Groups of parameter names that share one parameter (e.g. input embeddings and the LM head).

    Example:
        >>> model.head.weight = model.embed.weight
        >>> find_tied_parameters(model)
        [['embed.weight', 'head.weight']]
    """
    groups: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    return sorted(sorted(names) for names in groups.values() if len(names) > 1)


def retie_parameters(model: nn.Module, tied_params: list[list[str]]) -> None:
    """Makes every name in each group point at one parameter again (after loading broke the ties).

    The parameter that holds data (not on the meta device) is kept, if there is one.
    """
    for group in tied_params:
        params = {name: _get(model, name) for name in group}
        keep = next((p for p in params.values() if p.device.type != "meta"), params[group[0]])
        for name in group:
            owner, attr = _split(model, name)
            owner._parameters[attr] = keep


def _get(model: nn.Module, name: str) -> nn.Parameter:
    owner, attr = _split(model, name)
    param = owner._parameters.get(attr)
    if param is None:
        raise ValueError(f"retie_parameters: {name!r} is not a parameter of {type(model).__name__}")
    return param


def check_tied_parameters_in_config(model: nn.Module) -> bool:
    """Whether the model's config asks for tied word embeddings (transformers models)."""
    config = getattr(model, "config", None)
    return bool(getattr(config, "tie_word_embeddings", False)) and hasattr(model, "get_output_embeddings")


def check_tied_parameters_on_same_device(
    tied_params: list[list[str]], device_map: Mapping[str, DeviceLike]
) -> None:
    """Warns about tied parameters that ``device_map`` places on different devices."""
    import logging

    from accelerate.big_modeling.device_map import device_of

    for group in tied_params:
        devices = {name: device_of(name, device_map) for name in group}
        if len({str(d) for d in devices.values()}) > 1:
            logging.getLogger(__name__).warning(
                "Tied parameters are on different devices: %s. Keep them together in the device_map so they stay tied.",
                devices,
            )


def _offload_hook(module: nn.Module) -> Any:
    """The offloading ``AlignDevicesHook`` of ``module`` (also inside a ``SequentialHook``), or None."""
    from accelerate.big_modeling.align import AlignDevicesHook
    from accelerate.big_modeling.hooks import SequentialHook

    hook = vars(module).get("_hf_hook")
    hooks = hook.hooks if isinstance(hook, SequentialHook) else [hook]
    return next((h for h in hooks if isinstance(h, AlignDevicesHook) and h.offload), None)


def has_offloaded_params(module: nn.Module) -> bool:
    """Whether an offloading hook holds ``module``'s weights somewhere else until forward."""
    return _offload_hook(module) is not None


@contextlib.contextmanager
def align_module_device(module: nn.Module, execution_device: DeviceLike | None = None) -> Iterator[None]:
    """Inside the block, the module's own tensors are loaded (if offloaded) or moved to ``execution_device``.

    Example:
        >>> with align_module_device(offloaded_layer):
        ...     print(offloaded_layer.weight.sum())  # real data, not the meta placeholder
    """
    hook = _offload_hook(module)
    if hook is not None:
        if execution_device is not None:
            saved = hook.execution_device
            hook.execution_device = execution_device
        try:
            hook.pre_forward(module)
            yield
        finally:
            hook.post_forward(module, None)
            if execution_device is not None:
                hook.execution_device = saved
        return
    if execution_device is None:
        yield
        return
    originals = {name: tensor.device for name, tensor in named_module_tensors(module)}
    try:
        for name in originals:
            set_module_tensor_to_device(module, name, execution_device)
        yield
    finally:
        for name, device in originals.items():
            set_module_tensor_to_device(module, name, device)
