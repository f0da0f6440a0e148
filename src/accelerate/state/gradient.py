"""`GradientState`: whether this step syncs gradients, and where the active dataloader stands.

Shared by the Accelerator (which decides sync steps), the prepared dataloaders (which say when
the epoch ends) and the optimizer/scheduler wrappers (which skip work on non-sync micro-steps).
"""

from __future__ import annotations

from typing import Any, ClassVar

# Written by `accelerate launch` for an elastic range: processes of the largest group it allows.
from accelerate.config.env_contract import ELASTIC_MAX_PROCESSES_ENV as ELASTIC_MAX_PROCESSES_ENV


class GradientState:
    """One state per process: every ``GradientState()`` is a new object reading and writing it.

    As upstream's, the instances share ``_shared_state`` (their ``__dict__``), so an instance is
    freed with whatever holds it (a prepared loader, an Accelerator) while the state lives on until
    `_reset_state`. A reset starts a new shared dict: instances made before it keep the old one.

    Attributes:
        sync_gradients: True on the micro-step whose backward should all-reduce and whose
            optimizer step should apply.
        end_of_dataloader: True while the active dataloader yields its last batch.
        remainder: duplicated samples in the last round of the active dataloader (-1 if unknown).
        micro_step: micro-steps since the last sync (what ``Accelerator.step`` reads and
            checkpoints save); this object is its one owner.
    """

    _initialized: bool = False
    # On XLA: True once this step's gradients were averaged over the processes (by clip_grad_norm_),
    # so the optimizer step does not average them again; the step resets it (backends/xla/strategy.py).
    is_xla_gradients_synced: bool = False

    # The live state (empty until the first instance); rebound, not cleared, by a reset.
    _shared_state: ClassVar[dict[str, Any]] = {}

    @classmethod
    def _reset_state(cls) -> None:
        """Upstream's name for "forget the shared state" (tests and notebooks)."""
        reset_gradient_state()

    def __init__(self, gradient_accumulation_plugin: Any | None = None) -> None:
        self.__dict__ = GradientState._shared_state
        if not self._initialized:
            self.sync_gradients = True
            self.micro_step = 0
            self.num_steps = 1
            self.adjust_scheduler = True
            self.sync_with_dataloader = True
            self.sync_each_batch = False
            self.active_dataloader: Any | None = None
            self.dataloader_references: list[Any] = [None]
            self._initialized = True
        if gradient_accumulation_plugin is not None:
            self.num_steps = gradient_accumulation_plugin.num_steps
            # True when num_steps was raised to keep the global batch (adjusted_for_world_size).
            self.adjusted_for_world_size = bool(getattr(gradient_accumulation_plugin, "_adjusted", False))
            self.adjust_scheduler = gradient_accumulation_plugin.adjust_scheduler
            self.sync_with_dataloader = gradient_accumulation_plugin.sync_with_dataloader
            self.sync_each_batch = gradient_accumulation_plugin.sync_each_batch

    @property
    def initialized(self) -> bool:
        return self._initialized

    @property
    def plugin_kwargs(self) -> dict[str, Any]:
        return {
            "num_steps": self.num_steps,
            "adjust_scheduler": self.adjust_scheduler,
            "sync_with_dataloader": self.sync_with_dataloader,
            "sync_each_batch": self.sync_each_batch,
        }

    @property
    def end_of_dataloader(self) -> bool:
        loader = self.active_dataloader
        return bool(getattr(loader, "end_of_dataloader", False)) if loader is not None else False

    @property
    def remainder(self) -> int:
        loader = self.active_dataloader
        return int(getattr(loader, "remainder", -1)) if loader is not None else -1

    @property
    def in_dataloader(self) -> bool:
        return self.active_dataloader is not None

    def _set_sync_gradients(self, sync_gradients: bool) -> None:
        self.sync_gradients = sync_gradients

    def begin_micro_step(self) -> None:
        """Counts a micro-step and decides whether it syncs: every ``num_steps``-th does, and so does
        the last batch of a prepared dataloader (a partial window at the epoch's end)."""
        if self.sync_with_dataloader and self.end_of_dataloader:
            self.micro_step = 0
            self.sync_gradients = True
        else:
            self.micro_step += 1
            self.sync_gradients = self.micro_step % self.num_steps == 0

    def _add_dataloader(self, dataloader: Any) -> None:
        """A prepared loader calls this when its iteration starts (loaders may nest)."""
        self.active_dataloader = dataloader
        self.dataloader_references.append(dataloader)

    def _remove_dataloader(self, dataloader: Any) -> None:
        """...and this when its iteration ends; the enclosing loader becomes active again."""
        if dataloader in self.dataloader_references:
            self.dataloader_references.remove(dataloader)
        self.active_dataloader = self.dataloader_references[-1]

    def __reduce__(self) -> tuple[Any, ...]:
        # Unpickled, an instance joins the live state; it brings its values only where none exists yet.
        return (_restore, (dict(self.__dict__),))

    def __repr__(self) -> str:
        return (
            f"Sync Gradients: {self.sync_gradients}\nAt end of current dataloader: {self.end_of_dataloader}\n"
            f"Extra samples added: {self.remainder}\nGradient accumulation plugin: {self.plugin_kwargs}\n"
        )


def reset_gradient_state() -> None:
    GradientState._shared_state = {}


def _restore(values: dict[str, Any]) -> GradientState:
    if not GradientState._shared_state.get("_initialized"):
        GradientState._shared_state.update(values)
    return GradientState()


def adjusted_for_world_size(plugin: Any, world_size: int, environ: Any = None) -> Any:
    """The accumulation plugin to use on ``world_size`` processes (see ``adjust_for_world_size``).

    Returns ``plugin`` itself unless it asks to keep the global batch and the world differs from
    its reference; then a copy whose ``num_steps`` keeps ``num_steps * reference`` micro-batches.

    Raises:
        ValueError: the global batch cannot be kept exactly on ``world_size`` processes.
    """
    import dataclasses
    import os

    if not getattr(plugin, "adjust_for_world_size", False):
        return plugin
    reference = plugin.reference_world_size
    if reference is None:
        value = (os.environ if environ is None else environ).get(ELASTIC_MAX_PROCESSES_ENV)
        reference = int(value) if value else world_size
    if reference == world_size:
        return plugin
    steps, rest = divmod(plugin.num_steps * reference, world_size)
    if rest or steps < 1:
        raise ValueError(
            f"GradientAccumulationPlugin(adjust_for_world_size=True) keeps the global batch of num_steps="
            f"{plugin.num_steps} micro-batches on {reference} processes, but {plugin.num_steps * reference} "
            f"micro-batches do not split evenly over {world_size} processes. Choose num_steps so that "
            f"num_steps * {reference} is a multiple of every world size the run may have, or set "
            "adjust_for_world_size=False (keep the per-process batch)."
        )
    adjusted = dataclasses.replace(plugin, num_steps=steps)
    adjusted._adjusted = True  # GradientState reports it (the resume line names the rule in force)
    return adjusted
