"""`DataLoaderAdapter`: a loader built from ``DataLoader`` arguments whose position can be saved.

With ``use_stateful_dataloader=True`` it is backed by torchdata's ``StatefulDataLoader`` when that
package is installed, else by accelerate's own resumable loader (the same position tracking that
prepared loaders use, in one process): ``state_dict()`` / ``load_state_dict()`` work either way, and
``state_provider`` says which one is in use. Without it, it is a plain ``DataLoader`` that keeps no
position, and asking for its state raises instead of returning something that cannot resume.

`MpDeviceLoaderWrapper` (upstream's TPU loader) is the XLA backend's: :mod:`accelerate.backends.xla.loader`,
named at upstream's path by :mod:`accelerate.data_loader`.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader

from accelerate.data.base import DataLoaderStateMixin
from accelerate.data.samplers import get_sampler, set_sampler

logger = logging.getLogger(__name__)


def _torchdata_available() -> bool:
    return importlib.util.find_spec("torchdata") is not None


def _stateful_base(dataset: Any, batch_sampler: Any, kwargs: dict[str, Any]) -> tuple[Any, str]:
    if _torchdata_available():
        from torchdata.stateful_dataloader import StatefulDataLoader

        return StatefulDataLoader(dataset, batch_sampler=batch_sampler, **kwargs), "torchdata"
    from accelerate.data.prepare import prepare_data_loader

    logger.info(
        "torchdata is not installed: DataLoaderAdapter keeps its position with accelerate's own loader"
    )
    plain = DataLoader(dataset, batch_sampler=batch_sampler, **kwargs)
    # One process, no sharding, batches left where collate puts them: only the resumable position is added.
    base = prepare_data_loader(
        plain,
        device="cpu",
        num_processes=1,
        process_index=0,
        put_on_device=False,
        use_stateful_dataloader=True,
    )
    return base, "accelerate"


class DataLoaderAdapter(DataLoaderStateMixin):
    """A ``DataLoader(dataset, batch_sampler=batch_sampler, **kwargs)`` that can save its position.

    Args:
        dataset: the dataset.
        use_stateful_dataloader: keep a resumable position (``state_dict`` / ``load_state_dict``).
        batch_sampler: as for ``DataLoader``.
        **kwargs: the other ``DataLoader`` arguments (torchdata's extra ones only when it is installed).

    Attributes:
        base_dataloader: the loader doing the work.
        state_provider: ``"torchdata"``, ``"accelerate"`` or None (no position kept).

    Example:
        >>> loader = DataLoaderAdapter(dataset, use_stateful_dataloader=True, batch_size=8, shuffle=True)
        >>> state = loader.state_dict()   # after some batches
        >>> loader.load_state_dict(state)  # the next iteration continues from there
    """

    def __init__(
        self, dataset: Any, use_stateful_dataloader: bool = False, batch_sampler: Any = None, **kwargs: Any
    ):
        self.use_stateful_dataloader = use_stateful_dataloader
        self.state_provider: str | None = None
        try:
            if use_stateful_dataloader:
                self.base_dataloader, self.state_provider = _stateful_base(dataset, batch_sampler, kwargs)
            else:
                self.base_dataloader = DataLoader(dataset, batch_sampler=batch_sampler, **kwargs)
        except TypeError as exc:
            if "unexpected keyword" in str(exc) and not _torchdata_available():
                raise TypeError(
                    f"DataLoaderAdapter: {exc}. Arguments beyond torch's DataLoader (such as StatefulDataLoader's "
                    "`snapshot_every_n_steps`) need torchdata: `pip install torchdata`."
                ) from exc
            raise

    # --- the loader's face ------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        return iter(self.base_dataloader)

    def __len__(self) -> int:
        return len(self.base_dataloader)

    def __getattr__(self, name: str) -> Any:
        # Only reached for names this object lacks: the DataLoader's (dataset, batch_size, sampler...).
        if name == "base_dataloader":  # not set yet (failed __init__, unpickling)
            raise AttributeError(name)
        return getattr(self.base_dataloader, name)

    def get_sampler(self) -> Any:
        return get_sampler(self.base_dataloader)

    def set_sampler(self, sampler: Any) -> None:
        set_sampler(self.base_dataloader, sampler)

    # --- position -----------------------------------------------------------------------------------
    def _require_state(self, call: str) -> None:
        if self.state_provider is None:
            raise ValueError(
                f"DataLoaderAdapter.{call}(): this loader keeps no position (use_stateful_dataloader=False). "
                "Create it with use_stateful_dataloader=True (or DataLoaderConfiguration(use_stateful_dataloader=True))."
            )

    def state_dict(self) -> dict[str, Any]:
        """The loader's position, to pass to `load_state_dict` later (also in another process)."""
        self._require_state("state_dict")
        state: dict[str, Any] = self.base_dataloader.state_dict()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores a position from `state_dict`; the next iteration continues from it."""
        self._require_state("load_state_dict")
        self.base_dataloader.load_state_dict(state_dict)

    def adjust_state_dict_for_prefetch(self) -> None:
        """Nothing to adjust: this loader fetches no batch ahead, so its state counts what it handed out."""
