"""TensorBoard tracker (needs `pip install tensorboard`)."""

from __future__ import annotations

import os
from typing import Any

from accelerate.tracking.base import GeneralTracker, loggable, on_main_process, require_tracker_package

_ACCEPTED = "numbers (one-element tensors too), strings and dicts of numbers"


class TensorBoardTracker(GeneralTracker):
    """Writes event files under ``logging_dir/run_name`` with ``torch.utils.tensorboard.SummaryWriter``
    (``kwargs`` go to the writer)."""

    name = "tensorboard"
    requires_logging_directory = True
    package = ("tensorboard", "tensorboard")

    def __init__(self, run_name: str, logging_dir: str | os.PathLike[str] | None, **kwargs: Any) -> None:
        super().__init__()
        if logging_dir is None:
            raise ValueError(
                "Logging with `tensorboard` requires a `logging_dir` to be passed in: pass "
                "Accelerator(project_dir=...) or ProjectConfiguration(logging_dir=...)."
            )
        require_tracker_package(self.name, *self.package)
        self.run_name = run_name
        self.logging_dir = os.path.join(logging_dir, run_name)
        self.init_kwargs = kwargs
        self.writer: Any = None

    @on_main_process
    def start(self) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(self.logging_dir, **self.init_kwargs)

    @property
    def tracker(self) -> Any:
        return self.writer

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        hparams = loggable(self.name, values, "numbers, strings and bools", keep=lambda v: isinstance(v, str))
        self.writer.add_hparams(hparams, {})
        self.writer.flush()

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        prepared = loggable(self.name, values, _ACCEPTED, keep=lambda v: isinstance(v, str), dicts="nest")
        for key, value in prepared.items():
            if isinstance(value, str):
                self.writer.add_text(key, value, global_step=step, **kwargs)
            elif isinstance(value, dict):
                scalars = {sub: item for sub, item in value.items() if isinstance(item, int | float)}
                self.writer.add_scalars(key, scalars, global_step=step, **kwargs)
            else:
                self.writer.add_scalar(key, value, global_step=step, **kwargs)
        self.writer.flush()

    @on_main_process
    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Logs batches of images (``name -> NCHW tensor or array``) with ``add_images``."""
        for key, images in values.items():
            self.writer.add_images(key, images, global_step=step, **kwargs)
        self.writer.flush()

    @on_main_process
    def finish(self) -> None:
        self.writer.close()
