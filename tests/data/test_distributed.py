"""Real 2-process checks (gloo): RNG sync, gather_for_metrics, dispatcher, resume in fresh loaders."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import torch
from torch.utils.data import DataLoader

from accelerate.data.metrics import gather_for_metrics
from accelerate.data_loader import DataLoaderDispatcher, prepare_data_loader
from accelerate.state import GradientState, PartialState
from tests.data.helpers import (
    IndexDataset,
    Pair,
    Stream,
    expected_samples,
    flat,
    index_loader,
    single_process_order,
)

COMBOS = list(itertools.product([False, True], repeat=4))  # split, even, drop_last, shuffle
LENGTH = 23


def _epoch(loader: Any, state: GradientState, *, gather: bool) -> tuple[list[list[int]], list[int]]:
    own, gathered = [], []
    for batch in loader:
        own.append(flat(batch))
        if gather:
            out = gather_for_metrics(
                {"x": batch, "p": Pair(batch, batch * 2)}, gradient_state=state, num_processes=2
            )
            assert torch.equal(out["p"].double, out["x"] * 2)
            gathered.extend(flat(out["x"]))
    return own, gathered


def combos_on_rank(dispatch: bool) -> list[dict[str, Any]]:
    torch.manual_seed(10 + PartialState().process_index)  # unsynchronised on purpose
    results = []
    for split, even, drop_last, shuffle in COMBOS:
        state = GradientState()
        loader = prepare_data_loader(
            index_loader(LENGTH, 6 if split else 4, shuffle=shuffle, drop_last=drop_last),
            use_seedable_sampler=True,  # the expected order below is computed from the seed
            split_batches=split,
            even_batches=even,
            gradient_state=state,
            dispatch_batches=dispatch,
        )
        assert isinstance(loader, DataLoaderDispatcher) == dispatch
        own, gathered = _epoch(loader, state, gather=even or drop_last)
        seed = loader.state_dict()["seed"]  # synchronised when the first epoch starts
        results.append({"own": own, "len": len(loader), "gathered": gathered, "seed": seed})
    return results


def test_every_combination_on_two_processes(pool2):
    for dispatch in (False, True):
        _check_combos(pool2.run(combos_on_rank, dispatch), dispatch)


def _check_combos(ranks: list[list[dict[str, Any]]], dispatch: bool) -> None:
    for i, (split, even, drop_last, shuffle) in enumerate(COMBOS):
        r0, r1 = ranks[0][i], ranks[1][i]
        if not dispatch:
            assert r0["seed"] == r1["seed"], "the shuffle seed comes from process 0"
        for r in (r0, r1):
            assert len(r["own"]) == r["len"]
        real, dups = expected_samples(LENGTH, 6 if split else 4, 2, split, even, drop_last)
        order = single_process_order(LENGTH, shuffle, r0["seed"], 0)
        seen = Counter(x for r in (r0, r1) for b in r["own"] for x in b)
        assert sum(seen.values()) == real + dups and set(seen) == set(order[:real])
        if even or drop_last:
            assert r0["gathered"] == r1["gathered"] == order[:real], (split, even, drop_last, shuffle)


def rng_on_rank(seedable: bool) -> dict[str, Any]:
    rank = PartialState().process_index
    torch.manual_seed(rank)
    loader = prepare_data_loader(
        index_loader(16, 2, shuffle=True), use_seedable_sampler=seedable, rng_types=["torch"]
    )
    epochs = [[flat(b) for b in loader] for _ in range(2)]
    return {"epochs": epochs, "torch": torch.rand(3).tolist()}


def test_rng_sync_gives_one_permutation_per_epoch(pool2):
    for seedable in (True, False):
        r0, r1 = pool2.run(rng_on_rank, seedable)
        for e in range(2):
            union = [x for b in r0["epochs"][e] + r1["epochs"][e] for x in b]
            assert sorted(union) == list(range(16)), "processes must shuffle identically"
        assert r0["epochs"][0] != r0["epochs"][1], "a new epoch reshuffles"
        assert r0["torch"] == r1["torch"], "rng_types=['torch'] synchronises the global RNG"


def _strings(samples: list[int]) -> dict[str, Any]:
    return {"x": torch.tensor(samples), "name": [f"n{i}" for i in samples]}


def dispatch_on_rank(length: int, even: bool) -> dict[str, Any]:
    state = GradientState()
    loader = prepare_data_loader(
        DataLoader(Stream(length, with_len=False), batch_size=2, collate_fn=_strings),
        even_batches=even,
        gradient_state=state,
    )
    assert isinstance(loader, DataLoaderDispatcher)
    own, gathered, names = [], [], []
    for batch in loader:
        assert batch["name"] == [f"n{i}" for i in batch["x"].tolist()]
        own.append(flat(batch["x"]))
        if even:
            gathered.extend(flat(gather_for_metrics(batch["x"], gradient_state=state, num_processes=2)))
            names.extend(gather_for_metrics(batch["name"], gradient_state=state, num_processes=2))
    return {"own": own, "gathered": gathered, "names": names, "remainder": loader.remainder}


def test_dispatcher_uneven_end_never_hangs(pool2):
    r0, r1 = pool2.run(dispatch_on_rank, 9, False)
    assert r0["own"] == [[0, 1], [4, 5], [8]] and r1["own"] == [[2, 3], [6, 7]]  # one batch fewer, no hang
    r0, r1 = pool2.run(dispatch_on_rank, 11, True)
    assert r0["own"][-1] == [8, 9] and r1["own"][-1] == [10, 0] and r0["remainder"] == 1
    assert r0["gathered"] == list(range(11)) and r1["names"] == [f"n{i}" for i in range(11)]


class _Broken(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    def __iter__(self):
        yield from range(4)
        raise RuntimeError("disk on fire")


def dispatch_failure_on_rank() -> str:
    loader = prepare_data_loader(DataLoader(_Broken(), batch_size=1))
    try:
        for _ in loader:
            pass
    except RuntimeError as exc:
        return str(exc)
    return "no error"


def test_dispatcher_failure_on_process_0_raises_everywhere(pool2):
    messages = pool2.run(dispatch_failure_on_rank)
    assert all("disk on fire" in m for m in messages)


def _make(kind: str) -> Any:
    if kind == "dispatch":
        return prepare_data_loader(DataLoader(Stream(21), batch_size=2), use_stateful_dataloader=True)
    if kind == "generator":  # the user's own generator: its state is synchronised and saved
        generator = torch.Generator().manual_seed(7)
        loader = DataLoader(IndexDataset(21), batch_size=2, shuffle=True, generator=generator)
        return prepare_data_loader(loader, use_stateful_dataloader=True)
    # "torch": PyTorch's order (the default); "seedable": (seed, epoch) order.
    return prepare_data_loader(
        index_loader(21, 2, shuffle=True),
        use_seedable_sampler=kind == "seedable",
        use_stateful_dataloader=True,
    )


def interrupted_on_rank(kind: str, stop_epoch: int, stop_batch: int | None) -> dict[str, Any]:
    rank = PartialState().process_index
    torch.manual_seed(100 + rank)
    loader = _make(kind)
    reference = [flat(b) for _ in range(3) for b in loader]
    torch.manual_seed(100 + rank)
    loader = _make(kind)
    done = []
    for epoch in range(stop_epoch + 1):
        for step, batch in enumerate(loader):
            done.append(flat(batch))
            if epoch == stop_epoch and step + 1 == stop_batch:
                break
    return {"reference": reference, "done": done, "state": loader.state_dict(), "rng": torch.get_rng_state()}


def resumed_on_rank(kind: str, states: list[dict[str, Any]], rngs: list[torch.Tensor]) -> list[list[int]]:
    rank = PartialState().process_index
    torch.manual_seed(999 + rank)  # a different process: nothing carried over but the saved states
    loader = _make(kind)
    state = states[rank]
    loader.load_state_dict(state)
    torch.set_rng_state(rngs[rank])  # as load_state restores random_states_{rank}.pkl
    return [flat(b) for _ in range(state["epoch"], 3) for b in loader]


def test_resume_on_two_processes_is_exact(pool2):
    for kind, stop_epoch, stop_batch in [
        ("seedable", 1, 2),
        ("generator", 1, 3),
        ("torch", 1, 3),
        ("torch", 0, None),
        ("seedable", 0, None),
        ("dispatch", 1, 2),
    ]:
        first = pool2.run(interrupted_on_rank, kind, stop_epoch, stop_batch)
        rest = pool2.run(resumed_on_rank, kind, [r["state"] for r in first], [r["rng"] for r in first])
        for r, tail in zip(first, rest):
            assert r["done"] + tail == r["reference"], (kind, stop_epoch, stop_batch)


def torch_order_on_rank(shuffle_seed: int) -> dict[str, Any]:
    rank = PartialState().process_index
    torch.manual_seed(shuffle_seed + rank)  # unsynchronised on purpose: process 0's order wins
    loader = prepare_data_loader(index_loader(LENGTH, 4, shuffle=True))
    own = [flat(b) for b in loader]
    after_prepared = torch.rand(2).tolist()
    torch.manual_seed(shuffle_seed + rank)
    plain = [flat(b) for b in index_loader(LENGTH, 4, shuffle=True)]
    after_plain = torch.rand(2).tolist()
    return {"own": own, "plain": plain, "rng_same_as_plain": after_prepared == after_plain}


def test_default_order_is_pytorch_order_sharded(pool2):
    """Same seed, same data: process 0's plain-PyTorch order, batch i to process i % 2, and every
    process's global RNG advanced exactly as a plain PyTorch loop's."""
    r0, r1 = pool2.run(torch_order_on_rank, 3)
    plain = r0["plain"]  # 6 batches of 4 (the last has 3)
    assert r0["own"] == plain[0::2]
    assert r1["own"][:2] == plain[1::2][:2]
    assert r1["own"][2] == plain[5] + plain[0][:1]  # even_batches completes the last batch from the start
    assert r0["rng_same_as_plain"] and r1["rng_same_as_plain"]


class _UndeclaredSizeBatches(torch.utils.data.Sampler):
    """A custom batch sampler of fixed-size batches that has no `batch_size` attribute."""

    def __init__(self, length: int, size: int) -> None:
        self.length, self.size = length, size

    def __len__(self) -> int:
        return -(-self.length // self.size)

    def __iter__(self) -> Any:
        for start in range(0, self.length, self.size):
            yield list(range(start, min(start + self.size, self.length)))


def custom_batches_on_rank(length: int, size: int, kind: str, dispatch: bool) -> dict[str, Any]:
    from torch.utils.data import BatchSampler, SequentialSampler

    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration

    accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(dispatch_batches=dispatch))
    dataset = torch.arange(length)
    if kind == "batch_sampler":
        loader = DataLoader(dataset, batch_sampler=BatchSampler(SequentialSampler(dataset), size, False))
    elif kind == "sampler":  # a BatchSampler as the sampler, the dataset indexed with whole lists
        loader = DataLoader(
            dataset, sampler=BatchSampler(SequentialSampler(dataset), size, False), batch_size=None
        )
    else:
        loader = DataLoader(dataset, batch_sampler=_UndeclaredSizeBatches(length, size))
    prepared = accelerator.prepare(loader)
    own, gathered = [], []
    for batch in prepared:
        own.append(batch.tolist())
        gathered.extend(accelerator.gather_for_metrics(batch).tolist())
    return {"type": type(prepared).__name__, "own": own, "gathered": gathered, "len": len(prepared)}


def test_gather_for_metrics_with_custom_batch_samplers(pool2):
    # Each sample exactly once (the last round's padding dropped), also with an uneven last batch.
    for kind in ("batch_sampler", "sampler", "undeclared"):
        for length, size in ((10, 3), (10, 4), (8, 2), (11, 3), (1, 3)):
            r0, r1 = pool2.run(custom_batches_on_rank, length, size, kind, False)
            assert r0["gathered"] == r1["gathered"] == list(range(length)), (kind, length, size)
            assert len(r0["own"]) == len(r1["own"]) == r0["len"]


def test_dispatch_batches_with_a_custom_batch_sampler(pool2):
    # Process 0 reads num_processes batches per step; each process gets its equal slice of them.
    for kind in ("batch_sampler", "undeclared"):
        r0, r1 = pool2.run(custom_batches_on_rank, 10, 3, kind, True)
        assert r0["type"] == r1["type"] == "DataLoaderDispatcher"
        assert (r0["own"], r1["own"]) == ([[0, 1, 2], [6, 7]], [[3, 4, 5], [8, 9]])
        assert r0["gathered"] == r1["gathered"] == list(range(10))
        assert r0["len"] == r1["len"] == 2
        r0, r1 = pool2.run(custom_batches_on_rank, 11, 4, kind, True)
        assert (r0["own"], r1["own"]) == ([[0, 1, 2, 3], [8, 9]], [[4, 5, 6, 7], [10, 0]])
        assert r0["gathered"] == r1["gathered"] == list(range(11))
