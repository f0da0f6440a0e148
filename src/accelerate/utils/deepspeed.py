"""`accelerate.utils.deepspeed`: upstream's address for the DeepSpeed helpers.

Nothing lives here: the wrappers and stand-ins come from :mod:`accelerate.backends.deepspeed.wrappers`,
the config object from :mod:`accelerate.backends.deepspeed.config` and the active plugin from
:mod:`accelerate.backends.deepspeed.plugin`; each loads on first use (no torch, no deepspeed here).
"""

from accelerate._lazy import lazy_exports

_WRAPPERS = "accelerate.backends.deepspeed.wrappers"
_EXPORTS = {
    "DeepSpeedEngineWrapper": _WRAPPERS,
    "DeepSpeedOptimizerWrapper": _WRAPPERS,
    "DeepSpeedSchedulerWrapper": _WRAPPERS,
    "DummyOptim": _WRAPPERS,
    "DummyScheduler": _WRAPPERS,
    "map_pytorch_optim_to_deepspeed": _WRAPPERS,
    "HfDeepSpeedConfig": "accelerate.backends.deepspeed.config",
    "get_active_deepspeed_plugin": "accelerate.backends.deepspeed.plugin",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
