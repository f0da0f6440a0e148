"""TensorBoard tracker (needs `pip install tensorboard`)."""

from __future__ import annotations

import os
from typing import Any

from accelerate.tracking.base import GeneralTracker, as_number, skip_unloggable
from accelerate.utils.imports import require

_ACCEPTED = "numbers (one-element tensors too), strings and dicts of numbers"


class TensorBoardTracker(GeneralTracker):
    name = "tensorboard"
    requires_logging_directory = True

    def __init__(self, run_name: str, logging_dir: str | None, **kwargs: Any) -> None:
        if logging_dir is None:
            raise ValueError(
                "log_with='tensorboard' needs a logging directory: pass Accelerator(project_dir=...) "
                "or ProjectConfiguration(logging_dir=...)."
            )
        tb = require("torch.utils.tensorboard", "tensorboard", "log_with='tensorboard'")
        self.logging_dir = os.path.join(logging_dir, run_name)
        self.writer = tb.SummaryWriter(self.logging_dir, **kwargs)

    @property
    def tracker(self) -> Any:
        return self.writer

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.writer.add_hparams(
            {k: v for k, v in values.items() if isinstance(v, int | float | str | bool)}, {}
        )
        self.writer.flush()

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        for key, value in values.items():
            number = as_number(value)
            if number is not None:
                self.writer.add_scalar(key, number, global_step=step, **kwargs)
            elif isinstance(value, str):
                self.writer.add_text(key, value, global_step=step, **kwargs)
            elif isinstance(value, dict):
                scalars = {}
                for sub, item in value.items():
                    sub_number = as_number(item)
                    if sub_number is None:
                        skip_unloggable(self.name, f"{key}/{sub}", item, _ACCEPTED)
                    else:
                        scalars[sub] = sub_number
                self.writer.add_scalars(key, scalars, global_step=step, **kwargs)
            else:
                skip_unloggable(self.name, key, value, _ACCEPTED)
        self.writer.flush()

    def finish(self) -> None:
        self.writer.close()
