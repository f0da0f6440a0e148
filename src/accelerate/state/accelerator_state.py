"""`AcceleratorState`: the per-process training settings on top of `PartialState`.

Holds what the Accelerator resolved (mixed precision, the strategy's distributed type) so that
code without the Accelerator object (``AcceleratorState().mixed_precision``) can read it. A second
Accelerator in the same process must agree with the first; a contradiction raises naming both.
"""

from __future__ import annotations

from typing import Any

from accelerate.state.distributed_type import DistributedType
from accelerate.state.process import PartialState
from accelerate.state.shared import SharedStateView, mark_reset, was_reset

_ACCEL_STATE: AcceleratorState | None = None

# Attributes read through to the PartialState, so AcceleratorState() answers the same questions.
_FORWARDED = frozenset(
    {
        "device", "num_processes", "process_index", "local_process_index", "is_main_process",
        "is_local_main_process", "is_last_process", "use_distributed", "wait_for_everyone",
        "main_process_first", "local_main_process_first", "on_main_process", "on_local_main_process",
        "on_process", "on_local_process", "on_last_process", "print", "split_between_processes",
        "backend", "debug", "environment", "num_processes_per_node", "default_device", "use_cpu",
        "destroy_process_group", "fork_launched", "set_device",
    }
)  # fmt: skip

# What __init__ sets on the object itself.
_OWN = frozenset(
    {
        "partial_state", "mixed_precision", "distributed_type", "dynamo_plugin", "dynamo_backend",
        "parallelism_config", "device_mesh",
    }
)  # fmt: skip


class AcceleratorState:
    """One per process: ``AcceleratorState()`` returns the shared object once an Accelerator made it."""

    _initialized: bool = False
    mixed_precision: str
    distributed_type: DistributedType
    # Upstream's names for "the shared attributes" and "forget them" (transformers reads both).
    _shared_state = SharedStateView(lambda: _ACCEL_STATE)
    # Set by the Accelerator when it runs FSDP (then is_fsdp2 is True: the engine is FSDP2); the
    # backends this release does not run stay None. deepspeed_plugin is a property below.
    fsdp_plugin: Any = None
    torch_tp_plugin: Any = None
    megatron_lm_plugin: Any = None
    is_fsdp2: bool = False

    @classmethod
    def _reset_state(cls, reset_partial_state: bool = False) -> None:
        """Forgets this state (and the PartialState with ``reset_partial_state``); the group survives.

        As upstream's, a reference still held answers no state attribute afterwards (the error names
        this reset); the next Accelerator makes a fresh state.
        """
        held = _ACCEL_STATE
        reset_accelerator_state()
        if reset_partial_state:
            PartialState._reset_state()
        if held is not None:
            mark_reset(held)

    def __new__(cls, *args: Any, **kwargs: Any) -> AcceleratorState:
        global _ACCEL_STATE
        if _ACCEL_STATE is None:
            _ACCEL_STATE = super().__new__(cls)
        return _ACCEL_STATE

    def __init__(
        self,
        mixed_precision: str | None = None,
        cpu: bool = False,
        dynamo_plugin: Any = None,
        deepspeed_plugin: Any = None,
        fsdp_plugin: Any = None,
        torch_tp_plugin: Any = None,
        megatron_lm_plugin: Any = None,
        parallelism_config: Any = None,
        _from_accelerator: bool = False,
        **kwargs: Any,
    ) -> None:
        # `distributed_type` (ours) overrides what the process state reports; the rest go to PartialState.
        distributed_type: DistributedType | None = kwargs.pop("distributed_type", None)
        ds_plugins: dict[str, Any] | None = kwargs.pop("deepspeed_plugins", None)
        if ds_plugins is None and deepspeed_plugin is not None:
            from accelerate.backends.deepspeed.launch import resolve_deepspeed_plugins

            ds_plugins = resolve_deepspeed_plugins(deepspeed_plugin, None, launched=False)
        partial_kwargs = kwargs
        from accelerate.backends.resolve import check_unavailable

        check_unavailable(
            deepspeed_plugin=deepspeed_plugin,
            fsdp_plugin=fsdp_plugin,
            megatron_lm_plugin=megatron_lm_plugin,
            torch_tp_plugin=torch_tp_plugin,
            parallelism_config=parallelism_config,
        )
        if ds_plugins:
            distributed_type = DistributedType.DEEPSPEED
        if self._initialized:
            if mixed_precision is not None and mixed_precision != self.mixed_precision:
                raise ValueError(
                    f"An Accelerator in this process already uses mixed_precision={self.mixed_precision!r}; "
                    f"a new one asked for mixed_precision={mixed_precision!r}. Create one Accelerator per "
                    "process, or pass the same value."
                )
            # Raises on a contradicting cpu/backend; a PartialState reset since is made again and used.
            self.partial_state = PartialState(cpu, **partial_kwargs)
            return
        self.partial_state = PartialState(cpu, **partial_kwargs)
        self.mixed_precision = mixed_precision or "no"
        self.distributed_type = distributed_type or self.partial_state.distributed_type
        self.dynamo_plugin = dynamo_plugin
        self.dynamo_backend = "no" if dynamo_plugin is None else dynamo_plugin.backend
        self.parallelism_config = parallelism_config
        self.device_mesh: Any = None
        self._deepspeed_plugins = ds_plugins
        self._initialized = True

    @property
    def initialized(self) -> bool:
        return self._initialized

    @property
    def deepspeed_plugins(self) -> dict[str, Any] | None:
        """The named DeepSpeed plugins of this run (None without DeepSpeed)."""
        return self.__dict__.get("_deepspeed_plugins")

    @property
    def deepspeed_plugin(self) -> Any:
        """The selected DeepSpeed plugin (None without DeepSpeed)."""
        plugins = self.deepspeed_plugins
        return next((p for p in plugins.values() if p.selected), None) if plugins else None

    def get_deepspeed_plugin(self, name: str) -> Any:
        plugins = self.deepspeed_plugins or {}
        if name not in plugins:
            raise ValueError(
                f"No DeepSpeed plugin named {name!r}; this run has {sorted(plugins) or 'none'} "
                "(Accelerator(deepspeed_plugins={name: DeepSpeedPlugin(...)}))."
            )
        return plugins[name]

    def select_deepspeed_plugin(self, name: str | None = None) -> None:
        """Makes plugin ``name`` the active one: the next prepare() builds its engine with it."""
        plugins = self.deepspeed_plugins or {}
        if name not in plugins:
            raise ValueError(
                f"select_deepspeed_plugin({name!r}): this run's DeepSpeed plugins are {sorted(plugins) or 'none'}."
            )
        for plugin in plugins.values():
            plugin._unselect()
        plugins[name].select(_from_accelerator_state=True)

    def __getattr__(self, name: str) -> Any:
        if was_reset(self) and (name in _FORWARDED or name in _OWN):
            raise AttributeError(
                f"`AcceleratorState` object has no attribute `{name}`. This happens if "
                "`AcceleratorState._reset_state()` was called and an `Accelerator` was not reinitialized: "
                "read it from the new Accelerator's `state`."
            )
        if name in _FORWARDED and "partial_state" in self.__dict__:
            return getattr(self.__dict__["partial_state"], name)
        if name in _FORWARDED:
            return getattr(PartialState(), name)
        raise AttributeError(f"'AcceleratorState' object has no attribute {name!r}")

    def __repr__(self) -> str:
        return (
            repr(self.__dict__.get("partial_state", ""))
            + f"Mixed precision type: {self.__dict__.get('mixed_precision')}\n"
        )


def existing_accelerator_state() -> AcceleratorState | None:
    """The AcceleratorState an earlier Accelerator in this process made, if any (creates none)."""
    state = _ACCEL_STATE
    return state if state is not None and state.initialized else None


def reset_accelerator_state() -> None:
    global _ACCEL_STATE
    _ACCEL_STATE = None
