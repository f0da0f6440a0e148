"""Weights & Biases tracker (needs `pip install wandb`)."""

from __future__ import annotations

from typing import Any

from accelerate.tracking.base import (
    ProjectRunTracker,
    is_media,
    loggable,
    on_main_process,
)

_ACCEPTED = (
    "numbers (one-element tensors too), strings, dicts of those and wandb objects (wandb.Histogram...)"
)


class WandBTracker(ProjectRunTracker):
    """One ``wandb.init(project=run_name, **kwargs)`` run, on the main process. For one run per rank,
    subclass it with ``main_process_only = False`` and group the runs (``init_kwargs={"wandb": {"group": ...}}``)."""

    name = "wandb"
    requires_logging_directory = False
    package = ("wandb", "wandb")

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.run.log(loggable(self.name, values, _ACCEPTED, keep=is_media, dicts="nest"), step=step, **kwargs)

    @on_main_process
    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Logs lists of images (``name -> [image, ...]``) as ``wandb.Image`` objects."""
        import wandb

        self.run.log(
            {key: [wandb.Image(image) for image in images] for key, images in values.items()},
            step=step,
            **kwargs,  # upstream's contract: the rest goes to ``wandb.log`` (e.g. ``commit=False``)
        )

    @on_main_process
    def log_table(
        self,
        table_name: str,
        columns: list[str] | None = None,
        data: list[list[Any]] | None = None,
        dataframe: Any = None,
        step: int | None = None,
        **kwargs: Any,
    ) -> None:
        """Logs a ``wandb.Table`` built from ``columns`` and ``data`` rows, or from a pandas ``dataframe``."""
        import wandb

        headers: Any = columns  # wandb's annotation wants list[str | int]; a list of names is what it takes
        self.run.log(
            {table_name: wandb.Table(columns=headers, data=data, dataframe=dataframe)}, step=step, **kwargs
        )

    @on_main_process
    def finish(self) -> None:
        self.run.finish()
