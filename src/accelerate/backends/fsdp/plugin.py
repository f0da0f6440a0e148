"""`FullyShardedDataParallelPlugin`: upstream's FSDP settings, and the ``FSDP_*`` variables that carry them.

The engine (``accelerate.backends.fsdp.strategy``) always runs FSDP2 (``fully_shard``). FSDP1 settings are
kept as given and translated there: a sharding strategy becomes ``reshard_after_forward`` and a mesh
shape (see :func:`fsdp2_layout`). ``accelerate launch --use_fsdp --fsdp_*`` (and a config file's
``fsdp_config``) write the variables of :data:`FSDP_ENV`; the run's resolution step fills a field
left ``None`` from them (:func:`accelerate.backends.fsdp.launch.plugin_with_launch_env`), so the
dataclass itself never reads ``os.environ``. No torch import at module level: the launcher imports this table.

``state_dict_type`` is always the upper-case name (``"SHARDED_STATE_DICT"`` / ``"FULL_STATE_DICT"``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

# Upstream's launch flag / config key (without the ``fsdp_`` prefix) -> the variable its runtime reads.
FSDP_ENV: dict[str, str] = {
    "version": "FSDP_VERSION",
    "sharding_strategy": "FSDP_SHARDING_STRATEGY",
    "reshard_after_forward": "FSDP_RESHARD_AFTER_FORWARD",
    "backward_prefetch": "FSDP_BACKWARD_PREFETCH",
    "forward_prefetch": "FSDP_FORWARD_PREFETCH",
    "auto_wrap_policy": "FSDP_AUTO_WRAP_POLICY",
    "transformer_layer_cls_to_wrap": "FSDP_TRANSFORMER_CLS_TO_WRAP",
    "min_num_params": "FSDP_MIN_NUM_PARAMS",
    "offload_params": "FSDP_OFFLOAD_PARAMS",
    "state_dict_type": "FSDP_STATE_DICT_TYPE",
    "use_orig_params": "FSDP_USE_ORIG_PARAMS",
    "sync_module_states": "FSDP_SYNC_MODULE_STATES",
    "cpu_ram_efficient_loading": "FSDP_CPU_RAM_EFFICIENT_LOADING",
    "activation_checkpointing": "FSDP_ACTIVATION_CHECKPOINTING",
    "activation_checkpointing_offload": "FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD",
    "ignored_modules": "FSDP_IGNORED_MODULES",
}
USE_FSDP_ENV = "ACCELERATE_USE_FSDP"
# Each plugin field the launcher can set -> its variable (the flag names differ for two of them).
FIELD_ENV: dict[str, str] = {
    "fsdp_version": FSDP_ENV["version"],
    "transformer_cls_names_to_wrap": FSDP_ENV["transformer_layer_cls_to_wrap"],
    "cpu_offload": FSDP_ENV["offload_params"],
    **{
        key: variable
        for key, variable in FSDP_ENV.items()
        if key not in ("version", "transformer_layer_cls_to_wrap", "offload_params")
    },
}

SHARDING_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2")
WRAP_POLICIES = ("TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP")
STATE_DICT_TYPES = ("FULL_STATE_DICT", "SHARDED_STATE_DICT", "LOCAL_STATE_DICT")
BACKWARD_PREFETCH = ("BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH")
_TRUE = ("1", "true", "yes", "y", "on")
_FALSE = ("0", "false", "no", "n", "off", "")


def as_bool(value: Any, what: str) -> bool:
    """A boolean from a bool or its string spellings; raises naming ``what`` on anything else."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{what}={value!r} is not a boolean; use true or false.")


def _choice(value: Any, choices: tuple[str, ...], what: str) -> str:
    """The upper-case name of ``value`` (a name, torch's enum member, or FSDP1's 1-based number)."""
    name = getattr(value, "name", None) or str(value).strip().upper()
    if name.isdigit() and 1 <= int(name) <= len(choices):
        name = choices[int(name) - 1]
    if name not in choices:
        raise ValueError(f"{what}={value!r} is not one of {', '.join(choices)}.")
    return str(name)


def fsdp2_layout(
    sharding_strategy: str | None, reshard_after_forward: bool | int | None
) -> tuple[bool | int, str]:
    """FSDP2's ``reshard_after_forward`` and mesh kind (``"shard"``, ``"replicate"``, ``"hybrid"``) for a setting.

    FULL_SHARD frees gathered parameters after forward; SHARD_GRAD_OP keeps them until backward;
    NO_SHARD replicates (a 2-D mesh whose shard dimension is 1, so gradients are all-reduced like DDP);
    HYBRID_SHARD shards within a machine and replicates across machines.
    """
    if sharding_strategy is None:
        return (True if reshard_after_forward is None else reshard_after_forward), "shard"
    return {
        "FULL_SHARD": (True, "shard"),
        "SHARD_GRAD_OP": (False, "shard"),
        "NO_SHARD": (False, "replicate"),
        "HYBRID_SHARD": (True, "hybrid"),
        "HYBRID_SHARD_ZERO2": (False, "hybrid"),
    }[sharding_strategy]


@dataclasses.dataclass
class FullyShardedDataParallelPlugin:
    """Fully sharded data parallelism settings (upstream's fields; FSDP2 runs them).

    Example:
        >>> plugin = FullyShardedDataParallelPlugin(
        ...     fsdp_version=2, auto_wrap_policy="transformer_based_wrap", transformer_cls_names_to_wrap=["Block"]
        ... )
        >>> accelerator = Accelerator(fsdp_plugin=plugin)
    """

    fsdp_version: int | None = None
    sharding_strategy: Any = None
    reshard_after_forward: bool | int | None = None
    backward_prefetch: Any = None
    mixed_precision_policy: Any = None
    auto_wrap_policy: Any = None
    cpu_offload: Any = None
    ignored_modules: Any = None
    state_dict_type: Any = None
    state_dict_config: Any = None
    optim_state_dict_config: Any = None
    limit_all_gathers: bool = True
    use_orig_params: bool | None = None
    param_init_fn: Callable[..., Any] | None = None
    sync_module_states: bool | None = None
    forward_prefetch: bool | None = None
    activation_checkpointing: bool | None = None
    activation_checkpointing_offload: bool | None = None
    cpu_ram_efficient_loading: bool | None = None
    transformer_cls_names_to_wrap: list[str] | None = None
    min_num_params: int | None = None

    def __post_init__(self) -> None:
        # Pure: the launcher's FSDP_* variables are read by the run's resolution step
        # (:func:`accelerate.backends.fsdp.launch.plugin_with_launch_env`), not here.
        unset = [name for name in FIELD_ENV if getattr(self, name) is None]
        self._settle({})
        # What each unset field became: the resolution step may still fill these from the launcher.
        self._defaults: dict[str, Any] = {name: getattr(self, name) for name in unset}

    def _defaulted_fields(self) -> list[str]:
        """The fields left unset at construction that still hold the default they were given."""
        defaults: dict[str, Any] = getattr(self, "_defaults", {})
        return [name for name, value in defaults.items() if getattr(self, name) == value]

    def _settle(self, env: Mapping[str, str]) -> None:
        """Checks and normalises the fields; unset ones take ``env``'s ``FSDP_*`` value, else the default."""
        # Unset, the version is the launcher's, else the one the settings given imply: only FSDP2 has
        # reshard_after_forward (so a script written for `launch --fsdp_version 2` also runs as plain python).
        implied = 2 if self.reshard_after_forward is not None and self.sharding_strategy is None else 1
        self.fsdp_version = int(self.fsdp_version or env.get(FSDP_ENV["version"], "") or implied)
        if self.fsdp_version not in (1, 2):
            raise ValueError(
                f"FullyShardedDataParallelPlugin(fsdp_version={self.fsdp_version!r}) must be 1 or 2."
            )
        strategy = (
            self.sharding_strategy
            if self.sharding_strategy is not None
            else env.get(FSDP_ENV["sharding_strategy"])
        )
        if strategy is not None and self.fsdp_version == 2:
            raise ValueError(
                f"FullyShardedDataParallelPlugin(fsdp_version=2, sharding_strategy={strategy!r}): FSDP2 has no "
                "sharding_strategy; use reshard_after_forward=True (FULL_SHARD) or False (SHARD_GRAD_OP), or "
                "convert the config with `accelerate to-fsdp2`."
            )
        if self.fsdp_version == 1:
            strategy = _choice(strategy or "FULL_SHARD", SHARDING_STRATEGIES, "sharding_strategy")
        self.sharding_strategy = strategy
        if self.reshard_after_forward is None and FSDP_ENV["reshard_after_forward"] in env:
            raw = env[FSDP_ENV["reshard_after_forward"]].strip()
            # An integer above 1 reshards to that many ranks (FSDP2); anything else is a boolean.
            big = raw.isdigit() and int(raw) > 1
            self.reshard_after_forward = int(raw) if big else as_bool(raw, "FSDP_RESHARD_AFTER_FORWARD")
        if self.reshard_after_forward is not None and self.fsdp_version == 1:
            raise ValueError(
                "FullyShardedDataParallelPlugin(reshard_after_forward=...) is an FSDP2 setting; with fsdp_version=1 "
                "use sharding_strategy, or pass fsdp_version=2."
            )
        self.reshard_after_forward, self.mesh_kind = fsdp2_layout(
            self.sharding_strategy, self.reshard_after_forward
        )
        prefetch = (
            self.backward_prefetch
            if self.backward_prefetch is not None
            else env.get(FSDP_ENV["backward_prefetch"])
        )
        self.backward_prefetch = (
            None if prefetch is None else _choice(prefetch, BACKWARD_PREFETCH, "backward_prefetch")
        )
        self._read_flags(env)
        self._read_wrap_policy(env)
        given = self.state_dict_type
        self.set_state_dict_type(given if given is not None else env.get(FSDP_ENV["state_dict_type"]) or None)
        if self.ignored_modules is None and env.get(FSDP_ENV["ignored_modules"]):
            self.ignored_modules = env[FSDP_ENV["ignored_modules"]]
        if self.cpu_ram_efficient_loading:
            # Only rank 0 holds real weights: prepare must broadcast them.
            self.sync_module_states = True
        self.validate_mixed_precision_policy()

    def _read_flags(self, env: Mapping[str, str]) -> None:
        for name, key in (
            ("use_orig_params", "use_orig_params"), ("sync_module_states", "sync_module_states"),
            ("forward_prefetch", "forward_prefetch"), ("activation_checkpointing", "activation_checkpointing"),
            ("activation_checkpointing_offload", "activation_checkpointing_offload"),
            ("cpu_ram_efficient_loading", "cpu_ram_efficient_loading"),
        ):  # fmt: skip
            value = getattr(self, name)
            if value is None:
                value = env.get(FSDP_ENV[key], "true" if name == "use_orig_params" else "false")
            setattr(self, name, as_bool(value, f"FullyShardedDataParallelPlugin({name})"))
        if self.cpu_offload is None:
            self.cpu_offload = as_bool(env.get(FSDP_ENV["offload_params"], "false"), "FSDP_OFFLOAD_PARAMS")
        elif isinstance(self.cpu_offload, str):
            self.cpu_offload = as_bool(self.cpu_offload, "FullyShardedDataParallelPlugin(cpu_offload)")

    def _read_wrap_policy(self, env: Mapping[str, str]) -> None:
        if self.auto_wrap_policy is None:
            self.auto_wrap_policy = env.get(FSDP_ENV["auto_wrap_policy"]) or None
        if isinstance(self.auto_wrap_policy, str):
            self.auto_wrap_policy = _choice(self.auto_wrap_policy, WRAP_POLICIES, "auto_wrap_policy").lower()
        names: Any = self.transformer_cls_names_to_wrap
        if names is None:
            names = env.get(FSDP_ENV["transformer_layer_cls_to_wrap"]) or None
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",") if n.strip()]
        self.transformer_cls_names_to_wrap = list(names) if names is not None else None
        if self.min_num_params is None:
            self.min_num_params = int(env.get(FSDP_ENV["min_num_params"], "") or 0)
        if self.auto_wrap_policy is None and self.transformer_cls_names_to_wrap:
            self.auto_wrap_policy = "transformer_based_wrap"  # naming the blocks asks for them to be wrapped
        elif self.auto_wrap_policy is None and self.min_num_params > 0:
            self.auto_wrap_policy = "size_based_wrap"

    # ------------------------------------------------------------------ upstream's methods
    def set_state_dict_type(self, state_dict_type: Any = None) -> None:
        """Sets (and normalises) ``state_dict_type``; ``None`` sets the default (FULL_STATE_DICT for
        fsdp_version 1, SHARDED_STATE_DICT for 2)."""
        if state_dict_type is None:
            state_dict_type = "FULL_STATE_DICT" if self.fsdp_version == 1 else "SHARDED_STATE_DICT"
        name = _choice(state_dict_type, STATE_DICT_TYPES, "state_dict_type")
        if name == "LOCAL_STATE_DICT":
            raise ValueError(
                "state_dict_type=LOCAL_STATE_DICT is an FSDP1 format this accelerate does not write (it runs "
                "FSDP2); use SHARDED_STATE_DICT (resharding-safe) or FULL_STATE_DICT."
            )
        self.state_dict_type = name

    def set_auto_wrap_policy(self, model: Any) -> Callable[[Any], bool]:
        """The predicate ``module -> shard it on its own`` for ``model`` (``auto_wrap_policy`` keeps its name).

        Raises:
            ValueError: a class name in ``transformer_cls_names_to_wrap`` that ``model`` does not contain.
        """
        from accelerate.backends.fsdp.wrap import wrap_predicate

        predicate = wrap_predicate(self, model)
        return predicate

    def set_mixed_precision(
        self, mixed_precision: Any, buffer_autocast: bool = False, override: bool = False
    ) -> None:
        """Sets ``mixed_precision_policy`` from a mode (``"bf16"``, ``"fp16"``, ``"no"``) unless one is set
        (or ``override``): parameters and compute in that dtype, gradients reduced in fp32."""
        if self.mixed_precision_policy is not None and not override:
            return
        import torch
        from torch.distributed.fsdp import MixedPrecisionPolicy

        from accelerate.utils.dataclasses import mixed_precision_dtype

        dtype = mixed_precision_dtype(mixed_precision)
        self.mixed_precision_policy = (
            None if dtype is None else MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
        )

    def validate_mixed_precision_policy(self) -> None:
        """Turns a dict policy (``{"param_dtype": "bf16", ...}``) into FSDP2's ``MixedPrecisionPolicy``."""
        policy = self.mixed_precision_policy
        if policy is None or hasattr(policy, "output_dtype"):  # unset, or FSDP2's policy already
            return
        if hasattr(policy, "param_dtype") and not isinstance(policy, Mapping):  # FSDP1's MixedPrecision
            self.mixed_precision_policy = _from_fsdp1_policy(policy)
            return
        if not isinstance(policy, Mapping):
            raise TypeError(
                "FullyShardedDataParallelPlugin(mixed_precision_policy=...) takes a torch MixedPrecisionPolicy or a "
                f"dict of its fields, got {type(policy).__name__}."
            )
        from torch.distributed.fsdp import MixedPrecisionPolicy

        allowed = {"param_dtype", "reduce_dtype", "output_dtype", "cast_forward_inputs", "buffer_dtype"}
        unknown = set(policy) - allowed
        if unknown:
            raise ValueError(
                f"mixed_precision_policy has unknown keys {sorted(unknown)}; use {sorted(allowed)}."
            )
        kwargs = {
            k: _dtype(v) if k.endswith("dtype") else v for k, v in policy.items() if k != "buffer_dtype"
        }
        self.mixed_precision_policy = MixedPrecisionPolicy(**kwargs)

    def set_cpu_offload(self) -> None:
        """Turns ``cpu_offload=True`` into FSDP2's ``CPUOffloadPolicy``."""
        if self.cpu_offload is True:
            from torch.distributed.fsdp import CPUOffloadPolicy

            self.cpu_offload = CPUOffloadPolicy()

    def validate_cpu_offload(self) -> None:
        """CPU offload moves sharded parameters from an accelerator to host memory: refused without one."""
        import torch

        if self.cpu_offload and not torch.cuda.is_available():
            raise ValueError(
                "FullyShardedDataParallelPlugin(cpu_offload=True) (--fsdp_offload_params true) keeps the sharded "
                "parameters in host memory and copies them to the GPU for compute, but no GPU is available here: "
                "on CPU the parameters are in host memory already. Drop cpu_offload."
            )


def _dtype(value: Any) -> Any:
    import torch

    if value is None or isinstance(value, torch.dtype):
        return value
    names = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
             "fp32": torch.float32, "float32": torch.float32}  # fmt: skip
    if str(value) not in names:
        raise ValueError(f"mixed_precision_policy dtype {value!r} is not one of {sorted(names)}.")
    return names[str(value)]


def _from_fsdp1_policy(policy: Any) -> Any:
    """FSDP1's ``MixedPrecision(param_dtype, reduce_dtype, buffer_dtype)`` as FSDP2's policy."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=policy.param_dtype, reduce_dtype=policy.reduce_dtype)


def ignored_module_list(model: Any, ignored: Any) -> list[Any]:
    """The modules ``ignored_modules`` names: modules themselves, or a regex over qualified names."""
    if ignored is None:
        return []
    if isinstance(ignored, str):
        import re

        pattern = re.compile(ignored)
        return [m for name, m in model.named_modules() if name and pattern.fullmatch(name)]
    if isinstance(ignored, Iterable):
        return list(ignored)
    raise TypeError(f"ignored_modules takes modules or a regex string, got {type(ignored).__name__}.")
