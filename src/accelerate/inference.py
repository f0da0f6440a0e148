"""Pipeline-parallel inference (PiPPy) at upstream's path: ``prepare_pippy`` and its helpers.

A face: the behaviour lives in :mod:`accelerate.backends.pipeline` (split points, the traced
stages on ``torch.distributed.pipelining``, the pipelined forward); each name loads on first use.
"""

from accelerate._lazy import lazy_exports

_EXPORTS = {
    "prepare_pippy": "accelerate.backends.pipeline.prepare",
    "build_pipeline": "accelerate.backends.pipeline.schedule",
    "pippy_forward": "accelerate.backends.pipeline.schedule",
    "generate_device_map": "accelerate.backends.pipeline.split",
    "find_pippy_batch_size": "accelerate.backends.pipeline.inputs",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
