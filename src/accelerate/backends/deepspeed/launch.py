"""The launcher's DeepSpeed settings: what ``accelerate launch --use_deepspeed`` passes its children, read back.

The launcher writes DeepSpeed's settings (``--zero_stage``, ``--offload_optimizer_device``, a config
file's ``deepspeed_config`` section, ...) as the ``ACCELERATE_DEEPSPEED_*`` variables of the env
contract (:mod:`accelerate.config.env`), for the children only when DeepSpeed is on. In the child,
:func:`resolve_deepspeed_plugins` (called once by ``Accelerator(...)``) reads them back: with no
plugin from the code it builds one from them, and a plugin the code built takes them for the
fields it left unset. The plugin itself never reads the environment.

No torch at import: the launcher imports the tables below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accelerate.config.env import LaunchEnv, read_launch_env

if TYPE_CHECKING:
    from accelerate.backends.deepspeed.plugin import DeepSpeedPlugin
    from accelerate.config.config_file import LaunchConfig

# DeepSpeed's settings in the env contract (LaunchEnv fields): the children get them only with DeepSpeed on.
DEEPSPEED_ENV = (
    "deepspeed_config_file", "zero_stage", "offload_optimizer_device", "offload_param_device",
    "offload_optimizer_nvme_path", "offload_param_nvme_path", "gradient_clipping", "zero3_init_flag",
    "zero3_save_16bit_model", "deepspeed_moe_layer_cls_names",
)  # fmt: skip
# Settings that only tune DeepSpeed: given without it, they would be silently ignored (the launcher refuses).
DEEPSPEED_ONLY = (*DEEPSPEED_ENV, "deepspeed_multinode_launcher")
# The DeepSpeedPlugin field each contract field fills, where the names differ.
_PLUGIN_FIELD = {
    "deepspeed_config_file": "hf_ds_config",
    "deepspeed_moe_layer_cls_names": "transformer_moe_cls_names",
}


def config_file_value(config: LaunchConfig, key: str) -> Any:
    """A config file's ``deepspeed_config`` key; None unless the file's ``distributed_type`` is DEEPSPEED."""
    if config.distributed_type != "DEEPSPEED":
        return None
    value = (config.deepspeed_config or {}).get(key)
    # upstream's questionnaire writes "none" for unset paths
    return None if value in ("none", "") and key.endswith(("_file", "_path")) else value


def launched_fields(env: LaunchEnv) -> dict[str, Any]:
    """The launcher's DeepSpeed settings by DeepSpeedPlugin field name (None: not launched with it)."""
    fields = {_PLUGIN_FIELD.get(name, name): getattr(env, name) for name in DEEPSPEED_ENV}
    fields["gradient_accumulation_steps"] = env.gradient_accumulation_steps  # the run's, DeepSpeed's too
    return fields


def resolve_deepspeed_plugins(
    plugin: Any, plugins: Any, *, launched: bool, launch_env: LaunchEnv | None = None
) -> dict[str, DeepSpeedPlugin] | None:
    """The named plugins of this run (the first one selected), or None without DeepSpeed.

    ``Accelerator(deepspeed_plugin=...)`` takes one plugin or a dict; ``deepspeed_plugins=`` a dict;
    ``accelerate launch --use_deepspeed`` without either gives one ``DeepSpeedPlugin()`` from its flags.
    Each plugin's unset fields take the launcher's settings (``launch_env``; default: this process's
    environment, read here and only here).
    """
    from accelerate.backends.deepspeed.plugin import DeepSpeedPlugin

    if plugin is not None and plugins is not None:
        raise ValueError(
            "Accelerator got both deepspeed_plugin and deepspeed_plugins; pass one of them "
            "(deepspeed_plugins={'name': DeepSpeedPlugin(...), ...} for several)."
        )
    given = plugins if plugins is not None else plugin
    if given is None:
        if not launched:
            return None
        given = DeepSpeedPlugin()
    named = dict(given) if isinstance(given, dict) else {"default": given}
    if not named:
        raise ValueError("Accelerator(deepspeed_plugins={}) is empty; pass at least one DeepSpeedPlugin.")
    for name, value in named.items():
        if not isinstance(value, DeepSpeedPlugin):
            raise TypeError(
                f"Accelerator deepspeed plugin {name!r} is a {type(value).__name__}; pass a DeepSpeedPlugin(...)."
            )
    fields = launched_fields(read_launch_env() if launch_env is None else launch_env)
    for value in named.values():
        value._fill_unset_from_launch(fields)
        value._unselect()
    next(iter(named.values())).select(_from_accelerator_state=True)
    return named
