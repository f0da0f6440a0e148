"""infer_auto_device_map plans upstream's maps: its order, its reservations, ties, buffers, fallback.

The toy models and budgets are upstream's documented planning cases; integer keys are planning
keys only (no GPU is needed). Sizes in bytes (float32): ModelForTest is linear1 64, batchnorm 72
(40 of it buffers), linear2 100, 236 in all.
"""

from __future__ import annotations

import logging
import warnings
from collections import OrderedDict
from typing import Any

import pytest
import torch
from torch import nn

from accelerate.utils import compute_module_sizes, infer_auto_device_map


class ModelForTest(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear1 = nn.Linear(3, 4)
        self.batchnorm = nn.BatchNorm1d(4)
        self.linear2 = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.batchnorm(self.linear1(x)))


def _three() -> nn.Sequential:
    return nn.Sequential(OrderedDict([(f"layer{i}", ModelForTest()) for i in (1, 2, 3)]))


def _quiet(model: nn.Module, **options: Any) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return infer_auto_device_map(model, **options)


def test_sizes_of_the_toy_model() -> None:
    sizes = compute_module_sizes(ModelForTest())
    assert (sizes[""], sizes["linear1"], sizes["batchnorm"], sizes["linear2"]) == (236, 64, 72, 100)


def test_gpu0_keeps_room_for_the_largest_layer_then_gpu1_takes_the_rest() -> None:
    # GPU 0 keeps 100 bytes (linear2) free for offloaded layers: only linear1 fits there.
    model = ModelForTest()
    assert _quiet(model, max_memory={0: 200, 1: 200}) == {"linear1": 0, "batchnorm": 1, "linear2": 1}
    # Only the first GPU (and the CPU) keep that room: GPU 1 is filled to the byte.
    assert _quiet(model, max_memory={0: 200, 1: 172, 2: 200}) == {"linear1": 0, "batchnorm": 1, "linear2": 1}


def test_the_reservation_shrinks_as_the_largest_layers_are_placed() -> None:
    assert _quiet(ModelForTest(), max_memory={0: 300}) == {"": 0}
    assert _quiet(ModelForTest(), max_memory={0: 235}) == {
        "linear1": 0,
        "batchnorm": "disk",
        "linear2": "disk",
    }


def test_the_cpu_keeps_room_too_when_there_are_gpus() -> None:
    device_map = _quiet(ModelForTest(), max_memory={0: 100, "cpu": 200})
    assert device_map == {"linear1": "cpu", "batchnorm": "disk", "linear2": "disk"}


def test_tied_weights_fit_together() -> None:
    model = ModelForTest()
    model.linear1.weight = model.linear2.weight  # type: ignore[assignment]
    assert _quiet(model, max_memory={0: 200, 1: 200}) == {"": 0}


def test_splits_happen_at_the_layer_level_unless_no_split() -> None:
    model = nn.Sequential(ModelForTest(), ModelForTest(), ModelForTest())
    expected = {"0": 0, "1.linear1": 0, "1.batchnorm": 0, "1.linear2": 1, "2": 1}
    assert _quiet(model, max_memory={0: 500, 1: 500}) == expected
    no_split = _quiet(model, max_memory={0: 500, 1: 500}, no_split_module_classes=["ModelForTest"])
    assert no_split == {"0": 0, "1": 1, "2": 1}


@pytest.mark.parametrize(
    ("ties", "expected"),
    [
        (
            {"layer3__linear2": "layer1__linear2"},
            {"layer1": 0, "layer3.linear2": 0, "layer2": 1, "layer3.linear1": 1, "layer3.batchnorm": 1},
        ),
        (
            {"layer3__linear2": "layer1__linear2", "layer2__linear2": "layer1__linear2"},
            {
                "layer1": 0,
                "layer2.linear2": 0,
                "layer3.linear2": 0,
                "layer2.linear1": 1,
                "layer2.batchnorm": 1,
                "layer3.linear1": 1,
                "layer3.batchnorm": 1,
            },
        ),
        (
            {
                "layer3__linear2": "layer1__linear2",
                "layer2__linear2": "layer1__linear2",
                "layer2__linear1": "layer1__linear1",
            },
            {
                "layer1": 0,
                "layer2.linear1": 0,
                "layer2.linear2": 0,
                "layer3.linear2": 0,
                "layer2.batchnorm": 1,
                "layer3.linear1": 1,
                "layer3.batchnorm": 1,
            },
        ),
    ],
)
def test_tied_modules_are_split_to_go_with_their_first_module(
    ties: dict[str, str], expected: dict[str, Any]
) -> None:
    model = _three()
    for target, source in ties.items():
        (t_layer, t_lin), (s_layer, s_lin) = target.split("__"), source.split("__")
        getattr(getattr(model, t_layer), t_lin).weight = getattr(getattr(model, s_layer), s_lin).weight
    assert _quiet(model, max_memory={0: 400, 1: 500}) == expected


def test_ties_inside_one_sequential() -> None:
    widths = [("linear1", 4), ("linear2", 6), ("linear3", 4), ("linear4", 6)]
    model = nn.Sequential(OrderedDict([(name, nn.Linear(n, n)) for name, n in widths]))
    model.linear3.weight = model.linear1.weight
    model.linear3.bias = model.linear1.bias
    assert _quiet(model, max_memory={0: 250, 1: 400}) == {
        "linear1": 0,
        "linear3": 0,
        "linear2": 1,
        "linear4": 1,
    }


def _with_buffers(extra_layer: bool = False) -> ModelForTest:
    model = ModelForTest()
    model.linear1.register_buffer("test_buffer1", torch.zeros(10, 2))
    model.batchnorm.register_buffer("test_buffer2", torch.zeros(10, 3))
    model.linear2.register_buffer("test_buffer3", torch.zeros(10, 3))
    if extra_layer:
        model.linear3 = nn.Linear(4, 5)
        model.linear3.register_buffer("test_buffer4", torch.zeros(10, 2))
    return model


def test_buffers_of_offloaded_layers_warn_when_no_gpu_can_hold_them() -> None:
    model = _with_buffers()
    expected = {"linear1": 0, "batchnorm": "cpu", "linear2": "cpu"}
    with pytest.warns(UserWarning, match="offload_buffers=True"):
        assert infer_auto_device_map(model, max_memory={0: 400, "cpu": "1GB"}) == expected
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert (
            infer_auto_device_map(model, max_memory={0: 400, "cpu": "1GB"}, offload_buffers=True) == expected
        )


def test_buffers_checked_against_every_gpu() -> None:
    model = _with_buffers(extra_layer=True)
    expected = {"linear1": 0, "batchnorm": 1, "linear2": "cpu", "linear3": "cpu"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert infer_auto_device_map(model, max_memory={0: 400, 1: 400, "cpu": "1GB"}) == expected
    with pytest.warns(UserWarning, match="offload_buffers"):
        assert infer_auto_device_map(model, max_memory={0: 400, 1: 200, "cpu": "1GB"}) == expected
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        options: dict[str, Any] = {"max_memory": {0: 400, 1: 200, "cpu": "1GB"}, "offload_buffers": True}
        assert infer_auto_device_map(model, **options) == expected


def _nested(*shapes: tuple[int, int]) -> nn.Sequential:
    inner = nn.Sequential(
        OrderedDict([(f"linear{i}", nn.Linear(*shape)) for i, shape in enumerate(shapes, 1)])
    )
    return nn.Sequential(OrderedDict([("module", inner)]))


def test_fallback_allocation_fills_gpu0_with_a_later_layer(caplog: pytest.LogCaptureFixture) -> None:
    model = _nested((10, 4), (4, 4), (4, 8))
    with caplog.at_level(logging.INFO):
        assert infer_auto_device_map(model, max_memory={0: 256}) == {"": "disk"}
    assert "insufficient memory" in caplog.text and "0: 336 bytes" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO):
        device_map = infer_auto_device_map(model, max_memory={0: 256}, fallback_allocation=True)
    assert device_map == {"module.linear1": "disk", "module.linear2": 0, "module.linear3": "disk"}
    assert "insufficient memory" not in caplog.text


def test_fallback_allocation_that_finds_nothing_changes_nothing() -> None:
    model = _nested((10, 10), (10, 10), (10, 10))
    assert infer_auto_device_map(model, max_memory={0: 30}, fallback_allocation=True) == {"": "disk"}


def test_fallback_allocation_with_tied_weights_and_with_buffers() -> None:
    tied = nn.Sequential(OrderedDict([("linear1", nn.Linear(10, 10)), ("linear2", nn.Linear(10, 10))]))
    tied.linear2.weight = tied.linear1.weight
    assert infer_auto_device_map(tied, max_memory={0: 600}, fallback_allocation=True) == {"": 0}
    model = nn.Sequential(
        OrderedDict(
            [
                ("linear1", nn.Linear(10, 10)),
                ("batchnorm", nn.BatchNorm1d(10)),
                ("linear2", nn.Linear(10, 10)),
            ]
        )
    )
    for index, name in enumerate(["linear1", "batchnorm", "linear2"], 1):
        getattr(model, name).register_buffer(f"buffer{index}", torch.zeros(5))
    with pytest.warns(UserWarning, match="offload_buffers"):
        device_map = infer_auto_device_map(model, max_memory={0: 678}, fallback_allocation=True)
    assert device_map == {"batchnorm": 0, "linear1": "disk", "linear2": "disk"}


def test_clean_result_false_keeps_every_block() -> None:
    device_map = _quiet(ModelForTest(), max_memory={0: 1000}, clean_result=False)
    assert device_map == {"linear1": 0, "batchnorm": 0, "linear2": 0}


def test_root_tensors_are_planned_params_first_buffers_last() -> None:
    model = ModelForTest()
    model.register_parameter("scale", nn.Parameter(torch.ones(4)))
    model.register_buffer("table", torch.zeros(64))
    device_map = _quiet(model, max_memory={0: 400}, clean_result=False)
    assert list(device_map) == ["scale", "linear1", "batchnorm", "linear2", "table"]
    assert device_map["table"] == "disk"  # 256 bytes: the last to be planned, after the layers


def test_balanced_memory_measures_each_no_split_class_by_its_first_block() -> None:
    from accelerate.big_modeling.budgets import balance_budgets

    model = nn.Sequential(ModelForTest(), nn.Sequential(ModelForTest(), nn.Linear(40, 40)))
    model[0] = nn.Sequential(nn.Linear(2, 2))  # the first block of class Sequential: 24 bytes
    sizes = compute_module_sizes(model)
    big = 10 * sizes[""]
    balanced = balance_budgets(model, {0: big, 1: big}, ["Sequential"])
    # Room added: 1.25 x max(first Sequential block, mean leaf module), not the largest Sequential.
    leaves = [sizes[n] for n in ("0.0", "1.0.linear1", "1.0.batchnorm", "1.0.linear2", "1.1")]
    assert balanced[0] == sizes[""] // 2 + int(1.25 * max(sizes["0"], sum(leaves) // len(leaves)))


def test_t5_embeddings_tied_three_ways_land_on_gpu0_as_upstream_plans_t0pp() -> None:
    # Upstream's T0pp case on a tiny T5 from config: shared, both embed_tokens (and the tied lm_head)
    # are planned together on GPU 0 by splitting the encoder and decoder around them.
    transformers = pytest.importorskip("transformers")
    from accelerate import init_empty_weights

    config = transformers.T5Config(
        vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=3, num_decoder_layers=3, num_heads=2
    )
    with init_empty_weights():
        model = transformers.T5ForConditionalGeneration(config)
    model.tie_weights()
    special = {n: torch.float32 for n, _ in model.named_parameters() if "wo" in n}
    third = compute_module_sizes(model, dtype=torch.float16)[""] // 3
    device_map = _quiet(
        model,
        max_memory={0: third, 1: third, "cpu": third},
        no_split_module_classes=["T5Block"],
        dtype=torch.float16,
        special_dtypes=special,
    )
    tied = ["shared", "encoder.embed_tokens", "decoder.embed_tokens", "lm_head"]
    assert [device_map[name] for name in tied] == [0, 0, 0, 0]
    assert device_map["encoder.block.0"] == 1 and device_map["decoder.block"] == "disk"


def test_a_config_asking_for_ties_the_weights_lack_is_warned_in_upstream_words(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Untied(ModelForTest):
        config = type("Config", (), {"tie_word_embeddings": True})()

        def get_output_embeddings(self) -> nn.Module:
            return self.linear2

    with caplog.at_level(logging.WARNING):
        _quiet(Untied(), max_memory={"cpu": 10**6})
    assert "The model weights are not tied. Please use the `tie_weights` method" in caplog.text
