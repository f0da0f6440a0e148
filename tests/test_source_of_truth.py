"""Guards for "one source of truth per concept" (issue 18): each fails when a second copy creeps back.

They read the source, so a new module that spells the mixed-precision modes out again, branches on
the process group's backend inside data/, reaches into the state singletons or fills the
Accelerator's private lists fails here with the file and line, instead of drifting silently.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "accelerate"


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _name(path: Path) -> str:
    return path.relative_to(SRC).as_posix()


# Collections that name precision modes for another vocabulary, each with the reason it is not ours.
_OTHER_VOCABULARIES = {
    "backends/deepspeed/plugin.py",  # DeepSpeed's config sections happen to be called "fp16" / "bf16"
    "backends/fsdp/plugin.py",  # dtype names a policy dict may use ("bf16", "bfloat16", "fp32", ...)
    "big_modeling/quantization/config.py",  # bitsandbytes compute dtypes ("fp32", "fp16", "bf16")
    "test_utils/training.py",  # pad-to multiples per mode, upstream's test helper
    "test_utils/self_check.py",  # the self-check's own expectation: an oracle, kept independent
}


def _literal_strings(node: ast.AST) -> set[str]:
    items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", [])
    return {item.value for item in items if isinstance(item, ast.Constant) and isinstance(item.value, str)}


def test_the_mixed_precision_modes_are_spelled_out_once() -> None:
    found = []
    for path in _modules():
        if _name(path) in _OTHER_VOCABULARIES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            collection = isinstance(node, ast.Tuple | ast.List | ast.Set | ast.Dict)
            if collection and len(_literal_strings(node) & {"fp16", "bf16", "fp8"}) >= 2:
                found.append(f"{_name(path)}:{node.lineno}")
    assert found == [], (
        "precision modes listed outside utils.enums.PrecisionType; derive the list from "
        f"MIXED_PRECISION_MODES / AVAILABLE_MIXED_PRECISION_MODES and validate with check_mixed_precision: {found}"
    )


def _matches(pattern: str, paths: list[Path]) -> list[str]:
    regex = re.compile(pattern)
    return [
        f"{_name(path)}:{number}: {line.strip()}"
        for path in paths
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if regex.search(line) and not line.lstrip().startswith("#")
    ]


def test_data_and_collectives_ask_the_communicator_not_torch_distributed() -> None:
    asking = [
        *sorted((SRC / "data").glob("*.py")),
        SRC / "collectives" / "operations.py",
        SRC / "collectives" / "agreement.py",
    ]
    assert _matches(r"torch\.distributed|\bdist\.|get_backend\(|\"nccl\"", asking) == []


def test_only_the_state_package_reads_the_state_singletons() -> None:
    outside = [p for p in _modules() if not _name(p).startswith("state/")]
    assert _matches(r"\._(STATE|ACCEL_STATE|GRADIENT_STATE)\b", outside) == []


def test_only_the_accelerator_writes_its_prepared_lists_and_step() -> None:
    facade = {"accelerator.py", "accelerator_checkpoints.py", "accelerator_facts.py"}
    outside = [p for p in _modules() if _name(p) not in facade]
    lists = r"accelerator\._(models|optimizers|schedulers|dataloaders|custom_objects)\.(append|extend|insert|clear|pop)\("
    assert _matches(lists + r"|accelerator\.(step|_[a-z_]+) *(=[^=]|\+=)", outside) == []
