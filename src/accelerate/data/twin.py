"""``base_dataloader`` of our loaders: upstream's name for the plain `DataLoader` doing the work.

Upstream's loaders wrap a plain loader; ours are `DataLoader` subclasses, so there is no inner one to
show. `prepare` records the loader it was given; a loader built directly gets, on first access, a
plain `DataLoader` over the same dataset, sampler and arguments (iterating it moves no position and
tells no ``GradientState``). As upstream's, the name is an instance attribute: reading it on the
class raises ``AttributeError``.
"""

from __future__ import annotations

from typing import Any, overload

from torch.utils.data import DataLoader, IterableDataset

_SLOT = "_base_dataloader"


def plain_twin(loader: DataLoader[Any]) -> DataLoader[Any]:
    """A plain `DataLoader` reading what ``loader`` reads, in the same batches, with nothing skipped."""
    from accelerate.data.prepare import loader_kwargs

    kwargs = loader_kwargs(loader)
    if isinstance(loader.dataset, IterableDataset):
        return DataLoader(loader.dataset, batch_size=loader.batch_size, drop_last=loader.drop_last, **kwargs)
    if loader.batch_sampler is not None:
        return DataLoader(loader.dataset, batch_sampler=loader.batch_sampler, **kwargs)
    return DataLoader(loader.dataset, batch_size=None, sampler=loader.sampler, **kwargs)


class BaseDataLoader:
    """Data descriptor for ``base_dataloader`` (see the module docstring)."""

    @overload
    def __get__(self, loader: None, owner: type) -> BaseDataLoader: ...
    @overload
    def __get__(self, loader: DataLoader[Any], owner: type) -> DataLoader[Any]: ...
    def __get__(self, loader: DataLoader[Any] | None, owner: type) -> Any:
        if loader is None:
            raise AttributeError(
                f"type object {owner.__name__!r} has no attribute 'base_dataloader' "
                "(it belongs to each loader: read it on an instance)"
            )
        base: DataLoader[Any] | None = loader.__dict__.get(_SLOT)
        if base is None:
            base = plain_twin(loader)
            loader.__dict__[_SLOT] = base
        return base

    def __set__(self, loader: DataLoader[Any], value: DataLoader[Any] | None) -> None:
        loader.__dict__[_SLOT] = value
