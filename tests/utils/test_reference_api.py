"""The probes, constants, environment helpers and hardware-only faces match upstream 1.15's interface.

Walks the reference list (``../shared/reference/upstream-api-1.15.md`` beside the checkout, or $ACCELERATE_API_REFERENCE)
for the sections this area provides: every name imports from its module, functions and classes
take the same parameters (names, order, kinds, literal defaults), dataclasses have the same fields,
listed methods exist with the same parameters, and constant values print as the reference says.
Skipped when the reference file is absent.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import importlib
import inspect
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.reference import REFERENCE

# Whole sections this area provides.
SECTIONS = {
    "accelerate.utils.imports",
    "accelerate.utils.constants",
    "accelerate.utils.environment",
    "accelerate.utils.versions",
    "accelerate.utils.tqdm",
    "accelerate.utils.megatron_lm",
    "accelerate.utils.bnb",
    "accelerate.utils.transformer_engine",
    "accelerate.utils.ao",
    "accelerate.utils.torch_xla",
    "accelerate.inference",
}
# Names in shared sections (`accelerate`, `accelerate.utils`, `accelerate.utils.dataclasses`) that are ours.
HARDWARE_DATACLASSES = {
    "AORecipeKwargs", "AmaxComputeAlgorithm", "Backend", "BnbQuantizationConfig", "FP8BackendType", "FP8Format",
    "FP8RecipeKwargs", "MODEL_CONFIGS_TO_MEGATRON_PARSERS", "MSAMPRecipeKwargs", "MegatronLMPlugin", "OptLevel",
    "TERecipeKwargs", "add_model_config_to_megatron_parser", "parse_bert_config", "parse_glm4_moe_config",
    "parse_gpt2_config", "parse_llama_config", "parse_t5_config",
}  # fmt: skip
SHARED_SECTIONS = {
    "accelerate": {"is_rich_available", "rich", "prepare_pippy"},
    "accelerate.utils.dataclasses": HARDWARE_DATACLASSES,
}
OUR_MODULES = {s.rsplit(".", 1)[-1] for s in SECTIONS if s.startswith("accelerate.utils.")} | {"dataclasses"}


@dataclasses.dataclass
class Entry:
    module: str
    kind: str  # "def" | "class" | "value" | "module"
    name: str
    params: str | None  # the text between the parentheses, or None
    value: str | None  # for "value": the printed value ('' when the reference shows none)
    fields: str | None = None
    methods: str | None = None


_HEADER = re.compile(r"## (accelerate[\w.]*)\s*$")
_ITEM = re.compile(r"- (?:(class|def|module) )?([A-Za-z_]\w*)(.*)$")


def _walk(text: str) -> Iterator[tuple[int, str, int]]:
    """``(index, char, depth)`` for each character outside quotes; brackets of any kind nest."""
    depth, quote = 0, ""
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
            continue
        if ch in "'\"":
            quote = ch
            continue
        depth += (ch in "([{<") - (ch in ")]}>")
        yield i, ch, depth


def _split_call(rest: str) -> tuple[str | None, str]:
    """``(params, tail)`` for text starting with ``(...)``."""
    if not rest.startswith("("):
        return None, rest
    end = next((i for i, ch, depth in _walk(rest) if ch == ")" and depth == 0), len(rest))
    return rest[1:end], rest[end + 1 :]


def _is_ours(module: str, name: str, tail: str) -> bool:
    if module in SECTIONS:
        return True
    if module in SHARED_SECTIONS:
        return name in SHARED_SECTIONS[module]
    if module == "accelerate.utils":
        home = re.search(r"\(defined in accelerate\.utils\.(\w+)\)", tail)
        if home:
            return home.group(1) in OUR_MODULES and (
                home.group(1) != "dataclasses" or name in HARDWARE_DATACLASSES
            )
        return name in _UTILS_VALUES
    return False


# `accelerate.utils` lines without a "defined in" note (constants, aliases, cached probes) that are ours.
_UTILS_VALUES = {
    "MITA_PROFILING_AVAILABLE_PYTORCH_VERSION", "MODEL_NAME", "OPTIMIZER_NAME", "PROFILE_PATTERN_NAME",
    "RNG_STATE_NAME", "SAFE_MODEL_NAME", "SAFE_WEIGHTS_INDEX_NAME", "SAFE_WEIGHTS_NAME", "SAFE_WEIGHTS_PATTERN_NAME",
    "SAMPLER_NAME", "SCALER_NAME", "SCHEDULER_NAME", "TORCH_DISTRIBUTED_OPERATION_TYPES", "TORCH_LAUNCH_PARAMS",
    "WEIGHTS_INDEX_NAME", "WEIGHTS_NAME", "WEIGHTS_PATTERN_NAME", "XPU_PROFILING_AVAILABLE_PYTORCH_VERSION",
    "MegatronEngine", "MegatronLMOptimizerWrapper", "MegatronLMSchedulerWrapper", "check_cuda_fp8_capability",
    "gather_across_data_parallel_groups", "is_hpu_available", "is_mlu_available", "is_musa_available",
    "is_neuron_available", "is_npu_available", "is_sdaa_available", "is_torch_xla_available", "is_xpu_available",
    "megatron_lm_initialize", "megatron_lm_prepare_data_loader", "megatron_lm_prepare_model_optimizer_scheduler",
    "megatron_lm_prepare_optimizer", "megatron_lm_prepare_scheduler", "set_numa_affinity",
}  # fmt: skip


def _parse(path: Path, keep: Callable[[str, str, str], bool] | None = None) -> list[Entry]:
    """The reference's entries that ``keep(module, name, rest_of_line)`` accepts (default: this area's)."""
    keep = keep or _is_ours
    entries: list[Entry] = []
    module: str | None = None
    for line in path.read_text().splitlines():
        header = _HEADER.match(line)
        if header or line.startswith("## "):
            module = header.group(1) if header else None
            continue
        if module is None:
            continue
        if line.startswith("    fields: ") and entries and entries[-1].module == module:
            entries[-1].fields = line[len("    fields: ") :]
            continue
        if line.startswith("    .") and entries and entries[-1].module == module:
            entries[-1].methods = line.strip()
            continue
        item = _ITEM.match(line)
        if not item:
            continue
        kind, name, rest = item.groups()
        params, tail = _split_call(rest) if kind in ("class", "def") else (None, rest)
        if not keep(module, name, tail):
            entries.append(Entry(module, "skip", name, None, None))
            continue
        value = None
        if kind is None:
            kind = "value"
            value = re.sub(r"\s*\[missing\]\s*$", "", rest.split("=", 1)[1]).strip() if "=" in rest else ""
        entries.append(Entry(module, kind, name, params, value))
    return [e for e in entries if e.kind != "skip"]


ENTRIES = _parse(REFERENCE) if REFERENCE.exists() else []
pytestmark = pytest.mark.skipif(not REFERENCE.exists(), reason=f"reference list {REFERENCE} not present")


def _split_params(text: str) -> list[str]:
    cuts = [i for i, ch, depth in _walk(text) if ch == "," and depth == 0]
    bounds = zip([-1, *cuts], [*cuts, len(text)])
    return [part for start, end in bounds if (part := text[start + 1 : end].strip())]


_MISSING = object()


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return _MISSING


# Parameters we add after upstream's, each with a default so that every upstream call binds the same
# way; each is a deliberate difference listed in README.md and docs/differences.md.
_ADDED_PARAMETERS: dict[str, tuple[str, ...]] = {
    "ParallelismConfig": (
        "pp_size",
        "pp_schedule",
        "pp_microbatches",
        "pp_split_points",
        "pp_loss_fn",
        "ep_size",
    ),
}


def _check_signature(obj: Any, params: str, where: str) -> None:
    sig = inspect.signature(obj)
    ours = [p for p in sig.parameters.values() if p.name != "self"]
    added = _ADDED_PARAMETERS.get(getattr(obj, "__qualname__", ""), ())
    if added:
        tail = [p.name for p in ours[-len(added) :]]
        assert tail == list(added) and all(
            p.default is not inspect.Parameter.empty for p in ours[-len(added) :]
        ), f"{where}: our added parameters {list(added)} must come last, each with a default"
        ours = ours[: -len(added)]
    expected = [p for p in _split_params(params) if p not in ("*", "/")]
    got_names = [
        ("*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else "") + p.name
        for p in ours
    ]
    want_names = [p.split("=", 1)[0] for p in expected]
    assert got_names == want_names, f"{where}: parameters {got_names}, upstream has {want_names}"
    for param, text in zip(ours, expected):
        if "=" not in text:
            assert param.default is inspect.Parameter.empty or param.kind in (
                param.VAR_POSITIONAL,
                param.VAR_KEYWORD,
            ), f"{where}: {param.name} has a default ({param.default!r}); upstream's is required"
            continue
        want = _literal(text.split("=", 1)[1])
        if want is not _MISSING:
            assert param.default == want and type(param.default) is type(want), (
                f"{where}: {param.name}={param.default!r}, upstream's default is {want!r}"
            )


def _resolve(entry: Entry) -> Any:
    module = importlib.import_module(entry.module)
    if hasattr(module, entry.name):
        return getattr(module, entry.name)
    return importlib.import_module(f"{entry.module}.{entry.name}")


def _id(entry: Entry) -> str:
    return f"{entry.module}:{entry.name}"


def test_reference_lists_our_sections() -> None:
    modules = {e.module for e in ENTRIES}
    assert modules >= SECTIONS, f"sections not found in the reference: {sorted(SECTIONS - modules)}"
    assert len(ENTRIES) > 250


@pytest.mark.parametrize("entry", ENTRIES, ids=_id)
def test_name_imports_with_upstreams_signature(entry: Entry) -> None:
    obj = _resolve(entry)
    where = _id(entry)
    if entry.kind == "value":
        printed = re.sub(r" at 0x[0-9a-f]+", "", repr(obj))
        if entry.value:
            assert printed.startswith(entry.value), (
                f"{where} = {printed[:120]}; upstream prints {entry.value}"
            )
        return
    if entry.kind == "module":
        assert inspect.ismodule(obj), where
        return
    assert callable(obj), f"{where} is {type(obj).__name__}, not callable"
    assert inspect.isclass(obj) == (entry.kind == "class"), f"{where}: expected a {entry.kind}"
    if entry.params is not None and not (inspect.isclass(obj) and issubclass(obj, enum.Enum)):
        _check_signature(obj, entry.params, where)
    if entry.fields is not None:
        _check_fields(obj, entry.fields, where)
    if entry.methods is not None:
        _check_methods(obj, entry.methods, where)


def _check_fields(cls: Any, text: str, where: str) -> None:
    assert dataclasses.is_dataclass(cls), f"{where} should be a dataclass"
    got = [f.name for f in dataclasses.fields(cls)]
    added = list(_ADDED_PARAMETERS.get(cls.__qualname__, ()))
    if added:  # our fields come after upstream's (checked with the signature)
        assert got[-len(added) :] == added, f"{where}: our added fields {added} must come last"
        got = got[: -len(added)]
    want = [p.split("=", 1)[0] for p in _split_params(text)]
    assert got == want, f"{where}: fields {got}, upstream has {want}"


def _check_methods(cls: Any, text: str, where: str) -> None:
    for match in re.finditer(r"\.(\w+)(\((?:[^()]|\([^()]*\))*\)| \(property\))", text):
        name, params = match.groups()
        assert hasattr(cls, name), f"{where} lacks .{name}"
        member = inspect.getattr_static(cls, name)
        if params == " (property)":
            continue
        # Only methods written for this class are checked here; inherited torch/base ones are theirs.
        if name in vars(cls) and inspect.isfunction(member):
            _check_signature(member, params[1:-1], f"{where}.{name}")
