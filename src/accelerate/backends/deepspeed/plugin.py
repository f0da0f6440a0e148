"""``DeepSpeedPlugin``: upstream's fields and defaults, turned into one DeepSpeed config dict.

Unset fields take the launcher's settings (``accelerate launch --use_deepspeed --zero_stage 3``,
read through :func:`accelerate.config.env.read_launch_env`), then upstream's defaults. With
``hf_ds_config`` (a JSON path or dict) the file is the base and the plugin's fields fill its
``"auto"`` values; what is still ``"auto"`` is filled at ``prepare`` (see
:mod:`accelerate.backends.deepspeed.setup`). No deepspeed import here: building a plugin is cheap.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from accelerate.backends.deepspeed.config import AUTO, HfDeepSpeedConfig, Known, fill_auto, set_value
from accelerate.logging import get_logger

if TYPE_CHECKING:
    from accelerate.utils.dataclasses import GradientAccumulationPlugin

logger = get_logger(__name__)

_OFFLOAD_DEVICES = ("none", "cpu", "nvme")


def _env() -> Any:
    from accelerate.config.env import read_launch_env

    return read_launch_env()


def _flag(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


@dataclass
class DeepSpeedPlugin:
    """DeepSpeed ZeRO settings for ``Accelerator(deepspeed_plugin=...)``.

    Example:
        >>> plugin = DeepSpeedPlugin(zero_stage=3, gradient_clipping=1.0)
        >>> accelerator = Accelerator(deepspeed_plugin=plugin)
    """

    hf_ds_config: Any = None
    gradient_accumulation_steps: Any = None
    gradient_clipping: Any = None
    zero_stage: Any = None
    is_train_batch_min: bool = True
    offload_optimizer_device: Any = None
    offload_param_device: Any = None
    offload_optimizer_nvme_path: Any = None
    offload_param_nvme_path: Any = None
    zero3_init_flag: Any = None
    zero3_save_16bit_model: Any = None
    transformer_moe_cls_names: Any = None
    enable_msamp: Any = None
    msamp_opt_level: Any = None
    deepspeed_config: dict[str, Any] = field(init=False, repr=False, default_factory=dict)
    _selected: bool = field(init=False, repr=False, default=False)

    def __post_init__(self) -> None:
        env = _env()
        if self.hf_ds_config is None and env.deepspeed_config_file:
            self.hf_ds_config = env.deepspeed_config_file
        if self.enable_msamp:
            from accelerate.utils.errors import requires_hardware

            raise requires_hardware(
                "DeepSpeedPlugin(enable_msamp=True)", "MS-AMP and an fp8-capable NVIDIA GPU"
            )
        self._fill_fields_from(env)
        if self.hf_ds_config is None:
            self.hf_ds_config = HfDeepSpeedConfig(self._config_from_fields())
        elif not isinstance(self.hf_ds_config, HfDeepSpeedConfig):
            self.hf_ds_config = HfDeepSpeedConfig(self.hf_ds_config)
        self.deepspeed_config = self.hf_ds_config.config
        self._fill_file_autos()
        self._check_zero3_init()

    # --- building the config ----------------------------------------------------------------------
    def _fill_fields_from(self, env: Any) -> None:
        """Unset fields: the launcher's value, else (without a config file) upstream's default."""
        from_file = self.hf_ds_config is not None
        defaults: dict[str, Any] = {
            "gradient_accumulation_steps": (env.gradient_accumulation_steps, AUTO),
            "gradient_clipping": (env.gradient_clipping, None),
            "zero_stage": (env.zero_stage, 2),
            "offload_optimizer_device": (env.offload_optimizer_device, "none"),
            "offload_param_device": (env.offload_param_device, "none"),
            "offload_optimizer_nvme_path": (env.offload_optimizer_nvme_path, "none"),
            "offload_param_nvme_path": (env.offload_param_nvme_path, "none"),
            "zero3_save_16bit_model": (env.zero3_save_16bit_model, False),
        }
        for name, (launched, default) in defaults.items():
            if getattr(self, name) is None:
                setattr(self, name, launched if launched is not None else (None if from_file else default))
        if self.zero3_init_flag is None:
            self.zero3_init_flag = bool(env.zero3_init_flag)
        if self.transformer_moe_cls_names is None:
            self.transformer_moe_cls_names = env.deepspeed_moe_layer_cls_names
        if self.gradient_clipping is not None and self.gradient_clipping != AUTO:
            self.gradient_clipping = float(self.gradient_clipping)
        if self.zero_stage is not None and self.zero_stage != AUTO:
            self.zero_stage = int(self.zero_stage)
            if self.zero_stage not in (0, 1, 2, 3):
                raise ValueError(f"DeepSpeedPlugin(zero_stage={self.zero_stage}) must be 0, 1, 2 or 3.")
        self.zero3_save_16bit_model = (
            None if self.zero3_save_16bit_model is None else _flag(self.zero3_save_16bit_model)
        )
        for name in ("offload_optimizer_device", "offload_param_device"):
            value = getattr(self, name)
            if value is not None and value not in _OFFLOAD_DEVICES:
                raise ValueError(
                    f"DeepSpeedPlugin({name}={value!r}) must be one of {', '.join(_OFFLOAD_DEVICES)}."
                )

    def _config_from_fields(self) -> dict[str, Any]:
        zero: dict[str, Any] = {
            "stage": self.zero_stage,
            "offload_optimizer": {"device": self.offload_optimizer_device},
            "offload_param": {"device": self.offload_param_device},
            "stage3_gather_16bit_weights_on_model_save": self.zero3_save_16bit_model,
        }
        if self.offload_optimizer_device == "nvme":
            zero["offload_optimizer"]["nvme_path"] = self.offload_optimizer_nvme_path
        if self.offload_param_device == "nvme":
            zero["offload_param"]["nvme_path"] = self.offload_param_nvme_path
        config: dict[str, Any] = {
            "train_batch_size": AUTO,
            "train_micro_batch_size_per_gpu": AUTO,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
            "zero_optimization": zero,
            "steps_per_print": 2**62,  # DeepSpeed's own progress lines would flood the user's output
        }
        # DeepSpeed clips at 1.0 unless told otherwise; a plugin that does not ask for clipping gets
        # none, as the same loop in plain torch would.
        config["gradient_clipping"] = self.gradient_clipping or 0.0
        return config

    def _fill_file_autos(self) -> None:
        """A config file's "auto" keys that the plugin's own fields answer; its concrete values set the fields."""
        known: dict[str, Known] = {}
        pairs = {
            "gradient_accumulation_steps": "gradient_accumulation_steps",
            "gradient_clipping": "gradient_clipping",
            "zero_optimization.stage": "zero_stage",
            "zero_optimization.offload_optimizer.device": "offload_optimizer_device",
            "zero_optimization.offload_param.device": "offload_param_device",
            "zero_optimization.offload_optimizer.nvme_path": "offload_optimizer_nvme_path",
            "zero_optimization.offload_param.nvme_path": "offload_param_nvme_path",
            "zero_optimization.stage3_gather_16bit_weights_on_model_save": "zero3_save_16bit_model",
        }
        for key, name in pairs.items():
            value = getattr(self, name)
            if value is not None and value != AUTO:
                known[key] = Known(value, f"DeepSpeedPlugin({name}=...) or its launch flag", must_match=False)
        fill_auto(self.deepspeed_config, known, origin="the DeepSpeed config")
        self.deepspeed_config.setdefault("steps_per_print", 2**62)
        for key, name in pairs.items():
            value = self.get_value(key)
            if value is not None and value != AUTO:
                setattr(self, name, value)
        if self.zero_stage is None:
            self.zero_stage = int(self.get_value("zero_optimization.stage", 0))
        self.hf_ds_config.set_stage_and_offload()

    def _check_zero3_init(self) -> None:
        if self.zero3_init_flag and self.zero_stage != 3:
            import warnings

            warnings.warn(
                f"DeepSpeedPlugin(zero3_init_flag=True) only applies to ZeRO stage 3, and zero_stage is "
                f"{self.zero_stage}; it is turned off.",
                stacklevel=3,
            )
            self.zero3_init_flag = False

    # --- upstream's helpers -------------------------------------------------------------------------
    def get_value(self, ds_key_long: str, default: Any = None) -> Any:
        return self.hf_ds_config.get_value(ds_key_long, default)

    def is_auto(self, ds_key_long: str) -> bool:
        return bool(self.get_value(ds_key_long) == AUTO)

    def fill_match(
        self, ds_key_long: str, mismatches: list[str] | None = None, must_match: bool = True, **kwargs: Any
    ) -> None:
        """Fills ``ds_key_long`` from ``kwargs[ds_key_long]`` when "auto"; records a contradiction otherwise."""
        mismatches = [] if mismatches is None else mismatches
        if ds_key_long not in kwargs:
            return
        found = fill_auto(
            self.deepspeed_config, {ds_key_long: Known(kwargs[ds_key_long], "the Accelerator", must_match)},
            origin="the DeepSpeed config",
        )  # fmt: skip
        mismatches.extend(found)

    def deepspeed_config_process(
        self, prefix: str = "", mismatches: list[str] | None = None, config: dict[str, Any] | None = None,
        must_match: bool = True, **kwargs: Any,
    ) -> None:  # fmt: skip
        """Fills every "auto" key named in ``kwargs``; contradictions raise, naming both values."""
        found: list[str] = [] if mismatches is None else mismatches
        known = {key: Known(value, "the Accelerator", must_match) for key, value in kwargs.items()}
        found += fill_auto(
            self.deepspeed_config if config is None else config, known, origin="the DeepSpeed config"
        )
        if found and mismatches is None:
            raise ValueError("The DeepSpeed config contradicts the Accelerator:\n- " + "\n- ".join(found))

    def set_mixed_precision(self, mixed_precision: str) -> None:
        """Turns on DeepSpeed's bf16/fp16 for the Accelerator's mode; a config enabling the other refuses."""
        config = self.deepspeed_config
        wanted = {"fp16": "fp16", "bf16": "bf16"}.get(mixed_precision)
        for mode in ("fp16", "bf16"):
            enabled = self.get_value(f"{mode}.enabled")
            if enabled == AUTO:
                set_value(config, f"{mode}.enabled", mode == wanted)
            elif _flag(enabled) and mode != wanted:
                raise ValueError(
                    f"The DeepSpeed config sets {mode}.enabled=true, but the Accelerator's mixed_precision is "
                    f"{mixed_precision!r}. Pass mixed_precision={mode!r} (or --mixed_precision {mode}), or set "
                    f'"{mode}": {{"enabled": "auto"}} in the config.'
                )
        if wanted is not None and not _flag(self.get_value(f"{wanted}.enabled")):
            if f"{wanted}" in config and self.get_value(f"{wanted}.enabled") is not None:
                raise ValueError(
                    f"The DeepSpeed config sets {wanted}.enabled=false, but the Accelerator's mixed_precision is "
                    f'{mixed_precision!r}. Set it to true or "auto", or drop mixed_precision.'
                )
            set_value(config, f"{wanted}.enabled", True)

    def set_deepspeed_weakref(self) -> None:
        """Makes transformers' ``from_pretrained`` build ZeRO-3 models partitioned (when installed)."""
        if not (self.zero3_init_flag and self.zero_stage == 3):
            return
        try:
            from transformers.integrations import HfDeepSpeedConfig as TransformersConfig
        except ImportError:
            return
        self.dschf = TransformersConfig(self.deepspeed_config)

    def is_zero3_init_enabled(self) -> bool:
        return bool(self.zero3_init_flag)

    @contextlib.contextmanager
    def zero3_init_context_manager(self, enable: bool = False) -> Iterator[None]:
        """Turns ``zero3_init_flag`` to ``enable`` for the block (transformers reads it)."""
        old = self.zero3_init_flag
        self.zero3_init_flag = enable
        self.set_deepspeed_weakref()
        try:
            yield
        finally:
            self.zero3_init_flag = old

    def set_moe_leaf_modules(self, model: Any) -> None:
        """Marks the MoE layer classes named in ``transformer_moe_cls_names`` as ZeRO-3 leaf modules."""
        if not self.transformer_moe_cls_names:
            return
        from deepspeed.utils import set_z3_leaf_modules

        names = {n.strip() for n in str(self.transformer_moe_cls_names).split(",") if n.strip()}
        classes = {type(m) for m in model.modules() if type(m).__name__ in names}
        missing = names - {c.__name__ for c in classes}
        if missing:
            raise ValueError(
                f"transformer_moe_cls_names names {sorted(missing)}, which the model does not contain."
            )
        set_z3_leaf_modules(model, list(classes))

    def select(self, _from_accelerator_state: bool = False) -> None:
        """Makes this plugin the active one (see ``Accelerator.state.select_deepspeed_plugin``)."""
        if not _from_accelerator_state:
            raise ValueError(
                "A DeepSpeedPlugin is selected through the Accelerator: "
                "accelerator.state.select_deepspeed_plugin(name)."
            )
        self._selected = True

    def _unselect(self) -> None:
        self._selected = False

    @property
    def selected(self) -> bool:
        return self._selected

    @selected.setter
    def selected(self, value: bool) -> None:
        raise NotImplementedError(
            "DeepSpeedPlugin.selected is read-only; use accelerator.state.select_deepspeed_plugin(name)."
        )

    def zero3_init(self) -> contextlib.AbstractContextManager[Any]:
        """``deepspeed.zero.Init`` for this config when ``zero3_init_flag`` is on (else a null context).

        Example:
            >>> with plugin.zero3_init():
            ...     model = BigModel()  # parameters are partitioned as they are created
        """
        if not (self.zero3_init_flag and self.zero_stage == 3):
            return contextlib.nullcontext()
        from accelerate.backends.deepspeed.runtime import import_deepspeed

        deepspeed = import_deepspeed()
        # Init reads the ZeRO section and the dtype; the batch values are still "auto" until prepare().
        config: dict[str, Any] = {
            "zero_optimization": self.deepspeed_config.get("zero_optimization", {}),
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 1,
        }
        for mode in ("fp16", "bf16"):
            enabled = self.get_value(f"{mode}.enabled")
            if enabled != AUTO and _flag(enabled):
                config[mode] = {"enabled": True}
        context: contextlib.AbstractContextManager[Any] = deepspeed.zero.Init(config_dict_or_path=config)
        return context


def get_active_deepspeed_plugin(state: Any) -> Any:
    """The selected DeepSpeedPlugin of ``state`` (an AcceleratorState); raises without DeepSpeed."""
    plugins = getattr(state, "deepspeed_plugins", None)
    if not plugins:
        raise ValueError(
            "No DeepSpeed plugin is active: pass Accelerator(deepspeed_plugin=DeepSpeedPlugin(...)) or launch "
            "with `accelerate launch --use_deepspeed`."
        )
    return next(plugin for plugin in plugins.values() if plugin.selected)


def resolve_deepspeed_plugins(
    plugin: Any, plugins: Any, *, launched: bool
) -> dict[str, DeepSpeedPlugin] | None:
    """The named plugins of this run (the first one selected), or None without DeepSpeed.

    ``Accelerator(deepspeed_plugin=...)`` takes one plugin or a dict; ``deepspeed_plugins=`` a dict;
    ``accelerate launch --use_deepspeed`` without either gives one ``DeepSpeedPlugin()`` from its flags.
    """
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
    for value in named.values():
        value._unselect()
    next(iter(named.values())).select(_from_accelerator_state=True)
    return named


def deepspeed_accumulation(
    plugins: dict[str, DeepSpeedPlugin], accumulation: GradientAccumulationPlugin, mixed_precision: str
) -> GradientAccumulationPlugin:
    """The accumulation of a DeepSpeed run: the active config's value wins, "auto" takes the Accelerator's.

    Also sets each plugin's fp16/bf16 from ``mixed_precision``. As upstream, a concrete config value
    that differs from the Accelerator's (``gradient_accumulation_steps=`` or the
    ``GradientAccumulationPlugin``, e.g. transformers' Trainer always passes ``num_steps=1``) is not
    an error: it warns and the Accelerator follows the config, so the engine and the Accelerator agree.
    Returns ``accumulation`` itself, or a copy of it with ``num_steps`` replaced.
    """
    active = next(iter(plugins.values()))
    value = active.get_value("gradient_accumulation_steps")
    if value is not None and value != AUTO and int(value) != accumulation.num_steps:
        logger.warning(
            f"Gradient accumulation steps mismatch: GradientAccumulationPlugin has {accumulation.num_steps}, "
            f"DeepSpeed config has {int(value)}. Using DeepSpeed's value."
        )
        accumulation = dataclasses.replace(accumulation, num_steps=int(value))
    for plugin in plugins.values():
        plugin.set_mixed_precision(mixed_precision)
        if plugin.get_value("gradient_accumulation_steps") in (None, AUTO):
            set_value(plugin.deepspeed_config, "gradient_accumulation_steps", accumulation.num_steps)
            plugin.gradient_accumulation_steps = accumulation.num_steps
    return accumulation
