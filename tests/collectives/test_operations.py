from __future__ import annotations

import time
from collections import namedtuple
from dataclasses import dataclass

import pytest
import torch

from accelerate.state import PartialState
from accelerate.utils import (
    DistributedOperationException,
    broadcast,
    broadcast_object_list,
    concatenate,
    gather,
    gather_object,
    pad_across_processes,
    reduce,
    send_to_device,
)
from tests.helpers.pool import DistributedFailure, WorkerPool

Pair = namedtuple("Pair", ["x", "y"])


@dataclass
class Batch:
    inputs: torch.Tensor
    label: str


def test_identity_in_one_process() -> None:
    data = {"a": torch.arange(3), "b": [torch.tensor(1.0)]}
    out = gather(data)
    assert out["a"].tolist() == [0, 1, 2] and out["b"][0].tolist() == [1.0]
    assert reduce(torch.tensor([2.0]), "mean").tolist() == [2.0]
    assert gather_object([1, 2]) == [1, 2] and gather_object("x") == ["x"]
    ones = torch.ones(2)
    assert pad_across_processes(ones) is ones  # nothing to pad against in one process


def test_pad_across_processes_in_one_process_as_upstream() -> None:
    from accelerate.utils import CannotPadNestedTensorWarning

    with pytest.warns(UserWarning):  # torch's own prototype warning for nested tensors, then ours
        nested = torch.nested.nested_tensor([[1, 2, 3], [1], [1, 2]])
    with pytest.warns(CannotPadNestedTensorWarning):
        assert pad_across_processes(nested) is nested
    tensor = torch.randn(4, 3, 100)
    assert pad_across_processes(tensor, dim=-1).shape[-1] == 100
    assert pad_across_processes(tensor, dim=-4) is tensor  # out of range: as it is
    with pytest.raises(TypeError):
        pad_across_processes({"a": [tensor, "text"]})


def _pad_with_a_tensor_index() -> list[list[int]]:
    rank = PartialState().process_index
    rows = torch.arange(2 * (rank + 1)).view(rank + 1, 2)
    # upstream's split_between_processes pads with a row: pad_index=inputs[-1]
    return pad_across_processes(rows, pad_index=torch.tensor([7, 9])).tolist()


def test_pad_across_processes_with_a_row_as_pad_index(pool2: WorkerPool) -> None:
    assert pool2.run(_pad_with_a_tensor_index) == [[[0, 1], [7, 9]], [[0, 1], [2, 3]]]


def test_non_tensor_leaf_names_type_and_path() -> None:
    with pytest.raises(TypeError, match=r"gather .* found a str at \['b'\]\[1\]"):
        gather({"a": torch.ones(1), "b": [torch.ones(1), "oops"]})


def test_send_to_device_keeps_structure() -> None:
    batch = {"pair": Pair(torch.ones(1), torch.zeros(1)), "batch": Batch(torch.ones(2), "text"), "s": "keep"}
    moved = send_to_device(batch, "cpu")
    assert isinstance(moved["pair"], Pair) and isinstance(moved["batch"], Batch)
    assert moved["batch"].label == "text" and moved["s"] == "keep"


def test_concatenate_nested() -> None:
    out = concatenate([{"a": torch.ones(1)}, {"a": torch.zeros(2)}])
    assert out["a"].tolist() == [1.0, 0.0, 0.0]


def _all_collectives() -> dict[str, object]:
    state = PartialState()
    rank = state.process_index
    nested = {"t": torch.full((2,), float(rank)), "pair": Pair(torch.tensor(rank), [torch.ones(1, 2) * rank])}
    gathered = gather(nested)
    objects = gather_object([f"r{rank}"])
    single = gather_object({"rank": rank})
    b = broadcast({"x": torch.full((3,), float(rank + 5))}, from_process=1)
    objs = broadcast_object_list([rank, f"from {rank}"], from_process=0)
    summed = reduce(Pair(torch.tensor([1.0 + rank]), torch.tensor([2.0])), "sum")
    mean = reduce(torch.tensor([1.0 + rank]), "mean")
    # Uneven lengths: pad first, then gather, then drop the padding.
    uneven = torch.arange(rank + 2) + 10 * rank
    padded = pad_across_processes(uneven, dim=0, pad_index=-1)
    padded_first = pad_across_processes(uneven.view(1, -1), dim=1, pad_index=-1, pad_first=True)
    together = gather(padded)
    return {
        "gathered_t": gathered["t"].tolist(),
        "gathered_pair_x": gathered["pair"].x.tolist(),
        "pair_type": type(gathered["pair"]).__name__,
        "gathered_inner": gathered["pair"].y[0].shape,
        "objects": objects,
        "single": single,
        "broadcast": b["x"].tolist(),
        "objs": objs,
        "summed": (summed.x.tolist(), summed.y.tolist()),
        "mean": mean.tolist(),
        "padded": padded.tolist(),
        "padded_first": padded_first.tolist(),
        "together": together[together != -1].tolist(),
    }


def test_collectives_on_nested_structures(pool2: WorkerPool) -> None:
    r0, r1 = pool2.run(_all_collectives)
    for r in (r0, r1):
        assert r["gathered_t"] == [0.0, 0.0, 1.0, 1.0]
        assert r["gathered_pair_x"] == [0, 1] and r["pair_type"] == "Pair"
        assert r["gathered_inner"] == (2, 2)
        assert r["objects"] == ["r0", "r1"] and r["single"] == [{"rank": 0}, {"rank": 1}]
        assert r["broadcast"] == [6.0, 6.0, 6.0]
        assert r["objs"] == [0, "from 0"]
        assert r["summed"] == ([3.0], [4.0]) and r["mean"] == [1.5]
        assert r["together"] == [0, 1, 10, 11, 12]
    assert r0["padded"] == [0, 1, -1] and r1["padded"] == [10, 11, 12]
    assert r0["padded_first"] == [[-1, 0, 1]]


def _mismatched_gather() -> str:
    rank = PartialState().process_index
    start = time.monotonic()
    try:
        gather({"x": torch.ones(rank + 1, 3)})
    except DistributedOperationException as exc:
        return f"{time.monotonic() - start:.1f}s|{exc}"
    return "no error"


def _reductions() -> dict[str, object]:
    rank = PartialState().process_index
    values = torch.tensor([1.0 + rank, 5.0 - 4 * rank])  # rank 0: [1, 5]; rank 1: [2, 1]
    return {
        "max": reduce(values, "max").tolist(),
        "max_nested": reduce({"a": [torch.tensor([rank]), torch.tensor([-rank])]}, reduction="max"),
        "none": reduce(values, "none").tolist(),
        "sum": reduce(values, "sum").tolist(),
        "inputs_kept": values.tolist(),
    }


def test_reduce_max_and_none_as_upstream(pool2: WorkerPool) -> None:
    for rank, result in enumerate(pool2.run(_reductions)):
        assert result["max"] == [2.0, 5.0]
        nested = result["max_nested"]
        assert [t.tolist() for t in nested["a"]] == [[1], [0]]  # type: ignore[index]
        # Upstream's "none" divides nothing but still sums (its all-reduce is a sum for all but "max").
        assert result["none"] == result["sum"] == [3.0, 6.0]
        assert result["inputs_kept"] == [1.0 + rank, 5.0 - 4 * rank]


def test_reduce_max_in_one_process_and_unknown_reductions() -> None:
    assert reduce(torch.tensor([3.0]), "max").tolist() == [3.0]
    with pytest.raises(ValueError, match="'sum', 'mean', 'max' or 'none'"):
        reduce(torch.tensor([3.0]), "avg")


def test_debug_mode_reports_shapes_on_every_rank(pool2: WorkerPool) -> None:
    results = pool2.run(_mismatched_gather, env={"ACCELERATE_DEBUG_MODE": "1"}, timeout=60)
    for text in results:
        assert "`gather`" in text
        assert "process 0: ['(1, 3):float32']" in text and "process 1: ['(2, 3):float32']" in text
        assert "pad_across_processes" in text


def _mismatched_structure_reduce() -> str:
    rank = PartialState().process_index
    data = [torch.ones(1)] * (rank + 1)
    try:
        reduce(data)
    except DistributedOperationException as exc:
        return str(exc)
    return "no error"


def test_debug_mode_catches_structure_mismatch(pool2: WorkerPool) -> None:
    results = pool2.run(_mismatched_structure_reduce, env={"ACCELERATE_DEBUG_MODE": "true"}, timeout=60)
    assert all("`reduce`" in r for r in results)


def _raise_on_rank_one() -> None:
    if PartialState().process_index == 1:
        raise RuntimeError("boom on rank one")


def test_pool_reports_failures_per_rank(pool2: WorkerPool) -> None:
    with pytest.raises(DistributedFailure, match="rank 1: RuntimeError: boom on rank one"):
        pool2.run(_raise_on_rank_one)


def _debug_pad_and_objects() -> list[str]:
    rank = PartialState().process_index
    messages = []
    try:
        pad_across_processes(torch.ones(2) if rank == 0 else torch.ones(2, 2))
    except DistributedOperationException as exc:
        messages.append(str(exc))
    try:
        broadcast_object_list([1] * (rank + 1))
    except DistributedOperationException as exc:
        messages.append(str(exc))
    # Different sizes along the padded dimension are fine: that is what padding is for.
    out = pad_across_processes(torch.ones(rank + 1))
    messages.append(str(out.shape[0]))
    return messages


def test_debug_mode_covers_pad_and_object_broadcast(pool2: WorkerPool) -> None:
    for messages in pool2.run(_debug_pad_and_objects, env={"ACCELERATE_DEBUG_MODE": "1"}, timeout=60):
        assert "`pad_across_processes`" in messages[0] and "1-d:float32" in messages[0]
        assert "`broadcast_object_list`" in messages[1] and "list of 2 objects" in messages[1]
        assert messages[2] == "2"


# What the tests of a process that never arrives wait out: the pool's two workers start a job within
# 4 ms of each other at load 5.5 (measured over 40 jobs), so collective #1 stays far inside 1 s.
_DEBUG_FAST = {"ACCELERATE_DEBUG_MODE": "1", "ACCELERATE_DEBUG_TIMEOUT": "1"}


def _rank_one_skips_gather() -> str:
    state = PartialState()
    reduce(torch.ones(1))  # collective #1, reached by both
    if state.process_index == 1:
        return "skipped"  # e.g. a gather called only under `if is_main_process:` on the other side
    try:
        gather(torch.ones(1))
    except DistributedOperationException as exc:
        return str(exc)
    return "no error"


def test_debug_mode_names_a_process_that_never_arrives(pool2: WorkerPool) -> None:
    r0, r1 = pool2.run(_rank_one_skips_gather, env=_DEBUG_FAST, timeout=60)
    assert r1 == "skipped"
    assert "`gather` (collective #2 of process 0)" in r0
    assert "process(es) 1 did not reach it within 1 s (waiting: 0)" in r0
    assert "process 1: its last collective through accelerate was #1 `reduce`" in r0
    assert "ACCELERATE_DEBUG_TIMEOUT" in r0


def _ranks_reach_different_collectives() -> str:
    state = PartialState()
    try:
        if state.process_index == 0:
            gather(torch.ones(2))
        else:
            reduce(torch.ones(2))  # rank 1 skipped the gather and went on to the next collective
    except DistributedOperationException as exc:
        return str(exc)
    return "no error"


def test_debug_mode_raises_on_every_rank_when_collectives_differ(pool2: WorkerPool) -> None:
    for text in pool2.run(_ranks_reach_different_collectives, env=_DEBUG_FAST, timeout=60):
        assert "reached different collectives at the same point" in text
        assert "process 0: `gather`" in text and "process 1: `reduce`" in text


def _count_collective_calls() -> dict[str, int]:
    """Runs each collective once and counts the torch.distributed calls and store writes it made."""
    import torch.distributed as dist

    PartialState()
    counts: dict[str, int] = {}
    names = ["all_gather_object", "all_gather_into_tensor", "all_gather_single", "all_reduce", "broadcast",
             "broadcast_object_list", "barrier", "monitored_barrier"]  # fmt: skip
    originals = {name: getattr(dist, name) for name in names if hasattr(dist, name)}

    def counting(name: str, fn):  # type: ignore[no-untyped-def]
        def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
            counts[name] = counts.get(name, 0) + 1
            return fn(*args, **kwargs)

        return wrapper

    store = dist.distributed_c10d._get_default_store()
    keys_before = store.num_keys()
    try:
        for name, fn in originals.items():
            setattr(dist, name, counting(name, fn))
        gather(torch.ones(2))
        reduce(torch.ones(2))
        broadcast(torch.ones(2))
        broadcast_object_list([1])
        gather_object("x")
        pad_across_processes(torch.ones(2))
    finally:
        for name, fn in originals.items():
            setattr(dist, name, fn)
    counts["store_keys_added"] = store.num_keys() - keys_before
    return counts


def test_no_extra_communication_without_debug_mode(pool2: WorkerPool) -> None:
    for counts in pool2.run(_count_collective_calls, timeout=60):
        gathers = counts.get("all_gather_single", 0) + counts.get("all_gather_into_tensor", 0)
        # gather: 1, pad_across_processes: 1 (the sizes); nothing else gathers tensors.
        assert gathers == 2, counts
        assert counts.get("all_reduce") == 1 and counts.get("broadcast") == 1, counts
        assert counts.get("broadcast_object_list") == 1 and counts.get("all_gather_object") == 1, counts
        assert counts["store_keys_added"] == 0, counts


def test_debug_mode_checks_through_the_store_not_collectives(pool2: WorkerPool) -> None:
    for counts in pool2.run(_count_collective_calls, env={"ACCELERATE_DEBUG_MODE": "1"}, timeout=60):
        gathers = counts.get("all_gather_single", 0) + counts.get("all_gather_into_tensor", 0)
        assert gathers == 2 and counts.get("all_gather_object") == 1, counts  # no extra collective
        assert counts["store_keys_added"] > 0, counts


def _rank_zero_skips_barrier() -> str:
    state = PartialState()
    if state.process_index == 0:
        return "skipped"
    try:
        state.wait_for_everyone()
    except DistributedOperationException as exc:
        return str(exc)
    return "no error"


def test_debug_mode_covers_wait_for_everyone(pool2: WorkerPool) -> None:
    r0, r1 = pool2.run(_rank_zero_skips_barrier, env=_DEBUG_FAST, timeout=60)
    assert r0 == "skipped"
    assert "`wait_for_everyone`" in r1 and "process(es) 0 did not reach it" in r1
    assert "process 0: has made no collective call through accelerate yet" in r1


def _gather_tensors_that_require_grad() -> dict[str, object]:
    rank = PartialState().process_index
    weight = torch.full((2, 3), float(rank + 1), requires_grad=True)
    embeddings = weight * 2  # a non-leaf with a graph, as a model's output
    nested = {"emb": embeddings, "pair": Pair(weight.sum(), [weight[:1] + 1])}
    out = gather(nested)
    # The gathered tensor is new data (like upstream's): no graph to the other ranks' slices. A
    # loss built on it still backpropagates through the local tensors it is combined with.
    loss = (embeddings @ out["emb"].T).sum()
    loss.backward()
    return {
        "emb": out["emb"].tolist(),
        "scalar": out["pair"].x.tolist(),
        "inner": out["pair"].y[0].tolist(),
        "requires_grad": [out["emb"].requires_grad, out["pair"].x.requires_grad],
        "grad": weight.grad.tolist() if weight.grad is not None else None,
    }


def test_gather_of_tensors_that_require_grad(pool2: WorkerPool) -> None:
    for rank, result in enumerate(pool2.run(_gather_tensors_that_require_grad, timeout=60)):
        assert result["emb"] == [[2.0] * 3] * 2 + [[4.0] * 3] * 2
        assert result["scalar"] == [6.0, 12.0]
        assert result["inner"] == [[2.0] * 3, [3.0] * 3]
        assert result["requires_grad"] == [False, False]
        # d/dW of sum(2W @ G.T) = 2 * (column sums of G, broadcast): 2 * (2+2+4+4) per entry.
        assert result["grad"] == [[24.0] * 3] * 2, f"rank {rank}"
