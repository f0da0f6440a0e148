from __future__ import annotations

import pytest
import torch

from accelerate.state import PartialState
from accelerate.test_utils import are_the_same_tensors, assert_exception, capture_call_output
from tests.helpers.pool import WorkerPool


def _same_on_ranks(kind: str) -> bool:
    state = PartialState()
    if kind == "same":
        tensor = torch.arange(6.0).reshape(2, 3)
    elif kind == "values":
        tensor = torch.arange(6.0).reshape(2, 3) + state.process_index
    else:  # shapes differ between ranks
        tensor = torch.zeros(state.process_index + 1)
    return are_the_same_tensors(tensor)


def test_are_the_same_tensors_one_process() -> None:
    assert are_the_same_tensors(torch.ones(3))
    with pytest.raises(TypeError, match="torch.Tensor"):
        are_the_same_tensors([1, 2])  # type: ignore[arg-type]


@pytest.mark.parametrize(("kind", "expected"), [("same", True), ("values", False), ("shapes", False)])
def test_are_the_same_tensors_two_processes(pool2: WorkerPool, kind: str, expected: bool) -> None:
    assert pool2.run(_same_on_ranks, kind) == [expected, expected]


def test_assert_exception_passes_on_the_expected_exception() -> None:
    with assert_exception(ValueError, "bad size"):
        raise ValueError("a bad size was given")
    with assert_exception(LookupError):  # subclasses count
        raise KeyError("k")


def test_assert_exception_fails_clearly() -> None:
    with pytest.raises(AssertionError, match="finished normally"), assert_exception(ValueError):
        pass
    got_type_error = pytest.raises(AssertionError, match="expected ValueError to be raised, got TypeError")
    with got_type_error, assert_exception(ValueError):
        raise TypeError("wrong kind")
    with (
        pytest.raises(AssertionError, match="does not contain 'needle'"),
        assert_exception(ValueError, "needle"),
    ):
        raise ValueError("haystack")


def test_capture_call_output() -> None:
    def talk(name: str, *, times: int) -> str:
        for _ in range(times):
            print(f"hi {name}")
        return "ignored"

    assert capture_call_output(talk, "bob", times=2) == "hi bob\nhi bob\n"


def test_capture_call_output_with_partial_state_print() -> None:
    assert capture_call_output(PartialState().print, "from main") == "from main\n"
