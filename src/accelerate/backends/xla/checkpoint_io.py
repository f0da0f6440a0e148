"""XLA's checkpoint I/O: the files ``save_state`` / ``save_model`` / ``Accelerator.save`` write hold CPU tensors.

An XLA tensor pickled as it is could only be loaded where torch_xla runs (and its pending device work
has to run first), so torch_xla's own ``xm.save`` copies every tensor to the CPU before writing. The
strategy's :class:`XlaCheckpointIO` does the same through :meth:`CheckpointIO.host_copy`, which the
checkpointing modules call on everything they write, so they need not know that XLA exists.

Everything else is the default I/O's (every process holds the full model, so process 0 writes
plain files; a sharded checkpoint from another run still loads).
"""

from __future__ import annotations

from typing import Any

from accelerate.backends.dtensor_io.checkpoint_io import ShardedCheckpointIO
from accelerate.utils.xla import xla_to_cpu


class XlaCheckpointIO(ShardedCheckpointIO):
    """The default checkpoint I/O, with every XLA tensor copied to the CPU before it is written."""

    def host_copy(self, obj: Any) -> Any:
        # One CPU copy per XLA tensor, after running the pending graph: tied weights stay tied.
        return xla_to_cpu(obj)
