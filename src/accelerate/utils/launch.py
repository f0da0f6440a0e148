"""Public module path ``accelerate.utils.launch``: a lazy face of :mod:`accelerate.commands.launch_helpers`.

Upstream's launch helpers build what ``accelerate launch`` would run, so they live with the command.
"""

from __future__ import annotations

from accelerate._lazy import lazy_exports

_LAZY: dict[str, str] = dict.fromkeys(
    [
        "PrepareForLaunch", "env_var_path_add", "prepare_deepspeed_cmd_env", "prepare_extend_env_parallelism_config",
        "prepare_multi_gpu_env", "prepare_sagemager_args_inputs", "prepare_simple_launcher_cmd_env", "prepare_tpu",
        "setup_fp8_env",
    ],
    "accelerate.commands.launch_helpers",
)  # fmt: skip

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
