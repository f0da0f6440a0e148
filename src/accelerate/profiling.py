"""`Accelerator.profile()`: ``torch.profiler`` around a block, one Chrome trace per process.

Settings come from :class:`~accelerate.utils.dataclasses.ProfileKwargs` (given to the call, or to
the Accelerator through ``kwargs_handlers``); without any, torch's defaults record CPU activity.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from accelerate.utils.constants import PROFILE_PATTERN_NAME
from accelerate.utils.dataclasses import ProfileKwargs


@contextlib.contextmanager
def profile(handler: ProfileKwargs | None, process_index: int) -> Iterator[Any]:
    """Records the block with ``handler.build()`` and yields the profiler.

    With ``handler.output_trace_dir`` each process writes ``profile_{process_index}.json`` there
    (a Chrome trace, open it in chrome://tracing or Perfetto) when the block ends.

    Example:
        >>> with profile(ProfileKwargs(activities=["cpu"]), process_index=0) as prof:
        ...     model(x)
        >>> prof.key_averages().table(sort_by="cpu_time_total")
    """
    handler = handler if handler is not None else ProfileKwargs()
    profiler = handler.build()
    with profiler:
        yield profiler
    if handler.output_trace_dir:
        os.makedirs(handler.output_trace_dir, exist_ok=True)
        name = PROFILE_PATTERN_NAME.format(suffix=process_index)
        profiler.export_chrome_trace(os.path.join(handler.output_trace_dir, name))
