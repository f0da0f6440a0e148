"""``DeepSpeedPlugin``: upstream's fields and defaults, turned into one DeepSpeed config dict.

Pure data: the plugin never reads the environment. Fields left unset (None) take upstream's
defaults when the plugin is built; when an Accelerator takes the plugin,
:func:`accelerate.backends.deepspeed.launch.resolve_deepspeed_plugins` hands it the launcher's
settings (``accelerate launch --use_deepspeed --zero_stage 3``), and the fields the code left unset
take those instead (:meth:`DeepSpeedPlugin._fill_unset_from_launch`). So a plugin read before any
Accelerator shows its own fields and upstream's defaults; through ``accelerator.state.deepspeed_plugin``
it shows the launcher's settings as well, as upstream's does.

With ``hf_ds_config`` (a JSON path or dict) the file is the base and the plugin's fields fill its
``"auto"`` values; what is still ``"auto"`` is filled at ``prepare`` (see
:mod:`accelerate.backends.deepspeed.setup`). No deepspeed import here: building a plugin is cheap.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from accelerate.backends.deepspeed.config import AUTO, HfDeepSpeedConfig, Known, fill_auto, set_value
from accelerate.logging import get_logger

if TYPE_CHECKING:
    from accelerate.utils.dataclasses import GradientAccumulationPlugin

logger = get_logger(__name__)

_OFFLOAD_DEVICES = ("none", "cpu", "nvme")


# Fields the launcher can set, with upstream's default for each when neither the code, the launcher
# nor a config file does (with a config file, the file's values count instead of these defaults).
_DEFAULTS: dict[str, Any] = {
    "gradient_accumulation_steps": AUTO,
    "gradient_clipping": None,
    "zero_stage": 2,
    "offload_optimizer_device": "none",
    "offload_param_device": "none",
    "offload_optimizer_nvme_path": "none",
    "offload_param_nvme_path": "none",
    "zero3_save_16bit_model": False,
}
# Every field the launcher's settings may fill when the code leaves it unset.
LAUNCHABLE_FIELDS = ("hf_ds_config", *_DEFAULTS, "zero3_init_flag", "transformer_moe_cls_names")


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
    # The launchable fields as the code passed them, and as the first build left them: what
    # _fill_unset_from_launch starts again from (a field changed since counts as the code's).
    _given: dict[str, Any] = field(init=False, repr=False, compare=False, default_factory=dict)
    _built: dict[str, Any] = field(init=False, repr=False, compare=False, default_factory=dict)
    _launch_applied: bool = field(init=False, repr=False, compare=False, default=False)

    def __post_init__(self) -> None:
        if self.enable_msamp:
            from accelerate.utils.errors import requires_hardware

            raise requires_hardware(
                "DeepSpeedPlugin(enable_msamp=True)", "MS-AMP and an fp8-capable NVIDIA GPU"
            )
        self._given = {name: getattr(self, name) for name in LAUNCHABLE_FIELDS}
        self._build({})
        self._built = {name: getattr(self, name) for name in LAUNCHABLE_FIELDS}

    # --- building the config ----------------------------------------------------------------------
    def _build(self, launched: Mapping[str, Any]) -> None:
        """Fills the unset fields (``launched``: the launcher's values by field name) and builds the config."""
        if self.hf_ds_config is None and launched.get("hf_ds_config"):
            self.hf_ds_config = launched["hf_ds_config"]
        self._fill_fields_from(launched)
        if self.hf_ds_config is None:
            self.hf_ds_config = HfDeepSpeedConfig(self._config_from_fields())
        elif not isinstance(self.hf_ds_config, HfDeepSpeedConfig):
            self.hf_ds_config = HfDeepSpeedConfig(self.hf_ds_config)
        self.deepspeed_config = self.hf_ds_config.config
        self._fill_file_autos()
        # A zero_stage left to upstream's default may still come from the launcher: its check waits
        # for _fill_unset_from_launch, so a plugin built under `--zero_stage 3` does not warn first.
        if self._given["zero_stage"] is not None or self._given["hf_ds_config"] is not None:
            self._check_zero3_init()

    def _fill_unset_from_launch(self, launched: Mapping[str, Any]) -> None:
        """Rebuilds with the launcher's values (by field name) for the fields the code left unset.

        Called once, when an Accelerator takes the plugin (see ``backends/deepspeed/launch.py``). A
        field the code set after construction keeps its value; a config file the code gave keeps
        its dict (transformers holds it), filling more of its "auto" values; a dict built from the
        fields is refilled in place.
        """
        if self._launch_applied:
            return
        self._launch_applied = True
        unset = {name for name, value in self._given.items() if value is None}
        untouched = {name for name in LAUNCHABLE_FIELDS if getattr(self, name) is self._built[name]}
        fills = {
            name for name, value in launched.items() if value is not None and name in (unset & untouched)
        }
        if fills:
            config = self.deepspeed_config
            # Built from the fields (no file from the code): rebuilt, from a launched file if there is one.
            from_fields = self._given["hf_ds_config"] is None and "hf_ds_config" in untouched
            for name in untouched:
                if name != "hf_ds_config" or from_fields:
                    setattr(self, name, self._given[name])
            self._build(launched)
            if from_fields:  # keep the dict's identity for whoever holds it
                config.clear()
                config.update(self.deepspeed_config)
                self.hf_ds_config.config = self.deepspeed_config = config
        self._check_zero3_init()
        if self.zero_stage is None:
            raise ValueError(
                'The DeepSpeed config sets zero_optimization.stage to "auto", and neither the code nor the launcher '
                "sets it: pass DeepSpeedPlugin(zero_stage=...), launch with --zero_stage, or write the stage in the file."
            )

    def _fill_fields_from(self, launched: Mapping[str, Any]) -> None:
        """Unset fields: the launcher's value, else (without a config file) upstream's default."""
        from_file = self.hf_ds_config is not None
        for name, default in _DEFAULTS.items():
            if getattr(self, name) is None:
                value = launched.get(name)
                setattr(self, name, value if value is not None else (None if from_file else default))
        if self.zero3_init_flag is None:
            self.zero3_init_flag = bool(launched.get("zero3_init_flag"))
        if self.transformer_moe_cls_names is None:
            self.transformer_moe_cls_names = launched.get("transformer_moe_cls_names")
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
            stage = self.get_value("zero_optimization.stage", 0)
            # "auto" stays unknown (None) until the launcher's --zero_stage may fill it.
            self.zero_stage = None if stage == AUTO else int(stage)
        self.hf_ds_config.set_stage_and_offload()

    def _check_zero3_init(self) -> None:
        if self.zero3_init_flag and self.zero_stage is not None and self.zero_stage != 3:
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
            from transformers.integrations.deepspeed import HfDeepSpeedConfig as TransformersConfig
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
