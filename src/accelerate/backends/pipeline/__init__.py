"""Pipeline-parallel inference: one stage of the model per process, on ``torch.distributed.pipelining``.

Upstream calls this PiPPy (the project torch's pipelining grew out of); its public names live at
``accelerate.inference``, a thin face over this package. Read in this order, each module with one job:

``split``: where the model is cut. ``"auto"`` asks big_modeling's device-map planner for the most even
split of the model's blocks over the processes (each process a "device"; ``no_split_module_classes``
kept whole), and the first module of each later stage is a split point (:func:`generate_device_map`).
Split points a user names are checked against the model's modules first.

``inputs``: what a traced pipeline can run. torch's tracer fixes the shapes of one micro-batch, so the
example a model was prepared with is kept (:class:`InputSignature`) and every call is checked against
it on the first process, with an error that says what differs, before any stage starts.

``schedule``: :func:`build_pipeline` traces the whole model (every process holds it), splits it and
keeps this process's stage on its device (CPU processes talk over gloo; one GPU per process over
NCCL), under a GPipe schedule. :func:`pippy_forward` runs a batch: the first process feeds it, the
last returns the output, or all do with ``gather_output``.

``prepare``: :func:`prepare_pippy`, the user's one call: checks, agrees across processes, builds, and
makes ``model.forward`` the pipelined forward.

No process is left waiting: whatever fails on one process (a bad split point, a different argument
on one rank, a model the tracer cannot capture, a batch of the wrong shape) is agreed on, and every
process raises the same error. torch is imported by these modules, and torch.distributed.pipelining
only inside functions; nothing here loads with ``import accelerate``.
"""

from accelerate._lazy import lazy_exports

_EXPORTS = {
    "prepare_pippy": "accelerate.backends.pipeline.prepare",
    "build_pipeline": "accelerate.backends.pipeline.schedule",
    "pippy_forward": "accelerate.backends.pipeline.schedule",
    "run_pipeline": "accelerate.backends.pipeline.schedule",
    "generate_device_map": "accelerate.backends.pipeline.split",
    "auto_split_points": "accelerate.backends.pipeline.split",
    "check_split_points": "accelerate.backends.pipeline.split",
    "find_pippy_batch_size": "accelerate.backends.pipeline.inputs",
    "InputSignature": "accelerate.backends.pipeline.inputs",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
