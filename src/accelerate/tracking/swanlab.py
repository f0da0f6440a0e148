"""SwanLab tracker (needs `pip install swanlab`)."""

from __future__ import annotations

from typing import Any

from accelerate.tracking.base import (
    ProjectRunTracker,
    is_media,
    loggable,
    on_main_process,
)

_ACCEPTED = "numbers (one-element tensors too), dicts of numbers and swanlab objects (swanlab.Image...)"


class SwanLabTracker(ProjectRunTracker):
    """One ``swanlab.init(project=run_name, **kwargs)`` run."""

    name = "swanlab"
    requires_logging_directory = False
    package = ("swanlab", "swanlab")

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        keep = lambda value: is_media(value) and not isinstance(value, str)  # noqa: E731
        self.run.log(loggable(self.name, values, _ACCEPTED, keep=keep, dicts="flatten"), step=step, **kwargs)

    @on_main_process
    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Logs lists of images (``name -> [image, ...]``) as ``swanlab.Image`` objects."""
        import swanlab

        images = {key: [swanlab.Image(image) for image in value] for key, value in values.items()}
        self.run.log(images, step=step, **kwargs)

    @on_main_process
    def finish(self) -> None:
        import swanlab

        swanlab.finish()
