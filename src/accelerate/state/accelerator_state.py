"""`AcceleratorState`: the per-process training settings on top of `PartialState`.

It records one :class:`~accelerate.state.run.RunDescription`, the run as resolved once (by
``connect()`` for an Accelerator), and its public attributes (``mixed_precision``,
``distributed_type``, ``fsdp_plugin``, ``deepspeed_plugins``, ``dynamo_plugin``, ...) read from it,
so code without the Accelerator object (``AcceleratorState().mixed_precision``) can read the run.
Nothing here resolves or re-validates. A second Accelerator in the same process must agree with
the first; a contradiction raises naming both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from accelerate.state.distributed_type import DistributedType
from accelerate.state.parallelism_env import resolve_parallelism_config
from accelerate.state.process import PartialState
from accelerate.state.run import RunDescription, describe_process
from accelerate.state.shared import SharedStateView, adopt_held, mark_reset, was_reset

_ACCEL_STATE: AcceleratorState | None = None
T = TypeVar("T")

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
# The description's settings, listed in upstream's attribute dict (``_shared_state``).
_RUN_FIELDS = frozenset(field.name for field in dataclasses.fields(RunDescription)) - {"topology"}


class _FromRun(Generic[T]):
    """A public attribute of ``AcceleratorState`` read from its run's description.

    Upstream keeps these as plain attributes and some code assigns them (a stand-in ``fsdp_plugin``):
    an assignment records a new description (``dataclasses.replace``), never a second copy of the value.
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, state: AcceleratorState | None, owner: type | None = None) -> T:
        if state is None:
            return self  # type: ignore[return-value]  # the class attribute itself (introspection)
        value: T = getattr(state.run, self.name)
        return value

    def __set__(self, state: AcceleratorState, value: T) -> None:
        change: dict[str, Any] = {self.name: value}
        state._record(dataclasses.replace(state.run, **change))


# The attributes a state held across `_reset_state` no longer answers (with the names in _FORWARDED).
_OWN = frozenset(
    {
        "partial_state", "mixed_precision", "distributed_type", "dynamo_plugin", "dynamo_backend",
        "parallelism_config", "device_mesh",
    }
)  # fmt: skip


class AcceleratorState:
    """One per process: ``AcceleratorState()`` returns the shared object once an Accelerator made it."""

    _initialized: bool = False
    # Upstream's names for "the shared attributes" and "forget them" (transformers reads both).
    _shared_state = SharedStateView(lambda: _ACCEL_STATE, lambda state: state._attributes())

    @classmethod
    def _reset_state(cls, reset_partial_state: bool = False) -> None:
        """Forgets this state (and the PartialState with ``reset_partial_state``); the group survives.

        As upstream's, a reference still held answers no state attribute until the next Accelerator
        makes a fresh state (the error names this reset); from then on it reads the fresh one.
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
            adopt_held(_ACCEL_STATE)
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
        """Direct construction (no Accelerator): describes this process with the settings given.

        The settings are recorded as given, as upstream's ``AcceleratorState`` does: only an
        Accelerator resolves and checks them (the backend table). An Accelerator records its run
        through :func:`record_run` instead. ``distributed_type`` (ours) overrides the process's type; other keyword arguments go to ``PartialState``.
        """
        distributed_type: DistributedType | None = kwargs.pop("distributed_type", None)
        ds_plugins: dict[str, Any] | None = kwargs.pop("deepspeed_plugins", None)
        if self._initialized:
            self.check_agrees(mixed_precision=mixed_precision, cpu=cpu, **kwargs)
            return
        # The older TP plugin means ParallelismConfig(tp_size=...); no launcher settings are read here.
        parallelism_config = resolve_parallelism_config(parallelism_config, torch_tp_plugin)
        if ds_plugins is None and deepspeed_plugin is not None:
            ds_plugins = _named(deepspeed_plugin)
        self.partial_state = PartialState(cpu, **kwargs)
        run = describe_process(
            self.partial_state,
            mixed_precision=mixed_precision,
            deepspeed_plugins=ds_plugins,
            fsdp_plugin=fsdp_plugin,
            dynamo_plugin=dynamo_plugin,
            parallelism_config=parallelism_config,
            distributed_type=distributed_type,
        )
        self._record(
            dataclasses.replace(run, torch_tp_plugin=torch_tp_plugin, megatron_lm_plugin=megatron_lm_plugin)
        )

    def check_agrees(self, *, mixed_precision: str | None, cpu: bool, **partial_kwargs: Any) -> None:
        """Raises, naming both values, when a later Accelerator/AcceleratorState contradicts this one."""
        if mixed_precision is not None and mixed_precision != self.mixed_precision:
            raise ValueError(
                f"An Accelerator in this process already uses mixed_precision={self.mixed_precision!r}; "
                f"a new one asked for mixed_precision={mixed_precision!r}. Create one Accelerator per "
                "process, or pass the same value."
            )
        # Raises on a contradicting cpu/backend; a PartialState reset since is made again and used.
        self.partial_state = PartialState(cpu, **partial_kwargs)

    def _attributes(self) -> dict[str, Any]:
        """Upstream's attribute dict (``_shared_state``): the run's settings beside the process state."""
        own = {k: v for k, v in self.__dict__.items() if k != "_run"}
        return {**own, **{name: getattr(self.run, name) for name in sorted(_RUN_FIELDS)}}

    def _record(self, run: RunDescription) -> None:
        object.__setattr__(self, "_run", run)
        self._initialized = True

    @property
    def run(self) -> RunDescription:
        """The description of this process's run (what the resolver decided, recorded once)."""
        run: RunDescription | None = self.__dict__.get("_run")
        if run is None:
            raise AttributeError(
                "AcceleratorState has no run yet: create an Accelerator or call AcceleratorState()."
            )
        return run

    # ------------------------------------------------------------------ what the run is
    mixed_precision: _FromRun[str] = _FromRun()
    distributed_type: _FromRun[DistributedType] = _FromRun()
    fsdp_plugin: _FromRun[Any] = _FromRun()  # the strategy's copy when FSDP shards; None without FSDP
    is_fsdp2: _FromRun[bool] = _FromRun()
    torch_tp_plugin: _FromRun[Any] = _FromRun()
    megatron_lm_plugin: _FromRun[Any] = _FromRun()
    dynamo_plugin: _FromRun[Any] = _FromRun()
    parallelism_config: _FromRun[Any] = _FromRun()
    device_mesh: _FromRun[Any] = _FromRun()  # from parallelism_config; None without one or in one process

    @property
    def dynamo_backend(self) -> str:
        return self.run.dynamo_backend

    @property
    def initialized(self) -> bool:
        return self._initialized

    @property
    def deepspeed_plugins(self) -> dict[str, Any] | None:
        """The named DeepSpeed plugins of this run (None without DeepSpeed)."""
        return self.run.deepspeed_plugins

    @property
    def deepspeed_plugin(self) -> Any:
        """The selected DeepSpeed plugin (None without DeepSpeed)."""
        return self.run.deepspeed_plugin

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

    # Upstream defines these two on the class (hasattr, inspect and mocks see them); both are the
    # PartialState's, read through the same forwarding as the other process attributes.
    @property
    def fork_launched(self) -> bool:
        """True when notebook_launcher/debug_launcher started this process by ``fork``."""
        return bool(self.__getattr__("fork_launched"))

    def destroy_process_group(self, group: Any = None) -> None:
        """Destroys ``group``, or the default process group (see ``PartialState.destroy_process_group``)."""
        self.__getattr__("destroy_process_group")(group)

    def __getattr__(self, name: str) -> Any:
        # A class attribute reached here is a descriptor (a run setting) that found no run: the reset's.
        if was_reset(self) and (name in _FORWARDED or name in _OWN or hasattr(type(self), name)):
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
        run = self.__dict__.get("_run")
        return (
            repr(self.__dict__.get("partial_state", ""))
            + f"Mixed precision type: {run.mixed_precision if run is not None else None}\n"
        )


def record_run(run: RunDescription, partial: PartialState) -> AcceleratorState:
    """Records an Accelerator's run (``connect()``): the process's state now describes it.

    ``connect()`` has checked that an earlier state agrees (:meth:`AcceleratorState.check_agrees`);
    the newest Accelerator's description is the one recorded, as its strategy is the one that runs.
    """
    state = AcceleratorState.__new__(AcceleratorState)
    if not state._initialized:
        state.partial_state = partial
    state._record(run)
    return state


def _named(given: Any) -> dict[str, Any]:
    """``AcceleratorState(deepspeed_plugin=...)``'s plugins by name, the first one selected (as upstream).

    Recorded as given: a direct AcceleratorState resolves nothing (no launch settings, no checks);
    an Accelerator resolves its plugins through the backend table.
    """
    named = dict(given) if isinstance(given, Mapping) else {"default": given}
    first = next(iter(named.values()), None)
    if first is not None:
        first.select(_from_accelerator_state=True)
    return named


def existing_accelerator_state() -> AcceleratorState | None:
    """The AcceleratorState an earlier Accelerator in this process made, if any (creates none)."""
    state = _ACCEL_STATE
    return state if state is not None and state.initialized else None


def reset_accelerator_state() -> None:
    global _ACCEL_STATE
    _ACCEL_STATE = None
