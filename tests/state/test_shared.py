"""Upstream's state interface that clients reach for: _shared_state, _reset_state, fork_launched,
set_device, destroy_process_group(group), ThreadLocalSharedDict, do_nothing, is_initialized."""

from __future__ import annotations

import multiprocessing
import threading

import torch
import torch.distributed as dist

from accelerate import Accelerator, DistributedType
from accelerate.state import (
    AcceleratorState,
    GradientState,
    PartialState,
    ThreadLocalSharedDict,
    do_nothing,
    is_initialized,
)
from accelerate.state.shared import fork_launched
from tests.helpers.pool import WorkerPool


def test_shared_state_is_empty_until_the_state_exists() -> None:
    assert PartialState._shared_state == {}
    assert AcceleratorState._shared_state == {}
    state = PartialState(cpu=True)
    assert PartialState._shared_state["device"] == torch.device("cpu")
    assert PartialState._shared_state is state.__dict__
    assert AcceleratorState._shared_state == {}  # no Accelerator yet
    Accelerator(cpu=True)
    assert AcceleratorState._shared_state["mixed_precision"] == "no"


def test_reset_state_forgets_the_states() -> None:
    Accelerator(cpu=True, gradient_accumulation_steps=3)
    AcceleratorState._reset_state()
    assert AcceleratorState._shared_state == {} and PartialState._shared_state != {}
    Accelerator(cpu=True, gradient_accumulation_steps=3)
    AcceleratorState._reset_state(reset_partial_state=True)
    assert AcceleratorState._shared_state == {} and PartialState._shared_state == {}
    assert GradientState().num_steps == 3  # GradientState is reset on its own
    GradientState._reset_state()
    assert GradientState().num_steps == 1
    PartialState._reset_state()
    assert PartialState._shared_state == {}


def test_is_initialized_follows_the_accelerator_state() -> None:
    assert not is_initialized()
    PartialState(cpu=True)
    assert not is_initialized()
    Accelerator(cpu=True)
    assert is_initialized()


def test_do_nothing_takes_anything() -> None:
    assert do_nothing() is None and do_nothing(1, 2, key="value") is None


def test_thread_local_shared_dict() -> None:
    shared, private = ThreadLocalSharedDict(), ThreadLocalSharedDict(thread_local=True)
    shared["a"] = private["a"] = 1
    seen: dict[str, object] = {}

    def other_thread() -> None:
        seen["shared"] = dict(shared)
        seen["private"] = dict(private)
        private["b"] = 2

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert seen == {"shared": {"a": 1}, "private": {}}
    assert dict(private) == {"a": 1} and private == {"a": 1}
    del shared["a"]
    assert len(shared) == 0 and "a" not in shared


def test_set_device_and_fork_launched_in_this_process() -> None:
    state = PartialState(cpu=True)
    state.set_device()  # CPU: nothing to select, and no error
    assert state.fork_launched is False and AcceleratorState(cpu=True).fork_launched is False


def _report_fork_launched(queue: multiprocessing.Queue[bool]) -> None:
    queue.put(fork_launched())


def test_fork_launched_is_true_in_a_forked_child() -> None:
    results = {}
    for method in ("fork", "spawn"):
        ctx = multiprocessing.get_context(method)
        queue = ctx.Queue()
        process = ctx.Process(target=_report_fork_launched, args=(queue,))
        process.start()
        results[method] = queue.get(timeout=60)
        process.join(timeout=60)
    assert results == {"fork": True, "spawn": False}


def _destroy_a_subgroup() -> tuple[bool, bool]:
    state = PartialState(cpu=True)
    group = dist.new_group(ranks=[0, 1])
    value = torch.ones(1)
    dist.all_reduce(value, group=group)
    state.destroy_process_group(group)  # only the subgroup goes
    still_there = dist.is_initialized()
    state.wait_for_everyone()
    return value.item() == 2.0, still_there


def test_destroy_process_group_with_a_group_destroys_only_that_group(pool2: WorkerPool) -> None:
    assert pool2.run(_destroy_a_subgroup) == [(True, True), (True, True)]


def test_shared_dict_is_upstreams_mapping_type() -> None:
    from accelerate.state import SharedDict
    from accelerate.utils.imports import is_torch_xla_available

    assert SharedDict is (ThreadLocalSharedDict if is_torch_xla_available() else dict)
    shared = SharedDict()
    shared["device"] = "cpu"
    assert dict(shared) == {"device": "cpu"}


def test_a_state_held_across_its_reset_says_so() -> None:
    # Upstream's test_partial_state_after_reset / test_accelerator_state_after_reset.
    state = PartialState(cpu=True)
    assert state.num_processes == 1
    try:
        state.someotherthing  # noqa: B018
    except AttributeError as exc:
        assert "_reset_state()" not in str(exc)
    PartialState._reset_state()
    for name in ("num_processes", "device", "debug", "distributed_type"):
        try:
            getattr(state, name)
            raise AssertionError(f"{name} was still readable after PartialState._reset_state()")
        except AttributeError as exc:
            assert "PartialState._reset_state()" in str(exc)
    setattr(state, "someotherthing", "MyValue")  # noqa: B010 - the object itself still works as an object
    assert getattr(state, "someotherthing") == "MyValue"  # noqa: B009
    assert PartialState() is not state and PartialState().num_processes == 1

    accelerator_state = Accelerator(cpu=True).state
    AcceleratorState._reset_state()
    for name in ("num_processes", "mixed_precision"):
        try:
            getattr(accelerator_state, name)
            raise AssertionError(f"{name} was still readable after AcceleratorState._reset_state()")
        except AttributeError as exc:
            assert "AcceleratorState._reset_state()" in str(exc)
    assert PartialState().num_processes == 1  # the PartialState was kept


def test_an_accelerator_after_a_partial_reset_uses_the_new_partial_state() -> None:
    accelerator = Accelerator(cpu=True)
    PartialState._reset_state()
    again = Accelerator(cpu=True)
    assert again.state is accelerator.state
    assert again.state.partial_state is PartialState()
    assert again.state.num_processes == 1


def test_an_older_accelerator_reads_the_state_made_after_a_reset() -> None:
    # Issue 35's five lines (transformers builds a second Trainer this way, then uses the first).
    first = Accelerator(cpu=True)
    held_partial = first.state.partial_state
    AcceleratorState._reset_state(reset_partial_state=True)
    second = Accelerator(cpu=True)
    assert first.distributed_type == DistributedType.NO
    assert first.state.num_processes == 1 and first.state.mixed_precision == second.state.mixed_precision
    assert held_partial.num_processes == 1 and held_partial.device == second.device
    assert first.state.initialized and held_partial.initialized
    # A second reset empties every older reference again until the next state exists.
    AcceleratorState._reset_state(reset_partial_state=True)
    for held in (first.state, second.state):
        try:
            held.mixed_precision  # noqa: B018
            raise AssertionError("a state held across a second reset still answered")
        except AttributeError as exc:
            assert "AcceleratorState._reset_state()" in str(exc)
    Accelerator(cpu=True, mixed_precision="bf16")
    assert first.state.mixed_precision == second.state.mixed_precision == "bf16"


def test_prepare_with_an_accelerator_whose_state_was_reset_names_the_reset() -> None:
    # Upstream's test_reinstantiated_state: the error comes early and says what happened.
    AcceleratorState._reset_state()
    accelerator = Accelerator(cpu=True)
    AcceleratorState._reset_state()
    try:
        accelerator.prepare(torch.nn.Linear(1, 1))
        raise AssertionError("prepare() ran on a state that was reset")
    except AttributeError as exc:
        assert "`AcceleratorState` object has no attribute" in str(exc.args[0])
        assert "This happens if `AcceleratorState._reset_state()`" in str(exc.args[0])
