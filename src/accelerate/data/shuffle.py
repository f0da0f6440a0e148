"""Shuffling samplers whose order follows from a seed and the epoch, so a loader's state resumes it.

`SeedableRandomSampler` (``use_seedable_sampler=True``) shuffles epoch ``e`` with ``seed + e``, as
upstream's does. `TorchOrderRandomSampler` (the default for a plain shuffled `DataLoader`) shuffles
its first epoch exactly as PyTorch would under the same global seed, and every later epoch from
that first draw and the epoch number. Neither reads the global RNG after the first epoch, so the
seed in a loader's ``state_dict`` decides every later epoch's order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sized
from typing import Any

import torch
from torch.utils.data import RandomSampler


class SeedableRandomSampler(RandomSampler):
    """A `RandomSampler` whose order depends only on ``(initial_seed, epoch)``.

    Every process (and a process restarted from a checkpoint) that knows the seed and the epoch
    draws the same permutation, so shuffling needs no generator state to be saved or broadcast.

    Epoch ``e`` is shuffled exactly as upstream's sampler does it: a generator seeded with
    ``initial_seed + e`` draws what `RandomSampler` draws with it (``torch.randperm(len)`` for a
    plain shuffle), so a run moved from upstream with the same seed sees the same order in every
    epoch. (Consequently seed ``s`` at epoch ``e + 1`` repeats seed ``s + 1`` at epoch ``e``.)

    As upstream's, a complete pass moves the sampler on to the next epoch by itself, so a plain
    `DataLoader` over it (no accelerate, no ``set_epoch``) reshuffles every epoch in the order a
    prepared loader, which sets the epoch itself, uses: one process reading the whole global batch
    sees what N prepared processes see together.

    Args:
        data_source: the dataset (anything with ``len``).
        replacement: draw with replacement (as `RandomSampler`).
        num_samples: samples per epoch (as `RandomSampler`; defaults to ``len(data_source)``).
        generator: only used to choose the seed when ``data_seed`` is not given.
        data_seed: the seed; defaults to ``generator.initial_seed()`` or ``torch.initial_seed()``
            (which ``set_seed`` sets).

    Example:
        >>> sampler = SeedableRandomSampler(range(8), data_seed=0)
        >>> sampler.set_epoch(3)
        >>> order = list(sampler)  # the same in every process and every run
    """

    def __init__(
        self,
        data_source: Sized,
        replacement: bool = False,
        num_samples: int | None = None,
        generator: torch.Generator | None = None,
        data_seed: int | None = None,
    ) -> None:
        super().__init__(data_source, replacement=replacement, num_samples=num_samples, generator=generator)
        if data_seed is not None:
            seed = data_seed
        elif generator is not None:
            seed = generator.initial_seed()
        else:
            seed = torch.initial_seed()
        self.initial_seed = int(seed)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def _epoch_generator(self) -> torch.Generator:
        generator = torch.Generator()
        generator.manual_seed(self.initial_seed + self.epoch)  # upstream's rule, to share its orders
        return generator

    def _order(self) -> list[int]:
        if len(self.data_source) == 0:
            return []  # RandomSampler would divide by the size
        # RandomSampler's own draws (randperm per pass, randint in its chunks with replacement)
        # with this epoch's generator: the same numbers upstream's sampler gets. The user's
        # generator is put back at once (it only chose the seed).
        own, self.generator = self.generator, self._epoch_generator()
        try:
            return one_pass(self)
        finally:
            self.generator = own

    def epoch_order(self) -> list[int]:
        """The whole epoch's order at once (a complete pass: the sampler moves to the next epoch)."""
        order = self._order()
        self.set_epoch(self.epoch + 1)
        return order

    def __iter__(self) -> Iterator[int]:
        # The epoch is read here, when the iteration is created, so a later set_epoch cannot
        # change a running epoch.
        return self._then_next_epoch(self._order())

    def _then_next_epoch(self, order: list[int]) -> Iterator[int]:
        yield from order
        self.set_epoch(self.epoch + 1)  # only after a complete pass, as upstream's sampler


def one_pass(sampler: RandomSampler) -> list[int]:
    """What iterating ``sampler`` yields, drawn with its generator, as one list.

    A plain shuffle is one ``randperm`` (RandomSampler's first draw; the extra empty draw it makes
    after it only moves a generator that these samplers re-seed every epoch anyway), taken as a
    list without stepping a generator per index: that is most of the index cost of an epoch.
    """
    size = len(sampler.data_source)
    if sampler.replacement or sampler.num_samples != size or size == 0:
        return list(RandomSampler.__iter__(sampler))
    return torch.randperm(size, generator=sampler.generator).tolist()


def sampler_order(sampler: Iterable[Any]) -> list[Any]:
    """A sampler's whole epoch as a list: at once where the sampler can (``epoch_order``)."""
    epoch_order = getattr(sampler, "epoch_order", None)
    return list(epoch_order()) if callable(epoch_order) else list(sampler)


# Epoch e of a base seed s is shuffled with seed (s + e * stride) mod 2**64: an odd stride, so the
# epochs of one run never share a seed (upstream's s + e would repeat run s + 1's epochs).
_EPOCH_SEED_STRIDE = 0x9E3779B97F4A7C15
_SEED_MASK = (1 << 64) - 1


def epoch_seed(base_seed: int, epoch: int) -> int:
    """The shuffle seed of ``epoch`` in a run whose base seed is ``base_seed`` (a uint64)."""
    return (base_seed + epoch * _EPOCH_SEED_STRIDE) & _SEED_MASK


class TorchOrderRandomSampler(RandomSampler):
    """A `RandomSampler` (no generator of its own) whose first epoch is PyTorch's and whose state resumes.

    PyTorch's `RandomSampler` without a generator draws a seed from the global RNG when an epoch's
    iteration starts (after the DataLoader iterator drew its workers' base seed). This sampler
    makes the same draw at the same point, so each global RNG advances exactly as in a plain
    PyTorch loop, and the first epoch it shuffles is shuffled with that draw: under the same
    ``torch.manual_seed`` it is PyTorch's order. That first draw becomes the run's ``base_seed``;
    every later epoch ``e`` is shuffled with ``epoch_seed(base_seed, e)``, not with its own draw.
    So the order of every epoch follows from ``base_seed`` and the epoch alone, whatever the global
    RNG holds: the loader's state (which carries ``base_seed``) resumes exactly without it, and
    several processes agree on the seed once (``sync_seed``, set by the loader, replaces each
    process's first draw by process 0's) instead of at every epoch.

    ``pending_state`` (a generator state, from a state saved by an older version without a
    ``base_seed``) replays one epoch from that state; ``state_at_epoch_start`` is the generator's
    state when the current epoch began. In both cases the epoch's draw was made before the state
    was saved, so none is made again.
    """

    def __init__(self, data_source: Sized, replacement: bool = False, num_samples: int | None = None) -> None:
        super().__init__(data_source, replacement=replacement, num_samples=num_samples, generator=None)
        self._own = torch.Generator()
        self.generator = self._own
        self.base_seed: int | None = None
        self.epoch = 0
        self.pending_state: torch.Tensor | None = None
        self.state_at_epoch_start: torch.Tensor | None = None
        self.sync_seed: Callable[[int], int] | None = None

    @classmethod
    def replacing(cls, sampler: RandomSampler) -> TorchOrderRandomSampler:
        return cls(sampler.data_source, replacement=sampler.replacement, num_samples=sampler._num_samples)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def _begin_epoch(self) -> None:
        if self.pending_state is not None:
            self._own.set_state(self.pending_state)
            self.pending_state = None
        else:
            drawn = int(torch.empty((), dtype=torch.int64).random_().item())  # PyTorch's draw, always made
            if self.base_seed is None:
                seed = self.sync_seed(drawn) if self.sync_seed is not None else drawn
                # The base seed whose epoch_seed at this epoch is the draw: this epoch is PyTorch's.
                self.base_seed = epoch_seed(seed, -self.epoch)
            self._own.manual_seed(epoch_seed(self.base_seed, self.epoch))
        self.state_at_epoch_start = self._own.get_state()

    def epoch_order(self) -> list[int]:
        """The whole epoch's order at once (what iterating yields; begins the epoch as iterating does)."""
        self._begin_epoch()
        return one_pass(self)

    def __iter__(self) -> Iterator[int]:
        # A generator function: this body runs at the first next(), after the iterator's base seed.
        yield from self.epoch_order()
