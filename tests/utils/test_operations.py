"""`accelerate.utils.operations`: the names upstream has there, tested on their real behaviour."""

from __future__ import annotations

import pickle
import warnings
from collections import namedtuple
from dataclasses import dataclass

import pytest
import torch

from accelerate.collectives.operations import check_operation_inputs
from accelerate.state import PartialState
from accelerate.utils import operations as ops
from tests.helpers.pool import WorkerPool

Pair = namedtuple("Pair", ["x", "y"])


@dataclass
class Batch:
    inputs: torch.Tensor
    label: str


# --- tensor descriptions ------------------------------------------------------------------------------
def test_dtype_codes_round_trip() -> None:
    assert ops.TENSOR_TYPE_TO_INT[torch.float32] == 1 and ops.TENSOR_INT_TO_DTYPE[4] is torch.bfloat16
    for dtype, code in ops.TENSOR_TYPE_TO_INT.items():
        assert ops.TENSOR_INT_TO_DTYPE[code] is dtype


def test_get_shape_and_initialize_tensors_keep_structure() -> None:
    data = {"a": torch.zeros(2, 3), "b": [torch.ones(4, dtype=torch.int64)], "c": "text"}
    assert ops.get_shape(data) == {"a": [2, 3], "b": [[4]], "c": "text"}
    from accelerate.utils import TensorInformation

    infos = {
        "a": TensorInformation(torch.Size([2, 3]), torch.float16),
        "b": (TensorInformation([5], torch.int32),),
    }
    assert ops.is_tensor_information(infos["a"]) and not ops.is_tensor_information(torch.zeros(1))
    made = ops.initialize_tensors(infos)
    assert made["a"].shape == (2, 3) and made["a"].dtype == torch.float16
    assert isinstance(made["b"], tuple) and made["b"][0].shape == (5,) and made["b"][0].dtype == torch.int32


def test_find_device_and_xpu_check() -> None:
    assert ops.find_device({"x": "no tensor", "y": [torch.zeros(1)]}) == torch.device("cpu")
    assert ops.find_device(Batch(torch.zeros(1), "a")) == torch.device("cpu")
    assert ops.find_device({"x": 1, "y": ["a"]}) is None
    assert ops.find_device(torch.nn.Linear(1, 1).weight) == torch.device("cpu")
    assert not ops.is_torch_xpu_tensor(torch.zeros(1)) and not ops.is_torch_xpu_tensor("x")
    assert ops.is_torch_xpu_tensor(torch.zeros(1, device="meta")) is False


def test_ignorant_find_batch_size_never_raises() -> None:
    assert ops.ignorant_find_batch_size([{"x": torch.zeros(7, 2)}]) == 7
    assert ops.ignorant_find_batch_size({"x": "text"}) is None
    assert ops.ignorant_find_batch_size(torch.tensor(3.0)) is None
    assert ops.ignorant_find_batch_size(object()) is None


def test_pad_input_tensors_pads_to_a_multiple_of_the_processes() -> None:
    x = torch.arange(10.0).reshape(5, 2)
    padded = ops.pad_input_tensors(x, batch_size=5, num_processes=2)
    assert padded.shape == (6, 2)
    assert torch.equal(padded[:5], x) and torch.equal(padded[5], torch.zeros(2))
    assert ops.pad_input_tensors(torch.ones(7, 1), 7, 4).shape == (8, 1)
    assert ops.pad_input_tensors(x, 5, 5) is x  # already even
    nested = ops.pad_input_tensors({"x": torch.ones(3, 2), "mask": torch.ones(2, 3)}, 3, 2, dim=0)
    assert nested["x"].shape == (4, 2) and nested["mask"].shape == (2, 3)  # not batched along dim 0
    assert ops.pad_input_tensors(torch.ones(2, 3), 3, 2, dim=1).shape == (2, 4)
    with pytest.raises(ValueError, match="num_processes=0"):
        ops.pad_input_tensors(x, 5, 0)


# --- fp32 outputs ----------------------------------------------------------------------------------------
def test_convert_to_fp32_converts_only_half_floats() -> None:
    data = {
        "h": torch.ones(2, dtype=torch.float16),
        "b": Pair(torch.ones(1, dtype=torch.bfloat16), torch.arange(2)),
        "d": torch.ones(1, dtype=torch.float64),
        "s": "keep",
    }
    out = ops.convert_to_fp32(data)
    assert out["h"].dtype == torch.float32 and out["b"].x.dtype == torch.float32
    assert isinstance(out["b"], Pair) and out["b"].y.dtype == torch.int64
    assert out["d"].dtype == torch.float64 and out["s"] == "keep"
    assert ops.convert_to_fp32(torch.ones(1, dtype=torch.float16)).dtype == torch.float32


def test_convert_outputs_to_fp32_wraps_a_forward() -> None:
    model = torch.nn.Linear(2, 2).to(torch.bfloat16)
    forward = ops.convert_outputs_to_fp32(model.forward)
    out = forward(torch.ones(1, 2, dtype=torch.bfloat16))
    expected = model(torch.ones(1, 2, dtype=torch.bfloat16)).float()
    assert out.dtype == torch.float32 and torch.equal(out, expected)
    assert isinstance(forward.__wrapped__, ops.ConvertOutputsToFp32)  # type: ignore[attr-defined]
    converter = ops.ConvertOutputsToFp32(model.forward)
    assert converter(torch.ones(1, 2, dtype=torch.bfloat16)).dtype == torch.float32
    assert converter.__name__ == "forward"
    with pytest.raises(pickle.PicklingError, match="unwrap_model"):
        pickle.dumps(converter)


def test_mixed_precision_forward_still_returns_fp32() -> None:
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True, mixed_precision="bf16")
    model = accelerator.prepare(torch.nn.Linear(3, 3))
    assert model(torch.ones(2, 3)).dtype == torch.float32


# --- GatheredParameters ------------------------------------------------------------------------------------
def test_gathered_parameters_is_a_no_op_without_zero3() -> None:
    model = torch.nn.Linear(2, 2)
    with ops.GatheredParameters(model.parameters(), modifier_rank=0):
        model.weight.data.fill_(3.0)
    assert torch.all(model.weight == 3.0)  # edits stay: the parameters were whole all along
    with ops.GatheredParameters(model.weight, enabled=False):
        pass


# --- nested tensors -----------------------------------------------------------------------------------------
def test_cannot_pad_nested_tensor_warning_is_a_user_warning() -> None:
    assert issubclass(ops.CannotPadNestedTensorWarning, UserWarning)


# --- decorators in one process ----------------------------------------------------------------------------
@ops.verify_operation
def _sum_all(tensor: torch.Tensor) -> torch.Tensor:
    return ops.reduce(tensor, reduction="sum")


@ops.chained_operation
def _gather_twice(tensor: torch.Tensor) -> torch.Tensor:
    return ops.gather(ops.gather(tensor))


def test_decorators_pass_through_in_one_process() -> None:
    assert torch.equal(_sum_all(torch.ones(2)), torch.ones(2))
    assert _sum_all.__name__ == "_sum_all"
    assert torch.equal(_gather_twice(torch.arange(3)), torch.arange(3))


def test_copy_tensor_to_devices_in_one_process() -> None:
    t = torch.arange(4)
    assert ops.copy_tensor_to_devices(t) is t
    assert ops.gather_tensor_shape(torch.zeros(2, 3, dtype=torch.float16)) == (torch.Size([2, 3]), 3)
    with pytest.raises(ValueError, match="cannot be None"):
        ops.copy_tensor_to_devices(None)


# --- on two processes -------------------------------------------------------------------------------------
def _copy_from_rank_one() -> dict[str, object]:
    rank = PartialState().process_index
    mine = torch.arange(6, dtype=torch.float64).reshape(2, 3) * 10 if rank == 1 else None
    shape = ops.gather_tensor_shape(mine)
    copied = ops.copy_tensor_to_devices(mine)
    return {"shape": (list(shape[0]), shape[1]), "copied": copied.tolist(), "dtype": str(copied.dtype)}


def test_copy_tensor_to_devices_sends_the_owner_tensor(pool2: WorkerPool) -> None:
    for result in pool2.run(_copy_from_rank_one, timeout=60):
        assert result["shape"] == ([2, 3], ops.TENSOR_TYPE_TO_INT[torch.float64])
        assert result["copied"] == [[0.0, 10.0, 20.0], [30.0, 40.0, 50.0]]
        assert result["dtype"] == "torch.float64"


def _two_owners() -> str:
    try:
        ops.copy_tensor_to_devices(torch.ones(1))
    except ValueError as exc:
        return str(exc)
    return "no error"


def test_copy_tensor_to_devices_refuses_two_owners_on_every_process(pool2: WorkerPool) -> None:
    for text in pool2.run(_two_owners, timeout=60):
        assert "exactly one process" in text and "[0, 1]" in text


def _verified_mismatch() -> str:
    rank = PartialState().process_index
    try:
        _sum_all(torch.ones(rank + 2))
    except ops.DistributedOperationException as exc:
        return str(exc)
    return "no error"


def _verified_match() -> list[float]:
    return _sum_all(tensor=torch.ones(2)).tolist()  # type: ignore[no-any-return]


def test_verify_operation_checks_shapes_in_debug_mode(pool2: WorkerPool) -> None:
    for text in pool2.run(_verified_mismatch, env={"ACCELERATE_DEBUG_MODE": "1"}, timeout=60):
        assert "_sum_all" in text
        assert "process 0: ['(2,):float32']" in text and "process 1: ['(3,):float32']" in text
    assert pool2.run(_verified_match, env={"ACCELERATE_DEBUG_MODE": "1"}, timeout=60) == [[2.0, 2.0]] * 2


def _chained_mismatch() -> tuple[str, str]:
    rank = PartialState().process_index
    try:
        _gather_twice(torch.ones(rank + 1))
    except ops.DistributedOperationException as exc:
        return str(exc), type(exc.__cause__).__name__
    return "no error", ""


def test_chained_operation_names_the_outer_call(pool2: WorkerPool) -> None:
    for text, cause in pool2.run(_chained_mismatch, env={"ACCELERATE_DEBUG_MODE": "1"}, timeout=60):
        assert "_gather_twice" in text and "`gather`" in text
        assert cause == "DistributedOperationException"


def _check_inputs_without_debug_mode() -> str:
    rank = PartialState().process_index
    try:
        check_operation_inputs("custom_op", [torch.ones(1)] * (rank + 1))
    except ops.DistributedOperationException as exc:
        return str(exc)
    return "no error"


def test_check_operation_inputs_checks_even_without_debug_mode(pool2: WorkerPool) -> None:
    for text in pool2.run(_check_inputs_without_debug_mode, timeout=60):
        assert "`custom_op`" in text and "different inputs" in text


def _pad_nested() -> tuple[list[str], list[int]]:
    nested = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = ops.pad_across_processes({"n": nested, "t": torch.ones(PartialState().process_index + 1)})
    return [type(w.message).__name__ for w in caught], list(out["t"].shape)


def test_pad_across_processes_warns_on_nested_tensors(pool2: WorkerPool) -> None:
    for names, shape in pool2.run(_pad_nested, timeout=60):
        assert names == ["CannotPadNestedTensorWarning"]
        assert shape == [2]  # the regular tensor next to it is still padded


def test_concatenate_joins_tensors_and_refuses_other_leaves_as_upstream() -> None:
    # Upstream concatenates tensor leaves of nested lists/tuples/dicts and raises TypeError for any other leaf.
    joined = ops.concatenate(
        [{"a": torch.ones(1), "b": (torch.zeros(2),)}, {"a": torch.ones(2), "b": (torch.ones(1),)}]
    )
    assert joined["a"].tolist() == [1.0, 1.0, 1.0] and joined["b"][0].tolist() == [0.0, 0.0, 1.0]
    with pytest.raises(TypeError, match="int"):
        ops.concatenate([{"a": torch.ones(1), "n": 1}, {"a": torch.ones(1), "n": 2}])
    with pytest.raises(TypeError, match="str"):
        ops.concatenate([[torch.ones(1), "x"], [torch.ones(1), "y"]])
    with pytest.raises(TypeError, match="NoneType"):
        ops.concatenate([{"a": torch.ones(1), "n": None}, {"a": torch.ones(1), "n": None}])
    pair = namedtuple("pair", "x y")  # noqa: PYI024 (a plain namedtuple, as users pass)
    joined_pair = ops.concatenate(
        [pair(torch.ones(1), [torch.zeros(1)]), pair(torch.ones(1), [torch.ones(1)])]
    )
    assert type(joined_pair) is pair and joined_pair.y[0].tolist() == [0.0, 1.0]


def test_concatenate_as_upstreams_tests_drive_it() -> None:
    from accelerate.utils import concatenate

    assert concatenate(["test_string"]) == "test_string"  # one batch comes back as it is
    one = torch.randn(3, 4)
    assert torch.equal(concatenate([one]), one)
    with pytest.raises(TypeError):  # several batches cannot join a non-tensor leaf
        concatenate([{"a": torch.ones(1), "c": "s1"}, {"a": torch.ones(1), "c": "s2"}])
    with pytest.raises(RuntimeError):  # misaligned batches: torch.cat's own error
        concatenate([torch.randn(5, 10), torch.randn(5, 12)])
    nested = concatenate([{"inputs": (torch.ones(2, 3),), "labels": torch.ones(2, 1)}] * 3)
    assert isinstance(nested["inputs"], tuple) and nested["inputs"][0].shape == (6, 3)
    assert concatenate([torch.ones(3, 2, 4), torch.ones(3, 2, 4)], dim=1).shape == (3, 4, 4)


def test_recursively_apply_error_is_upstreams() -> None:
    with pytest.raises(TypeError) as error:
        ops.recursively_apply(torch.neg, (torch.tensor(1), 1), error_on_other_type=True)
    assert str(error.value) == (
        "Unsupported types (<class 'int'>) passed to `neg`. Only nested list/tuple/dicts of objects that are valid "
        "for `is_torch_tensor` should be passed."
    )


def test_honor_type_keeps_namedtuples_and_sequences() -> None:
    from accelerate.utils import honor_type

    Point = namedtuple("Point", ["x", "y"])
    assert honor_type(Point(1, 2), iter([3, 4])) == Point(3, 4)
    assert honor_type((1,), iter([3, 4])) == (3, 4) and honor_type([1], iter([5])) == [5]
