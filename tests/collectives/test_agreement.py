from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from accelerate.collectives.agreement import agree_on_failure, agree_on_outcome
from accelerate.state import PartialState
from tests.helpers.pool import WorkerPool


class Boom(ValueError):
    pass


def test_single_process_returns_the_payload_or_raises_the_original() -> None:
    assert agree_on_failure(None, what="nothing", payload={"a": 1}) == [{"a": 1}]
    original = Boom("disk on fire")
    with pytest.raises(Boom) as caught:
        agree_on_failure(original, what="writing", error_type=KeyError)
    assert caught.value is original  # nobody to agree with: the best error is the original one


def agree_on_rank(failing: list[int]) -> dict[str, Any]:
    rank = PartialState().process_index
    error = Boom(f"broke on {rank}") if rank in failing else None
    try:
        payloads = agree_on_failure(error, what="Writing shards", payload=rank * 10, note="nothing changed")
    except RuntimeError as exc:
        return {"message": str(exc), "cause": repr(exc.__cause__)}
    return {"payloads": payloads}


def test_payloads_are_exchanged_when_no_rank_fails(pool2: WorkerPool) -> None:
    assert pool2.run(agree_on_rank, []) == [{"payloads": [0, 10]}] * 2


@pytest.mark.parametrize(
    ("failing", "named"),
    [
        ([1], "failed on rank 1 (rank 1: Boom: broke on 1)"),
        ([0, 1], "failed on ranks 0, 1 (rank 0: Boom: broke on 0; rank 1: Boom: broke on 1)"),
    ],
)
def test_a_failure_raises_on_every_rank_naming_ranks_and_errors(
    pool2: WorkerPool, failing: list[int], named: str
) -> None:
    results = pool2.run(agree_on_rank, failing)
    for rank, result in enumerate(results):
        assert result["message"] == f"Writing shards {named}; nothing changed"
        # The failed rank keeps its own exception as the cause, for its traceback.
        assert result["cause"] == (f"Boom('broke on {rank}')" if rank in failing else "None")


def payload_of_size(sizes: list[int]) -> list[Any]:
    rank = PartialState().process_index
    return agree_on_failure(None, what="Exchanging", payload={"rank": rank, "blob": "x" * sizes[rank]})


@pytest.mark.parametrize("sizes", [[0, 10], [40_000, 10], [50_000, 60_000]])
def test_payloads_small_and_large_arrive_whole(pool2: WorkerPool, sizes: list[int]) -> None:
    # Small payloads share one fixed-size all-gather; a larger one on any rank takes the general path.
    expected = [{"rank": rank, "blob": "x" * size} for rank, size in enumerate(sizes)]
    assert pool2.run(payload_of_size, sizes) == [expected] * 2


def outcome_on_rank(failing: list[int]) -> str:
    rank = PartialState().process_index
    error = Boom(f"broke on {rank}") if rank in failing else None
    try:
        agree_on_outcome(error, what="Committing", error_type=KeyError, note="nothing committed")
    except KeyError as exc:
        return str(exc.args[0])
    return "ok"


@pytest.mark.parametrize(
    ("failing", "expected"),
    [([], "ok"), ([0], "Committing failed on rank 0 (rank 0: Boom: broke on 0); nothing committed")],
)
def test_outcome_without_payload_agrees_like_a_full_exchange(
    pool2: WorkerPool, failing: list[int], expected: str
) -> None:
    # Its success path is one all-reduce; a failure still names the rank and its error everywhere.
    assert pool2.run(outcome_on_rank, failing) == [expected] * 2


def test_outcome_in_one_process_raises_the_original() -> None:
    agree_on_outcome(None, what="nothing")
    original = Boom("disk on fire")
    with pytest.raises(Boom) as caught:
        agree_on_outcome(original, what="writing", error_type=KeyError)
    assert caught.value is original


def operations_seen_by_the_hang_watchdog() -> list[str | None]:
    from accelerate.collectives.communicator import current_communicator
    from accelerate.diagnostics.watchdog import SLOT

    communicator = current_communicator()
    seen: list[str | None] = []

    def watching(real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            seen.append(SLOT.operation)
            return real(*args, **kwargs)

        return call

    communicator.all_gather = watching(communicator.all_gather)  # type: ignore[method-assign]
    communicator.all_reduce_sum_ = watching(communicator.all_reduce_sum_)  # type: ignore[method-assign]
    try:
        agree_on_failure(None, what="save_state to run/ckpt")
        agree_on_outcome(None, what="writing shards")
    finally:
        del communicator.all_gather, communicator.all_reduce_sum_
    return seen


def test_the_hang_watchdog_sees_a_rank_waiting_in_an_agreement(pool2: WorkerPool) -> None:
    # Found by the chaos run (tests/chaos): a rank stalled while its peer saved was reported as gloo's
    # raw timeout in the save's agreement, not as a hang naming the stalled rank.
    expected = ["agreement after save_state to run/ckpt", "agreement after writing shards"]
    assert pool2.run(operations_seen_by_the_hang_watchdog) == [expected] * 2


# --- the three places that agree on failures through it ------------------------------------------
def save_model_failing_on_the_writer(directory: str) -> str:
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    target = Path(directory) / "model"
    if accelerator.process_index == 0:
        target.write_text("a file where the folder should go")  # the writer (rank 0) fails
    accelerator.wait_for_everyone()
    try:
        accelerator.save_model(model, str(target))
    except Exception as exc:  # noqa: BLE001 - returned for the test to read
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def test_save_model_failure_on_the_writer_raises_everywhere(tmp_path: Path, pool2: WorkerPool) -> None:
    messages = pool2.run(save_model_failing_on_the_writer, str(tmp_path))
    for message in messages:
        assert message.startswith("RuntimeError: save_model to ") and "failed on rank 0 (rank 0: " in message


def test_dispatcher_failure_names_process_0(pool2: WorkerPool) -> None:
    from tests.data.test_distributed import dispatch_failure_on_rank

    for message in pool2.run(dispatch_failure_on_rank):
        assert message == "Reading the dispatched batch failed on rank 0 (rank 0: RuntimeError: disk on fire)"


def save_state_with_a_full_disk_on_rank_0(directory: str) -> dict[str, Any]:
    """Rank 0 may write only 20 kB per file (the disk "fills"); every rank must see DiskFullError."""
    import resource

    from accelerate import Accelerator
    from accelerate.state import PartialState
    from accelerate.storage.errors import DiskFullError

    accelerator = Accelerator(cpu=True)
    accelerator.prepare(torch.nn.Linear(100, 100))
    rank = PartialState().process_index
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    if rank == 0:
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, limits[1]))
    try:
        accelerator.save_state(directory)
    except DiskFullError as exc:
        return {"type": type(exc).__name__, "path": exc.path, "message": str(exc)}
    except Exception as exc:  # noqa: BLE001 - the wrong type is what the test reports
        return {"type": type(exc).__name__, "message": str(exc)}
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
    return {"type": None}


def test_a_full_disk_on_one_rank_is_a_disk_full_error_on_every_rank(
    tmp_path: Path, pool2: WorkerPool
) -> None:
    results = pool2.run(save_state_with_a_full_disk_on_rank_0, str(tmp_path / "ckpt"))
    for result in results:
        assert result["type"] == "DiskFullError", result
        assert "rank 0: DiskFullError" in result["message"] and "model.safetensors" in result["path"]
    assert not (tmp_path / "ckpt").exists()
