from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from accelerate import PartialState
from accelerate.state import AcceleratorState, DistributedType, split_for_process
from tests.helpers.pool import WorkerPool


def test_single_process_defaults() -> None:
    state = PartialState()
    assert state is PartialState()
    assert (state.num_processes, state.process_index, state.local_process_index) == (1, 0, 0)
    assert state.is_main_process and state.is_local_main_process and state.is_last_process
    assert state.device == torch.device("cpu")
    assert state.distributed_type is DistributedType.NO
    assert not state.use_distributed
    state.wait_for_everyone()  # a no-op


def test_tpu_alias() -> None:
    assert DistributedType.TPU is DistributedType.XLA


@pytest.mark.parametrize(
    ("inputs", "padding", "expected"),
    [
        ([1, 2, 3, 4, 5], False, [[1, 2, 3], [4, 5]]),
        ([1, 2, 3, 4, 5], True, [[1, 2, 3], [4, 5, 5]]),
        ((1, 2, 3), False, [(1, 2), (3,)]),
        ([1], True, [[1], [1]]),
    ],
)
def test_split_for_process(inputs: list[int], padding: bool, expected: list[list[int]]) -> None:
    assert [split_for_process(inputs, 2, i, padding) for i in range(2)] == expected


def test_split_tensor_and_dict() -> None:
    tensor = torch.arange(5)
    assert split_for_process(tensor, 2, 1, apply_padding=True).tolist() == [3, 4, 4]
    shares = [split_for_process({"a": [1, 2, 3], "b": torch.arange(3)}, 2, i) for i in range(2)]
    assert shares[0]["a"] == [1, 2] and shares[1]["b"].tolist() == [2]


def _rows(dataset: object) -> list[int]:
    return list(dataset["x"])  # type: ignore[index]


def test_split_a_datasets_dataset_by_select() -> None:
    # As upstream 1.15: each share is `dataset.select(...)` of its rows (a Dataset again), padded with
    # the dataset's last row (as lists and tensors are); a process past the end of the data gets no
    # row unless apply_padding asks for one.
    datasets = pytest.importorskip("datasets")
    dataset = datasets.Dataset.from_dict({"x": list(range(7))})
    shares = [split_for_process(dataset, 3, i) for i in range(3)]
    assert all(isinstance(share, datasets.Dataset) for share in shares)
    assert [_rows(share) for share in shares] == [[0, 1, 2], [3, 4], [5, 6]]
    padded = [_rows(split_for_process(dataset, 3, i, apply_padding=True)) for i in range(3)]
    assert padded == [[0, 1, 2], [3, 4, 6], [5, 6, 6]]
    tiny = datasets.Dataset.from_dict({"x": [0, 1]})
    assert [_rows(split_for_process(tiny, 3, i)) for i in range(3)] == [[0], [1], []]
    assert [_rows(split_for_process(tiny, 3, i, apply_padding=True)) for i in range(3)] == [[0], [1], [1]]
    both = split_for_process({"d": dataset, "l": list(range(7))}, 2, 1, apply_padding=True)
    assert _rows(both["d"]) == [4, 5, 6, 6] and both["l"] == [4, 5, 6, 6]


def test_three_processes_pad_with_the_inputs_last_item() -> None:
    # Upstream pads every short share with inputs[-1] (tensors through pad_across_processes with
    # pad_index=inputs[-1]), not with the share's own last item.
    data = list(range(7))
    assert [split_for_process(data, 3, i, True) for i in range(3)] == [[0, 1, 2], [3, 4, 6], [5, 6, 6]]
    assert [split_for_process(tuple(data), 3, i, True) for i in range(3)] == [(0, 1, 2), (3, 4, 6), (5, 6, 6)]
    rows = torch.arange(14).view(7, 2)
    assert split_for_process(rows, 3, 1, True).tolist() == [[6, 7], [8, 9], [12, 13]]
    assert [split_for_process(data[:6], 3, i, True) for i in range(3)] == [[0, 1], [2, 3], [4, 5]]
    assert [split_for_process([0, 1], 4, i) for i in range(4)] == [[0], [1], [], []]
    assert [split_for_process([0, 1], 4, i, True) for i in range(4)] == [[0], [1], [1], [1]]


def split_dataset_on_rank() -> list[int]:
    import datasets

    dataset = datasets.Dataset.from_dict({"x": list(range(5))})
    with PartialState().split_between_processes(dataset, apply_padding=True) as share:
        assert isinstance(share, datasets.Dataset)
        return _rows(share)


def test_split_between_processes_a_datasets_dataset(pool2: WorkerPool) -> None:
    pytest.importorskip("datasets")
    assert pool2.run(split_dataset_on_rank) == [[0, 1, 2], [3, 4, 4]]


def test_split_unsized_input_raises() -> None:
    with pytest.raises(TypeError, match="generator"):
        split_for_process((x for x in range(3)), 2, 0)
    with pytest.raises(ValueError, match="one length"):
        split_for_process({"a": [1], "b": [1, 2]}, 2, 0)


def test_decorators_single_process() -> None:
    state = PartialState()
    assert state.on_main_process(lambda: 1)() == 1
    assert state.on_process(process_index=1)(lambda: 1)() is None
    with pytest.raises(TypeError, match="process_index"):
        state.on_process(lambda: 1)


def test_cpu_contradiction_is_not_raised_on_cpu_machine() -> None:
    PartialState()
    PartialState(cpu=True)  # same device on a CPU-only machine: nothing contradicts


def test_accelerator_state_contradiction_names_both_values() -> None:
    AcceleratorState(mixed_precision="bf16")
    with pytest.raises(ValueError, match="'bf16'.*'fp16'"):
        AcceleratorState(mixed_precision="fp16")


# --- 2 real processes --------------------------------------------------------------------------


def _ranks_and_helpers(tmp: str) -> dict[str, object]:
    state = PartialState()
    calls: list[str] = []
    state.on_main_process(lambda: calls.append("main"))()
    state.on_last_process(lambda: calls.append("last"))()
    state.on_process(process_index=1)(lambda: calls.append("one"))()
    # main_process_first: the main process writes a file; the other must see it on entry.
    path = Path(tmp) / "made_by_main.txt"
    with state.main_process_first():
        if state.is_main_process:
            time.sleep(0.3)  # give the other rank every chance to run ahead if ordering were broken
            path.write_text("ready")
            seen = True
        else:
            seen = path.exists()
    with state.split_between_processes(list(range(7)), apply_padding=True) as share:
        mine = share
    return {
        "rank": state.process_index,
        "world": state.num_processes,
        "type": state.distributed_type.value,
        "backend": state.backend,
        "calls": calls,
        "seen": seen,
        "share": mine,
    }


def test_two_processes_state(pool2: WorkerPool, tmp_path: Path) -> None:
    results = pool2.run(_ranks_and_helpers, str(tmp_path))
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["world"] == 2 and r["type"] == "MULTI_CPU" and r["backend"] == "gloo" for r in results)
    assert results[0]["calls"] == ["main"] and results[1]["calls"] == ["last", "one"]
    assert results[1]["seen"] is True
    assert results[0]["share"] == [0, 1, 2, 3] and results[1]["share"] == [4, 5, 6, 6]


def _env_flags() -> tuple[bool, str]:
    state = PartialState()
    return state.debug, os.environ.get("ACCELERATE_DEBUG_MODE", "")


def test_debug_flag_comes_from_env_contract(pool2: WorkerPool) -> None:
    assert pool2.run(_env_flags, env={"ACCELERATE_DEBUG_MODE": "1"}) == [(True, "1"), (True, "1")]
    assert pool2.run(_env_flags) == [(False, ""), (False, "")]


def _debug_toggled_at_run_time() -> dict[str, object]:
    from accelerate.utils import DistributedOperationException, gather

    state = PartialState()
    found: dict[str, object] = {"from_env": state.debug}
    state.debug = True  # upstream's test_op_checker turns the checks on like this
    rows = 2 if state.process_index == 0 else 3
    try:
        gather(torch.zeros(rows, 4))
        found["mismatch"] = "not detected"
    except DistributedOperationException as exc:
        found["mismatch"] = "detected" if "(2, 4)" in str(exc) and "(3, 4)" in str(exc) else str(exc)
    state.debug = False
    found["after"] = state.debug
    return found


def test_debug_can_be_toggled_at_run_time(pool2: WorkerPool) -> None:
    expected = {"from_env": False, "mismatch": "detected", "after": False}
    assert pool2.run(_debug_toggled_at_run_time) == [expected, expected]


def test_accelerate_torch_device_selects_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    # A test harness (or a user) names the device; upstream's PartialState takes it as given.
    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "meta")
    state = PartialState()
    assert state.device == torch.device("meta")
    assert AcceleratorState(_from_accelerator=True).device == torch.device("meta")
