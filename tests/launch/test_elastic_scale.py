"""An elastic group of 8 single-process "nodes" that loses 3 of them and then gains 1, modelled in one
process through the loaders: every sample of the epoch is trained on exactly once (counting each
step's last attempt).

test_elastic_eight_nodes.py runs this with eight real launchers on loopback (about a minute on 2
cores); this model covers the data position's part in a second, for every test run, and pins down
the arithmetic (the padded last round) the real run avoids by choosing its epoch length. The
membership changes go through the same code a re-formed group runs: each "node" is its own loader
prepared for its rank of the current world size, the checkpoint is one node's ``state_dict()`` (the
position every node shares), and after each change every node of the new group prepares its loader
for the new size and ``load_state_dict``s the checkpoint, which re-splits the remaining epoch
(data/base.py). Steps trained after the last checkpoint are lost with the nodes and trained again by
the new group, as an elastic restart does.
"""

from __future__ import annotations

from typing import Any

import pytest
from torch.utils.data import DataLoader

from accelerate.data.prepare import prepare_data_loader
from accelerate.state.gradient import GradientState

LENGTH = 240


def group(world: int, state: dict[str, Any] | None) -> list[Any]:
    """Every node's loader for a group of ``world`` nodes, resumed from ``state`` (a checkpoint)."""
    loaders = []
    for rank in range(world):
        source = DataLoader(range(LENGTH), batch_size=1, shuffle=True)  # type: ignore[arg-type]
        loader = prepare_data_loader(source, device="cpu", num_processes=world, process_index=rank,
                                     use_seedable_sampler=True, data_seed=1234, use_stateful_dataloader=True,
                                     gradient_state=GradientState())  # fmt: skip
        if state is not None:
            loader.load_state_dict(state)
        loaders.append(loader)
    return loaders


def train(
    loaders: list[Any], steps: int | None, save_at: int | None
) -> tuple[list[list[int]], dict[str, Any] | None]:
    """Each node takes ``steps`` batches (None: to the end of the epoch), together, step by step;
    the checkpoint is node 0's loader position after step ``save_at``."""
    iterators = [iter(loader) for loader in loaders]
    trained: list[list[int]] = []
    checkpoint = None
    step = 0
    while steps is None or step < steps:
        try:
            batches = [next(it) for it in iterators]
        except StopIteration:
            break
        step += 1
        trained.append([int(i) for batch in batches for i in batch.tolist()])
        if step == save_at:
            checkpoint = loaders[0].state_dict()
    return trained, checkpoint


def test_eight_nodes_lose_three_and_gain_one_and_every_sample_is_trained_exactly_once() -> None:
    # 8 nodes: checkpoint after step 4, three nodes die during step 6 (steps 5-6 are lost).
    trained, checkpoint = train(group(8, None), steps=6, save_at=4)
    kept = trained[:4]
    assert checkpoint is not None and checkpoint["samples_consumed"] == 32
    # 5 nodes resume from step 4's checkpoint; a node joins after their checkpoint at their step 16.
    trained, checkpoint = train(group(5, checkpoint), steps=17, save_at=16)
    kept += trained[:16]
    assert checkpoint is not None and checkpoint["samples_consumed"] == 32 + 80
    # 6 nodes resume from there and finish the epoch: (240 - 112) samples are not a multiple of 6, so the
    # last round is padded from the epoch's start (even_batches), as a real run pads it.
    trained, _ = train(group(6, checkpoint), steps=None, save_at=None)
    kept += trained
    seen = [sample for step in kept for sample in step]
    padded = len(seen) - LENGTH
    assert sorted(set(seen)) == list(range(LENGTH)) and padded == (-(LENGTH - 112)) % 6
    assert len(set(seen[:LENGTH])) == LENGTH  # every sample exactly once before the padding


@pytest.mark.parametrize("world", [8, 5, 6])
def test_every_group_size_reads_the_same_shuffled_epoch(world: int) -> None:
    """The epoch's order depends on the seed only, so the groups' rounds are pieces of one order."""
    trained, _ = train(group(world, None), steps=None, save_at=None)
    order = [sample for step in trained for sample in step][:LENGTH]
    reference, _ = train(group(1, None), steps=None, save_at=None)
    assert order == [sample for step in reference for sample in step]
