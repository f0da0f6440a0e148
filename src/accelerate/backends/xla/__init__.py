"""XLA (TPU, or torch_xla's CPU device under PJRT): one process per XLA device, in one package.

Read in this order, each module with one job:

``strategy``: :class:`XLAStrategy`, the backend itself. Each process holds a full replica of the
model on its XLA device; the gradients are averaged over the processes at the optimizer step (or
earlier, once, when clipping needs the global norm: ``GradientState.is_xla_gradients_synced``), and
prepared loaders are wrapped to feed the device. ``resolve.py`` picks it on an XLA device.

``loader``: :class:`MpDeviceLoaderWrapper` (upstream's TPU loader, named at
``accelerate.data_loader``): each batch moved to the device in one transfer, the recorded graph cut
between steps; it implements ``accelerate.data.resume.DeviceFeedingLoader`` so that
``skip_first_batches`` skips in the prepared loader and feeds the rest the same way.

``checkpoint_io``: :class:`XlaCheckpointIO`, what the strategy's ``checkpoint_io()`` returns: the
default I/O (every process holds the full model, so process 0 writes plain files), with every XLA
tensor copied to the CPU before it is written, as torch_xla's ``xm.save`` does.

``precision``: torch_xla's bf16 switches (``XLA_USE_BF16`` / ``XLA_DOWNCAST_BF16``), which stand in
for autocast on XLA: the strategy sets them when it is built (before a model is moved), and the
launchers put them in their children's environment. No torch at import: the launcher reads it.

What lives elsewhere, and why:

* ``accelerate.state.xla``: whether this process runs on XLA, its device and ordinal from
  torch_xla's runtime, and :class:`~accelerate.state.xla.XLACommunicator` (collectives and the
  barrier through torch_xla). That is environment detection, which ``PartialState`` does before any
  strategy exists, and ``state/`` must not import ``backends/``.
* ``accelerate.utils.xla``: the install hint, cutting the graph (``sync``) and ``xla_to_cpu``, the CPU
  copies torch_xla's ``xm.save`` makes. Used by ``checkpoint_io`` here, and by upstream's
  strategy-less ``utils.save`` / ``save_accelerator_state`` (``checkpointing/single_file.py``), which
  have no strategy to ask.
* ``accelerate.launch.xla`` (``--tpu`` checks and the spawner's command line), ``launch.xla_spawn``
  (the child that calls torch_xla's ``spawn``) and ``launch.xla_notebook`` (``notebook_launcher``'s
  forked spawn): launcher machinery that works on the launch plan's settings and starts processes,
  which the layering gives to ``launch/``. What they know of the backend (the bf16 switches) comes
  from ``precision`` here.
* ``accelerate.utils.torch_xla``: upstream's ``install_xla`` at upstream's path (pip, no backend).

Nothing here is imported by ``import accelerate``; the names below load their module on first use.
"""

from accelerate._lazy import lazy_exports

_EXPORTS = {
    "XLAStrategy": "accelerate.backends.xla.strategy",
    "XlaCheckpointIO": "accelerate.backends.xla.checkpoint_io",
    "MpDeviceLoaderWrapper": "accelerate.backends.xla.loader",
    "apply_bf16_env": "accelerate.backends.xla.precision",
    "bf16_env": "accelerate.backends.xla.precision",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
