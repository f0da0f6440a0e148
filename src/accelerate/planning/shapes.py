"""What the memory estimate needs to know about a model, read without allocating it.

A :class:`ModelShape` is the parameter count plus the few dimensions that size the activations
(hidden and intermediate sizes, layers, heads, vocabulary). It comes from a transformers
``config.json`` (arithmetic on the config, no transformers import), from a safetensors checkpoint
(its JSON header only: the tensors are never read), or from a model built on the meta device
(``module:function``). Only :func:`shape_of_module` imports torch.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import os
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Decoder families whose MLP is gated (gate, up and down projections: three matrices instead of two).
_GATED = (
    "llama",
    "mistral",
    "mixtral",
    "qwen",
    "gemma",
    "phi3",
    "olmo",
    "cohere",
    "granite",
    "deepseek",
    "yi",
)
# Each config key a dimension goes by in transformers, first match wins.
_KEYS = {
    "hidden_size": ("hidden_size", "n_embd", "d_model", "dim"),
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "num_heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "intermediate_size": ("intermediate_size", "n_inner", "ffn_dim", "d_ff", "hidden_dim"),
    "vocab_size": ("vocab_size", "padded_vocab_size"),
    # Mixture of experts: Qwen-MoE's num_experts, Mixtral's num_local_experts, DeepSeek's n_routed_experts.
    "num_experts": ("num_experts", "num_local_experts", "n_routed_experts"),
    "experts_per_token": ("num_experts_per_tok", "moe_topk"),
    "moe_intermediate_size": ("moe_intermediate_size", "expert_intermediate_size"),
}
_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)\.")


class ModelShapeError(ValueError):
    """A model description could not be read; the message names the file and what it lacks."""


@dataclass(frozen=True)
class ModelShape:
    """A model's size and the dimensions that size its activations (``None`` where unknown).

    Example:
        >>> shape = shape_from_config({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        ...     "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256})
        >>> shape.parameters
        115008
    """

    name: str
    parameters: int
    largest_layer: int  # parameters of the biggest transformer block (or module): what FSDP gathers at once
    hidden_size: int | None = None
    num_layers: int | None = None
    num_heads: int | None = None
    num_kv_heads: int | None = None
    intermediate_size: int | None = None
    vocab_size: int | None = None
    # Mixture of experts (None / 0 for a dense model): experts per MoE layer, experts each token goes to,
    # one expert's inner width, and every MoE layer's expert weights together (what ``ep`` splits).
    num_experts: int | None = None
    experts_per_token: int | None = None
    moe_intermediate_size: int | None = None
    expert_parameters: int = 0

    @property
    def is_moe(self) -> bool:
        """Whether the model has mixture-of-experts layers with their experts' weights known."""
        return bool(self.num_experts and self.num_experts > 1 and self.expert_parameters)

    @property
    def kv_size(self) -> int:
        """Width of the key (or value) projection: smaller than the hidden size with grouped queries."""
        hidden = self.hidden_size or 0
        if not self.num_heads or not self.num_kv_heads:
            return hidden
        return hidden * self.num_kv_heads // self.num_heads

    @property
    def knows_activations(self) -> bool:
        """Whether the dimensions are known well enough to size the activations."""
        return bool(self.hidden_size and self.num_layers)


def _first(config: Mapping[str, Any], dim: str) -> int | None:
    for key in _KEYS[dim]:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def shape_from_config(config: Mapping[str, Any], name: str = "config") -> ModelShape:
    """A decoder transformer's shape from its transformers config (a ``config.json``'s contents).

    Parameters are counted as the model builds them: embeddings, per block the attention projections
    (narrower keys and values with grouped queries), the MLP (gated families have three matrices),
    two norms, and an output head unless ``tie_word_embeddings``. Biases are ignored (a fraction of a
    percent).

    Raises:
        ModelShapeError: the config lacks the hidden size, layer count or vocabulary size.
    """
    if isinstance(config.get("text_config"), Mapping):  # multimodal configs nest the language model
        config = {**config["text_config"], "model_type": config["text_config"].get("model_type", "")}
    hidden, layers, vocab = (_first(config, d) for d in ("hidden_size", "num_layers", "vocab_size"))
    missing = [
        d
        for d, v in (("hidden_size", hidden), ("num_hidden_layers", layers), ("vocab_size", vocab))
        if v is None
    ]
    if missing or hidden is None or layers is None or vocab is None:
        raise ModelShapeError(
            f"{name}: the config has no {', '.join(missing)}; the estimate needs a transformers decoder "
            "config (hidden_size, num_hidden_layers, vocab_size), a safetensors checkpoint, or a "
            "`module:function` that builds the model on the meta device."
        )
    heads = _first(config, "num_heads") or 1
    kv_heads = config.get("num_key_value_heads") or heads
    inner = _first(config, "intermediate_size") or 4 * hidden
    model_type = str(config.get("model_type", "")).lower()
    gated = model_type.startswith(_GATED)
    kv = hidden * kv_heads // heads
    attention = hidden * hidden * 2 + hidden * kv * 2  # q and o, k and v
    mlp = (3 if gated else 2) * hidden * inner
    experts, top_k, expert_inner, expert_block = _first(config, "num_experts"), None, None, 0
    if experts is not None and experts > 1:
        # Every layer a MoE layer (Mixtral's and Qwen-MoE's default): a router and num_experts gated
        # MLPs of moe_intermediate_size (Mixtral's experts use intermediate_size), plus Qwen2-MoE's
        # shared expert when the config has one.
        top_k = _first(config, "experts_per_token") or 2
        expert_inner = _first(config, "moe_intermediate_size") or inner
        expert_block = experts * 3 * hidden * expert_inner
        shared = config.get("shared_expert_intermediate_size")
        mlp = (
            hidden * experts + expert_block + (3 * hidden * shared + hidden if isinstance(shared, int) else 0)
        )
    block = attention + mlp + 2 * hidden
    tied = bool(config.get("tie_word_embeddings", not gated))
    total = vocab * hidden * (1 if tied else 2) + layers * block + hidden
    return ModelShape(name, total, block, hidden, layers, heads, int(kv_heads), inner, vocab,
                      experts, top_k, expert_inner, layers * expert_block)  # fmt: skip


def _read_header(path: str) -> dict[str, Any]:
    """A safetensors file's JSON header (8 bytes of length, then the JSON); the tensors stay on disk."""
    with open(path, "rb") as handle:
        prefix = handle.read(8)
        if len(prefix) != 8:
            raise ModelShapeError(
                f"{path} is not a safetensors file (shorter than its 8-byte header length)."
            )
        (length,) = struct.unpack("<Q", prefix)
        if length > 100_000_000:
            raise ModelShapeError(f"{path}: a header of {length} bytes; this is not a safetensors file.")
        header: dict[str, Any] = json.loads(handle.read(length))
    header.pop("__metadata__", None)
    return header


def _checkpoint_files(path: str) -> list[str]:
    if os.path.isfile(path):
        return [path]
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as handle:
            names = sorted(set(json.load(handle)["weight_map"].values()))
        return [os.path.join(path, name) for name in names]
    files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    if not files:
        raise ModelShapeError(f"{path} holds no config.json and no .safetensors file to read the model from.")
    return [os.path.join(path, f) for f in files]


def shape_from_safetensors(path: str) -> ModelShape:
    """A model's shape from its safetensors checkpoint (a file, or a folder of shards with or without
    ``model.safetensors.index.json``): headers only.

    The hidden size is the embedding's width; layers are counted from names like ``layers.N.``.
    """
    shapes: dict[str, list[int]] = {}
    for file in _checkpoint_files(path):
        shapes.update({name: list(entry["shape"]) for name, entry in _read_header(file).items()})
    total = sum(math.prod(shape) for shape in shapes.values())
    blocks: dict[int, int] = {}
    for name, shape in shapes.items():
        if found := _LAYER_INDEX.search(name):
            blocks[int(found.group(1))] = blocks.get(int(found.group(1)), 0) + math.prod(shape)
    embeddings = [s for n, s in shapes.items() if "embed" in n or n.endswith("wte.weight") and len(s) == 2]
    vocab, hidden = (
        (embeddings[0][0], embeddings[0][1]) if embeddings and len(embeddings[0]) == 2 else (None, None)
    )
    largest = max(blocks.values(), default=max((math.prod(s) for s in shapes.values()), default=0))
    experts, expert_parameters = _experts_in_names(shapes)
    return ModelShape(os.path.basename(path.rstrip("/")), total, largest, hidden, len(blocks) or None,
                      vocab_size=vocab, num_experts=experts, expert_parameters=expert_parameters)  # fmt: skip


_EXPERT_INDEX = re.compile(r"\.experts\.(\d+)\.")


def _experts_in_names(shapes: Mapping[str, list[int]]) -> tuple[int | None, int]:
    """(experts per layer, expert weights of all layers) from a checkpoint's tensor names: per-expert
    tensors (``experts.N.``) or fused ones stacked by expert (``experts.gate_up_proj`` of shape (E, ...))."""
    names = [name for name in shapes if ".experts." in name]
    if not names:
        return None, 0
    indices = {int(found.group(1)) for name in names if (found := _EXPERT_INDEX.search(name))}
    count = len(indices) if indices else shapes[names[0]][0]
    return (count if count > 1 else None), sum(math.prod(shapes[name]) for name in names)


def shape_of_module(model: Any, name: str = "model") -> ModelShape:
    """The shape of a built ``torch.nn.Module`` (meta-device parameters are fine: only shapes are read).

    The largest layer is the biggest child of the module list holding the blocks; the dimensions
    come from ``model.config`` when the model has a transformers config.
    """
    parameters = sum(p.numel() for p in model.parameters())
    largest = 0
    for module in model.modules():
        if type(module).__name__ == "ModuleList":
            largest = max(largest, *(sum(p.numel() for p in child.parameters()) for child in module), 0)
    experts, expert_parameters = _stacked_experts(model)
    config: Any = getattr(model, "config", None)
    values = config.to_dict() if hasattr(config, "to_dict") else {}
    try:
        dims = shape_from_config(values, name)
    except ModelShapeError:
        return ModelShape(name, parameters, largest or parameters, num_experts=experts,
                          expert_parameters=expert_parameters)  # fmt: skip
    return ModelShape(name, parameters, largest or dims.largest_layer, dims.hidden_size, dims.num_layers,
                      dims.num_heads, dims.num_kv_heads, dims.intermediate_size, dims.vocab_size,
                      experts or dims.num_experts, dims.experts_per_token, dims.moe_intermediate_size,
                      expert_parameters)  # fmt: skip


def _routed(module: Any) -> bool:
    """Whether ``module``'s forward takes the router's choices (the experts, not the router itself)."""
    try:
        params = inspect.signature(type(module).forward).parameters
    except (TypeError, ValueError):
        return False
    return "top_k_index" in params and "top_k_weights" in params


def _stacked_experts(model: Any) -> tuple[int | None, int]:
    """(experts per layer, their weights in all layers) of the modules that follow the experts protocol
    of ``ParallelismConfig(ep_size=...)``: an integer ``num_experts`` and their own parameters stacked
    by expert (dim 0 of size ``num_experts``) and a forward taking ``top_k_index`` and ``top_k_weights``:
    what ``ep`` splits."""
    count, total = None, 0
    for module in model.modules():
        experts = getattr(module, "num_experts", None)
        if not isinstance(experts, int) or isinstance(experts, bool) or experts < 2 or not _routed(module):
            continue
        stacked = [p for p in module.parameters(recurse=False) if p.dim() >= 1 and p.shape[0] == experts]
        if stacked:
            count, total = experts, total + sum(p.numel() for p in stacked)
    return count, total


def _call_builder(target: str) -> Any:
    module_name, _, function_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ModelShapeError(f"{target}: cannot import module {module_name!r} ({error}).") from error
    builder = getattr(module, function_name, None)
    if not callable(builder):
        raise ModelShapeError(f"{target}: module {module_name!r} has no function {function_name!r}.")
    return builder()


def load_model_shape(source: str) -> ModelShape:
    """The shape of the model ``source`` names, offline: a ``config.json`` (or a folder with one), a
    ``.safetensors`` file (or a folder of them), or ``module:function`` returning a model built on the
    meta device (``with torch.device("meta"): ...``).

    Raises:
        ModelShapeError: ``source`` is none of these, or cannot be read.
    """
    if ":" in source and not os.path.exists(source):
        return shape_of_module(_call_builder(source), source)
    config = os.path.join(source, "config.json") if os.path.isdir(source) else source
    if config.endswith(".json") and os.path.isfile(config):
        with open(config) as handle:
            return shape_from_config(json.load(handle), source)
    if os.path.exists(source):
        return shape_from_safetensors(source)
    raise ModelShapeError(
        f"{source!r} is not a config.json, a folder holding one, a .safetensors checkpoint, or "
        "`module:function`; pass one of these to estimate offline."
    )
