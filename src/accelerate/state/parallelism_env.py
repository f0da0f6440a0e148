"""The run's ``ParallelismConfig`` when the script passes none: from the launcher, or from the older
``torch_tp_plugin``.

``accelerate launch --use_parallelism_config`` (or a config file's ``parallelism_config`` section)
writes ``ACCELERATE_USE_PARALLELISM_CONFIG=true`` and the ``PARALLELISM_CONFIG_*`` sizes (the env
contract, :mod:`accelerate.config.env`). :func:`resolve_parallelism_config` turns them into a
``ParallelismConfig`` once, in ``connect()``. A ``ParallelismConfig()`` the script builds takes the
same sizes for those it was not given (as upstream, through ``config.env.parallelism_defaults``), so
an explicit config does not drop the launcher's ``tp_size``.

Which one wins, as upstream: ``Accelerator(parallelism_config=...)``, then ``torch_tp_plugin``
(``ParallelismConfig(tp_size=plugin.tp_size)``, with upstream's FutureWarning), then the launcher's.
The script's explicit config replaces the launcher's without a warning, as upstream.
"""

from __future__ import annotations

import warnings
from typing import Any

from accelerate.config.env import LaunchEnv
from accelerate.state.parallelism import ParallelismConfig

TP_PLUGIN_DEPRECATION = (
    "`TorchTensorParallelPlugin` is deprecated and will be removed in a future version of Accelerate. "
    "Please use the `ParallelismConfig` with `tp_size` instead."
)


def parallelism_config_from_env(launch: LaunchEnv) -> ParallelismConfig | None:
    """The launcher's ``ParallelismConfig`` (None unless it set ``ACCELERATE_USE_PARALLELISM_CONFIG``).

    Sizes it did not write are 1; the context-parallel options become a ``cp_handler`` and the
    sequence-parallel ones an ``sp_handler``, each only where that dimension is larger than 1.

    Example:
        >>> parallelism_config_from_env(read_launch_env({"ACCELERATE_USE_PARALLELISM_CONFIG": "true",
        ...                                              "PARALLELISM_CONFIG_TP_SIZE": "2"})).tp_size
        2
    """
    if not launch.use_parallelism_config:
        return None
    cp_size = launch.parallelism_config_cp_size
    sp_size = launch.parallelism_config_sp_size
    return ParallelismConfig(
        dp_replicate_size=launch.parallelism_config_dp_replicate_size,
        dp_shard_size=launch.parallelism_config_dp_shard_size,
        tp_size=launch.parallelism_config_tp_size,
        cp_size=cp_size,
        cp_backend=launch.parallelism_config_cp_backend,
        sp_size=sp_size,
        sp_backend=launch.parallelism_config_sp_backend,
        cp_handler=_cp_handler(launch) if (cp_size or 1) > 1 else None,
        sp_handler=_sp_handler(launch) if (sp_size or 1) > 1 else None,
        pp_size=launch.parallelism_config_pp_size,
        pp_schedule=launch.parallelism_config_pp_schedule,
        ep_size=launch.parallelism_config_ep_size,
        pp_microbatches=launch.parallelism_config_pp_microbatches,
    )


def _cp_handler(launch: LaunchEnv) -> Any:
    from accelerate.utils.parallel_configs import TorchContextParallelConfig

    return TorchContextParallelConfig(cp_comm_strategy=launch.parallelism_config_cp_comm_strategy)  # type: ignore[arg-type]


def _sp_handler(launch: LaunchEnv) -> Any:
    from accelerate.utils.parallel_configs import DeepSpeedSequenceParallelConfig

    length = launch.parallelism_config_sp_seq_length
    if length is not None and not length.strip().isdigit():
        raise ValueError(
            f"Environment variable PARALLELISM_CONFIG_SP_SEQ_LENGTH={length!r} must be a whole number of tokens "
            "(--parallelism_config_sp_seq_length N)."
        )
    return DeepSpeedSequenceParallelConfig(
        sp_seq_length=int(length) if length is not None else None,
        sp_seq_length_is_variable=launch.parallelism_config_sp_seq_length_is_variable,
        sp_attn_implementation=launch.parallelism_config_sp_attn_implementation,
    )


def parallelism_config_from_tp_plugin(torch_tp_plugin: Any) -> ParallelismConfig:
    """``ParallelismConfig(tp_size=torch_tp_plugin.tp_size)``: what the deprecated plugin means now."""
    tp_size = getattr(torch_tp_plugin, "tp_size", None)
    if isinstance(tp_size, bool) or not isinstance(tp_size, int):
        raise TypeError(
            f"torch_tp_plugin=... needs a TorchTensorParallelPlugin (with an integer tp_size), got "
            f"{type(torch_tp_plugin).__name__}. Better: pass parallelism_config=ParallelismConfig(tp_size=N)."
        )
    return ParallelismConfig(tp_size=tp_size)


def resolve_parallelism_config(
    parallelism_config: Any, torch_tp_plugin: Any = None, launch: LaunchEnv | None = None
) -> Any:
    """The run's ParallelismConfig: the script's, else the TP plugin's, else the launcher's (or None).

    ``launch=None`` (a direct ``AcceleratorState(...)``) reads no launcher settings, as upstream,
    where only the Accelerator builds one from the environment.
    """
    if torch_tp_plugin is not None:
        warnings.warn(TP_PLUGIN_DEPRECATION, FutureWarning, stacklevel=4)
    if parallelism_config is not None:
        return parallelism_config
    if torch_tp_plugin is not None:
        return parallelism_config_from_tp_plugin(torch_tp_plugin)
    return parallelism_config_from_env(launch) if launch is not None else None
