from __future__ import annotations

import pytest
import torch
from torch import nn

from accelerate.utils import (
    CustomDtype,
    calculate_maximum_sizes,
    compute_module_sizes,
    convert_file_size_to_int,
    dtype_byte_size,
    get_max_layer_size,
)
from accelerate.utils.modeling import (
    compute_module_total_buffer_size,
    get_module_leaves,
    get_module_size_with_ties,
)
from tests.big_modeling.tiny_models import TiedLM


def test_dtype_byte_size() -> None:
    assert dtype_byte_size(torch.float32) == 4
    assert dtype_byte_size(torch.bfloat16) == 2
    assert dtype_byte_size(torch.int8) == 1
    assert dtype_byte_size(torch.bool) == 1 / 8
    assert dtype_byte_size(torch.float8_e4m3fn) == 1
    assert dtype_byte_size(CustomDtype.INT4) == 0.5


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (123, 123),
        ("1KB", 1000),
        ("2MiB", 2 * 2**20),
        ("5GB", 5 * 10**9),
        ("8Gb", 10**9),
        ("1.5GB", 1_500_000_000),
    ],
)
def test_convert_file_size_to_int(size: int | str, expected: int) -> None:
    assert convert_file_size_to_int(size) == expected


def test_convert_file_size_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="5GB"):
        convert_file_size_to_int("lots")


def test_module_sizes_match_raw_bytes_and_count_ties_once() -> None:
    model = TiedLM(dim=8, layers=2, vocab=10)
    sizes = compute_module_sizes(model)
    raw = sum(p.numel() * p.element_size() for p in model.parameters()) + sum(
        b.numel() * b.element_size() for b in model.buffers()
    )
    assert sizes[""] == raw  # parameters() yields the tied weight once
    assert sizes["blocks.0"] == sum(p.numel() * 4 for p in model.blocks[0].parameters())
    assert sizes["embed.weight"] == 10 * 8 * 4
    half = compute_module_sizes(model, dtype=torch.float16)
    assert half["blocks.0"] == sizes["blocks.0"] // 2
    special = compute_module_sizes(model, dtype=torch.float16, special_dtypes={"embed.weight": torch.float32})
    assert special["embed.weight"] == sizes["embed.weight"]
    assert compute_module_total_buffer_size(model) == 4


def test_max_layer_size_respects_no_split_classes() -> None:
    model = TiedLM(dim=8, layers=2, vocab=10)
    sizes = compute_module_sizes(model)
    top = list(model.named_children())
    size, names = get_max_layer_size(top, sizes, ["Block"])
    assert names == ["blocks.0", "blocks.1"] and size == sizes["blocks.0"]
    size, names = get_max_layer_size(top, sizes, [])
    assert size == max(sizes["blocks.0.up"], sizes["embed"])
    total, (largest, _) = calculate_maximum_sizes(model)
    assert total == sizes[""] and largest == max(sizes["blocks.0.up"], sizes["embed"])


def test_leaves_and_size_with_ties() -> None:
    model = TiedLM(dim=8, layers=1, vocab=10)
    sizes = compute_module_sizes(model)
    assert "blocks.0.up.weight" in get_module_leaves(sizes) and "blocks.0" not in get_module_leaves(sizes)
    todo: list[tuple[str, nn.Module]] = list(model.named_children())
    total, names, _ = get_module_size_with_ties(["head.weight"], sizes["embed"], sizes, todo)
    assert names == ["head"] and total == sizes["embed"]  # the head holds only the shared weight


@pytest.mark.parametrize("size", ["0MB", "0", "0.0GB", "0Gb", 0, " 0 KiB"])
def test_convert_file_size_zero_is_zero_as_upstream(size: int | str) -> None:
    assert convert_file_size_to_int(size) == 0


@pytest.mark.parametrize("size", [-1, "0XB", "-1MB"])
def test_convert_file_size_rejects_negative_sizes_and_unknown_units(size: int | str) -> None:
    with pytest.raises(ValueError):
        convert_file_size_to_int(size)
