"""What a checkpoint saved at one world size refuses to load at another, and what it says.

An iterable loader's mid-epoch position cannot be re-split over another number of processes; a
tensor whose shape depends on the number of processes cannot be resharded. Both are found while
the load checks the files, so nothing changes and the message names the file or tensor and both
world sizes. The "other world size" is a stand-in process description: the refusal happens before
any collective, so one real process is enough.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from accelerate.checkpointing import CheckpointError, load_training_state, save_training_state
from accelerate.data_loader import prepare_data_loader
from accelerate.state import PartialState
from tests.data.helpers import Stream


@dataclass(frozen=True)
class OtherWorld:
    """Process 0 of a run with ``num_processes`` processes, as the checkpointing layer sees it."""

    num_processes: int
    process_index: int = 0
    local_process_index: int = 0
    is_main_process: bool = True
    is_local_main_process: bool = True
    use_distributed: bool = False

    def wait_for_everyone(self) -> None:
        pass


def _iterable_loader(processes: int) -> DataLoader:  # type: ignore[type-arg]
    return prepare_data_loader(
        DataLoader(Stream(24), batch_size=2),
        num_processes=processes,
        process_index=0,
        use_stateful_dataloader=True,
    )


def _saved_mid_epoch(tmp_path: Path, model: torch.nn.Module) -> Path:
    loader = _iterable_loader(1)
    for step, _ in enumerate(loader):
        if step == 2:
            break
    return save_training_state(
        tmp_path / "ckpt",
        state=PartialState(cpu=True),
        step=3,
        models_state_dicts=[model.state_dict()],
        dataloaders=[loader],
    )


def test_an_iterable_position_saved_mid_epoch_is_refused_at_another_world_size(tmp_path: Path) -> None:
    path = _saved_mid_epoch(tmp_path, torch.nn.Linear(2, 2))
    model = torch.nn.Linear(2, 2)
    before = model.weight.detach().clone()
    with pytest.raises(CheckpointError) as caught:
        load_training_state(path, state=OtherWorld(2), models=[model], dataloaders=[_iterable_loader(2)])
    message = str(caught.value)
    assert f"{path / 'dl_state_dict.bin'} does not fit dataloader 0" in message
    assert "saved by 1 process, loading on 2" in message
    assert "with 1 process, but this run has 2 processes" in message
    assert "Resume with the same number of processes (1)" in message and "Nothing was loaded." in message
    assert torch.equal(model.weight, before)  # the model, checked first, was left as it was


def test_the_same_world_size_loads_the_position(tmp_path: Path) -> None:
    path = _saved_mid_epoch(tmp_path, torch.nn.Linear(2, 2))
    loader = _iterable_loader(1)
    load_training_state(path, state=OtherWorld(1), models=[torch.nn.Linear(2, 2)], dataloaders=[loader])
    assert [batch.tolist() for batch in loader][0] == [6, 7]  # 3 batches of 2 were done


def test_a_tensor_sized_by_the_world_names_both_world_sizes(tmp_path: Path) -> None:
    path = _saved_mid_epoch(tmp_path, torch.nn.Linear(2, 1))  # e.g. one output per process
    with pytest.raises(CheckpointError) as caught:
        load_training_state(path, state=OtherWorld(2), models=[torch.nn.Linear(2, 2)])
    message = str(caught.value)
    assert "size mismatch for weight: shape (1, 2) in the checkpoint, (2, 2) in the model" in message
    assert "saved by 1 process and this run has 2" in message


def test_a_renamed_layer_at_another_world_size_does_not_blame_the_world_size(tmp_path: Path) -> None:
    path = _saved_mid_epoch(tmp_path, torch.nn.Linear(2, 2))
    renamed = torch.nn.Sequential(torch.nn.Linear(2, 2))  # keys "0.weight", "0.bias"
    with pytest.raises(CheckpointError) as caught:
        load_training_state(path, state=OtherWorld(2), models=[renamed])
    message = str(caught.value)
    assert "0.weight" in message and "Nothing was loaded." in message
    assert "this run has 2" not in message
