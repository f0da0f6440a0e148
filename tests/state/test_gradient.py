"""`GradientState`: every instance reads and writes one per-process state, yet each instance is freed
with its holders (upstream's design: a new object per call, sharing ``_shared_state``)."""

from __future__ import annotations

import pickle
import weakref

from torch.utils.data import DataLoader

from accelerate import Accelerator
from accelerate.state import GradientState


def test_instances_share_one_state() -> None:
    first, second = GradientState(), GradientState()
    first.num_steps = 5
    assert second.num_steps == 5 and GradientState().sync_gradients
    assert GradientState._shared_state["num_steps"] == 5


def test_shared_state_is_empty_until_made_and_after_reset() -> None:
    assert GradientState._shared_state == {}
    GradientState()
    assert GradientState._shared_state != {}
    GradientState._reset_state()
    assert GradientState._shared_state == {}
    assert GradientState().num_steps == 1


def test_an_instance_is_freed_when_nothing_holds_it() -> None:
    state = GradientState()
    ref = weakref.ref(state)
    del state
    assert ref() is None
    assert GradientState().initialized  # the state itself lives on


def test_accelerator_loader_and_their_gradient_state_are_freed_mid_epoch() -> None:
    holder: dict[str, object] = {}
    accelerator = Accelerator(cpu=True)
    loader = accelerator.prepare_data_loader(DataLoader(list(range(16)), batch_size=4))
    holder["iterator"] = iter(loader)
    assert next(holder["iterator"]).tolist() == [0, 1, 2, 3]  # type: ignore[call-overload]
    refs = [weakref.ref(accelerator), weakref.ref(loader), weakref.ref(loader.gradient_state)]
    del accelerator, loader
    holder.clear()
    assert [ref() for ref in refs] == [None, None, None]
    assert GradientState().active_dataloader is None


def test_unpickled_instance_joins_the_live_state() -> None:
    state = GradientState()
    state.num_steps = 3
    copy = pickle.loads(pickle.dumps(state))
    copy.num_steps = 7
    assert GradientState().num_steps == 7


def test_unpickled_instance_restores_state_into_a_fresh_process_state() -> None:
    state = GradientState()
    state.num_steps = 4
    data = pickle.dumps(state)
    GradientState._reset_state()
    restored = pickle.loads(data)
    assert restored.num_steps == 4 and GradientState().num_steps == 4


def test_accelerator_pickles_mid_epoch() -> None:
    accelerator = Accelerator(cpu=True)
    loader = accelerator.prepare(DataLoader(list(range(8)), batch_size=2))
    iterator = iter(loader)
    next(iterator)
    loaded = pickle.loads(pickle.dumps(accelerator))
    assert [batch.tolist() for batch in loaded._dataloaders[0]] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert loaded.gradient_state.active_dataloader is loader  # joined the live state
