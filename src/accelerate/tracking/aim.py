"""Aim tracker (needs `pip install aim`)."""

from __future__ import annotations

import os
from typing import Any

from accelerate.tracking.base import (
    GeneralTracker,
    is_media,
    loggable,
    on_main_process,
    require_tracker_package,
)

_ACCEPTED = "numbers (one-element tensors too) and aim objects (aim.Image, aim.Text...)"


class AimTracker(GeneralTracker):
    """One ``aim.Run`` in the repository at ``logging_dir`` (``kwargs`` go to ``aim.Run``), named ``run_name``."""

    name = "aim"
    requires_logging_directory = True
    package = ("aim", "aim")

    def __init__(
        self, run_name: str, logging_dir: str | os.PathLike[str] | None = ".", **kwargs: Any
    ) -> None:
        super().__init__()
        require_tracker_package(self.name, *self.package)
        self.run_name = run_name
        self.aim_repo_path = "." if logging_dir is None else str(logging_dir)
        self.init_kwargs = kwargs
        self.writer: Any = None

    @on_main_process
    def start(self) -> None:
        import aim

        self.writer = aim.Run(repo=self.aim_repo_path, **self.init_kwargs)
        self.writer.name = self.run_name

    @property
    def tracker(self) -> Any:
        return self.writer

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.writer["hparams"] = values

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        keep = lambda value: is_media(value) and not isinstance(value, str)  # noqa: E731
        for key, value in loggable(self.name, values, _ACCEPTED, keep=keep, dicts="flatten").items():
            self.writer.track(value, name=key, step=step, **kwargs)

    @on_main_process
    def log_images(
        self, values: dict[str, Any], step: int | None = None, kwargs: dict[str, dict[str, Any]] | None = None
    ) -> None:
        """Logs images: ``name -> image`` or ``name -> (image, caption)``. ``kwargs`` may hold
        ``{"aim_image": {...}, "track": {...}}`` for ``aim.Image`` and ``Run.track``."""
        import aim

        options = kwargs or {}
        for key, value in values.items():
            image, caption = value if isinstance(value, tuple) else (value, "")
            picture = aim.Image(image, caption=caption, **options.get("aim_image", {}))
            self.writer.track(picture, name=key, step=step, **options.get("track", {}))

    @on_main_process
    def finish(self) -> None:
        self.writer.close()
