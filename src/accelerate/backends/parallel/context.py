"""Context parallelism (CUDA only): shard a block's sequence buffers over the ``cp`` sub-mesh.

torch's ring attention (``torch.distributed.tensor.experimental.context_parallel``) replaces
scaled-dot-product attention inside the block; its CPU flash-attention op has no sharding strategy,
so ``ParallelismConfig`` refuses ``cp_size > 1`` off CUDA before any of this runs.
"""

from __future__ import annotations

import contextlib
from typing import Any


def maybe_context_parallel(
    config: Any,
    buffers: list[Any] | None = None,
    buffer_seq_dims: list[int] | None = None,
    no_restore_buffers: set[Any] | None = None,
) -> contextlib.AbstractContextManager[Any]:
    """torch's ``context_parallel`` on ``config``'s cp mesh, or a null context without cp.

    Example:
        >>> with accelerator.maybe_context_parallel(buffers=[ids, labels], buffer_seq_dims=[1, 1]):
        ...     loss = model(ids, labels=labels).loss
    """
    if config is None or not config.cp_enabled or config.device_mesh is None:
        return contextlib.nullcontext()
    from torch.distributed.tensor.experimental import context_parallel

    buffers = list(buffers or [])
    dims = list(buffer_seq_dims) if buffer_seq_dims is not None else [1] * len(buffers)
    if len(dims) != len(buffers):
        raise ValueError(
            f"maybe_context_parallel got {len(buffers)} buffers but {len(dims)} buffer_seq_dims; give one "
            "sequence dimension per buffer (e.g. buffer_seq_dims=[1, 1] for (batch, seq) ids and labels)."
        )
    return context_parallel(
        config.device_mesh["cp"],
        buffers=buffers,
        buffer_seq_dims=dims,
        no_restore_buffers=set(no_restore_buffers or ()),
    )
