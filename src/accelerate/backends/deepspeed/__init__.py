"""DeepSpeed ZeRO (stages 0-3), in one package: the only place that imports ``deepspeed``.

Read in this order, each module with one job:

``config``: :class:`HfDeepSpeedConfig`, a DeepSpeed JSON config (a file or a dict) with dotted-key
lookup, and :func:`fill_auto`, the one place where ``"auto"`` values get what the Accelerator knows
(a concrete value that contradicts a setting both sides make is refused, naming both). Pure data.

``plugin``: :class:`DeepSpeedPlugin`, upstream's settings dataclass (what
``accelerate.utils.DeepSpeedPlugin`` names), turned into one config dict; the accumulation and
precision a run's plugins agree with the Accelerator on (``deepspeed_accumulation``); and the active
plugin of several (``get_active_deepspeed_plugin``). The plugin is pure data: it never reads the
environment.

``launch``: the ``ACCELERATE_DEEPSPEED_*`` part of the launcher's env contract, and reading it back:
:func:`resolve_deepspeed_plugins` (called once by ``Accelerator(...)``) names the run's plugins,
builds one from the launcher's flags when the code passed none, and fills the fields a plugin left
unset from the launcher's settings. No torch at import: the launcher reads its tables.

``runtime``: importing ``deepspeed`` (a missing install names the pip command) and recognising its
engine. ``setup``: at ``prepare``, the config's remaining ``"auto"`` values completed from what the
Accelerator knows (batch size, accumulation, world size, optimizer, model) and the engine built with
``deepspeed.initialize``. ``wrappers``: what the user's loop holds (the engine, optimizer and scheduler
wrappers, whose ``step`` the engine takes inside ``accelerator.backward``) and the stand-ins
``DummyOptim`` / ``DummyScheduler`` for an optimizer and scheduler the config file defines.

``strategy``: :class:`DeepSpeedStrategy`, the backend itself: ``prepare`` builds one engine from the
model, the optimizer and the scheduler together (reading what was prepared before from the
Accelerator's registry, :class:`~accelerate.backends.registry.Prepared`), ``backward`` drives the
engine, and clipping is the engine's. ``checkpoint_io``: :class:`EngineCheckpointIO`, what
``Strategy.checkpoint_io()`` returns once there are engines: each engine's own checkpoint inside
``save_state``'s manifest-committed folder, so ``checkpointing/`` itself knows no backend.
``gathered``: ``GatheredParameters``, whole ZeRO-3 parameters for a moment (a no-op elsewhere).

``accelerate.utils.deepspeed``, ``accelerate.utils.DeepSpeedPlugin`` and
``accelerate.utils.GatheredParameters`` are upstream's addresses for these names. Nothing here is
imported by ``import accelerate``; the names below load their module on first use.
"""

from accelerate._lazy import lazy_exports

_EXPORTS = {
    "DeepSpeedPlugin": "accelerate.backends.deepspeed.plugin",
    "HfDeepSpeedConfig": "accelerate.backends.deepspeed.config",
    "DeepSpeedStrategy": "accelerate.backends.deepspeed.strategy",
    "EngineCheckpointIO": "accelerate.backends.deepspeed.checkpoint_io",
    "resolve_deepspeed_plugins": "accelerate.backends.deepspeed.launch",
    "import_deepspeed": "accelerate.backends.deepspeed.runtime",
    "GatheredParameters": "accelerate.backends.deepspeed.gathered",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
