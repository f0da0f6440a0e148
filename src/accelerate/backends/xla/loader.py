"""`MpDeviceLoaderWrapper`: a prepared loader that feeds an XLA device, as torch_xla's ``MpDeviceLoader``.

Each batch goes to the device in one transfer (torch_xla's ``send_cpu_data_to_device``) and the graph
recorded for the previous step is cut and run (``torch_xla.sync``, formerly ``mark_step``) before the
next batch is handed out: the two things ``MpDeviceLoader`` does for a training loop.

Unlike ``MpDeviceLoader`` it loads in the calling thread. torch_xla's parallel loader runs the
wrapped loader in background threads, several batches ahead of the loop; a prepared loader tells
:class:`~accelerate.state.gradient.GradientState` when its last batch goes out (what ``accumulate``
and ``gather_for_metrics`` rely on), and read ahead that signal would arrive batches too early.
Everything else (``len``, ``set_epoch``, ``state_dict``, ``total_batch_size``, ...) is the wrapped
loader's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from accelerate.utils.xla import require_torch_xla, sync


class MpDeviceLoaderWrapper:
    """A prepared loader whose batches arrive on the XLA ``device``.

    Example:
        >>> loader = MpDeviceLoaderWrapper(prepared_loader, torch_xla.device())
        >>> for batch in loader: ...  # tensors on xla:0
    """

    def __init__(self, dataloader: Any, device: torch.device | str) -> None:
        require_torch_xla("MpDeviceLoaderWrapper")
        self._loader = dataloader
        self.device = torch.device(device)

    def __iter__(self) -> Iterator[Any]:
        import torch_xla.core.xla_model as xm

        for batch in self._loader:
            # The previous step's graph (forward, backward, optimizer step) runs now, not at the
            # end of the epoch: without the cut, XLA would keep recording one ever-growing graph.
            sync()
            yield xm.send_cpu_data_to_device(batch, self.device)
        sync()

    def __len__(self) -> int:
        return len(self._loader)

    def __getattr__(self, name: str) -> Any:
        # Only reached for names this wrapper lacks: the prepared loader's own API.
        if name == "_loader":
            raise AttributeError(name)
        return getattr(self._loader, name)

    @property
    def dataloader(self) -> Any:
        """The wrapped (prepared) loader."""
        return self._loader

    def rewrap(self, dataloader: Any) -> MpDeviceLoaderWrapper:
        """``dataloader`` fed to this wrapper's device (``skip_first_batches`` skips in the prepared
        loader, then feeds the view the same way: see ``accelerate.data.resume.DeviceFeedingLoader``)."""
        return MpDeviceLoaderWrapper(dataloader, self.device)

    def set_epoch(self, epoch: int) -> None:
        set_epoch = getattr(self._loader, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)

    def state_dict(self) -> Any:
        return self._loader.state_dict()

    def load_state_dict(self, state_dict: Any) -> None:
        self._loader.load_state_dict(state_dict)

    def __repr__(self) -> str:
        return f"MpDeviceLoaderWrapper({self._loader!r}, device={self.device})"


__all__ = ["MpDeviceLoaderWrapper"]
