"""`get_logger`: a logger that, by default, writes on the main process only.

Each call can say where to log: ``logger.info("...", main_process_only=False)`` logs on every
process, and ``in_order=True`` makes the processes log one after the other (process 0 first).
"""

from __future__ import annotations

import logging
import os
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

# LoggerAdapter is generic in the type stubs but cannot be subscripted at run time before Python 3.11.
if TYPE_CHECKING:
    _LoggerAdapter = logging.LoggerAdapter[logging.Logger]
else:
    _LoggerAdapter = logging.LoggerAdapter


class MultiProcessAdapter(_LoggerAdapter):
    """A LoggerAdapter that knows about processes (created by :func:`get_logger`)."""

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        from accelerate.state.process import current_process_state

        state = current_process_state()
        if state is None:
            raise RuntimeError(
                "accelerate's logger needs the process state: create the Accelerator (or PartialState()) "
                "before logging with it."
            )
        main_process_only = kwargs.pop("main_process_only", True)
        in_order = kwargs.pop("in_order", False)
        kwargs.setdefault("stacklevel", 2)
        if not self.isEnabledFor(level):
            return
        if in_order and not main_process_only:
            for rank in range(state.num_processes):
                if rank == state.process_index:
                    msg_, kwargs_ = self.process(msg, kwargs)
                    self.logger.log(level, msg_, *args, **kwargs_)
                state.wait_for_everyone()
            return
        if not main_process_only or state.is_main_process:
            msg_, kwargs_ = self.process(msg, kwargs)
            self.logger.log(level, msg_, *args, **kwargs_)

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        return msg, kwargs

    def warning_once(self, msg: object, *args: Any, **kwargs: Any) -> None:
        """``warning`` the first time this message (with these arguments) is given; later calls are quiet.

        For warnings inside loops: each distinct message is shown once per process (and only on the
        main process unless ``main_process_only=False``).
        """
        key = (str(msg), args)
        if key in self._warned:
            return
        self._warned.add(key)
        kwargs.setdefault("stacklevel", 3)
        self.warning(msg, *args, **kwargs)

    @property
    def _warned(self) -> set[tuple[str, tuple[Any, ...]]]:
        # Kept on the logger, so adapters made by separate get_logger calls for one name share it.
        seen: set[tuple[str, tuple[Any, ...]]] | None = getattr(self.logger, "_accelerate_warned", None)
        if seen is None:
            seen = set()
            self.logger._accelerate_warned = seen  # type: ignore[attr-defined]  # ours, stored on the stdlib Logger
        return seen


def get_logger(name: str, log_level: str | None = None) -> MultiProcessAdapter:
    """A process-aware logger; ``log_level`` defaults to ``$ACCELERATE_LOG_LEVEL`` when set.

    Example:
        >>> logger = get_logger(__name__)
        >>> logger.info("written once, by the main process")
    """
    level = log_level or os.environ.get("ACCELERATE_LOG_LEVEL")
    logger = logging.getLogger(name)
    if level is not None:
        logger.setLevel(level.upper())
        logger.root.setLevel(level.upper())
    return MultiProcessAdapter(logger, {})
