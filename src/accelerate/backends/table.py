"""The backend table: every backend as one row, in the order the resolver asks them.

A row says, without importing its package, when the run asks for it (one of its Accelerator
arguments, its ``accelerate launch --use_<name>`` setting, the process's device type or a process
count) and where its :class:`~accelerate.backends.spec.BackendSpec` lives. The resolver imports a
spec only for a row the run asks for, so ``Accelerator()`` on one CPU process loads no backend but
the single-device one. Adding a backend is one package exporting ``spec`` plus one row here (see
ARCHITECTURE.md, "Adding a backend or a parallel dimension").
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from accelerate.utils.records import frozen_record

if TYPE_CHECKING:
    from accelerate.backends.spec import BackendRequest, BackendSpec
    from accelerate.state.process import PartialState


@frozen_record
class Row:
    """One backend: its name, where its spec lives, and what asks for it."""

    name: str
    module: str  # the module whose ``spec`` attribute is the row's BackendSpec
    arguments: tuple[str, ...] = ()  # the Accelerator arguments that ask for it
    launch_flag: str | None = None  # the LaunchEnv field that asks for it (--use_<name>)
    device_type: str | None = None  # a device row: asked when the process runs on this device type
    min_processes: int = 0  # a device row: asked when the job has at least this many processes
    # (row name, why they cannot run together): both asked by an argument raises naming both; a row
    # asked only by the launcher steps aside for one asked by an argument.
    conflicts: tuple[tuple[str, str], ...] = ()

    def given(self, request: BackendRequest) -> list[str]:
        """Its arguments the caller passed, by name."""
        return [name for name in self.arguments if request.given(name) is not None]

    def asked(self, request: BackendRequest) -> bool:
        """Whether the arguments or the launch settings ask for this backend."""
        launched = self.launch_flag is not None and bool(getattr(request.launch, self.launch_flag))
        return bool(self.given(request)) or launched

    def fits(self, partial: PartialState) -> bool:
        """Whether a device row applies to this process (the last row, with no condition, always does)."""
        if self.device_type is not None:
            return partial.device.type == self.device_type
        return partial.num_processes >= self.min_processes

    @property
    def is_device_row(self) -> bool:
        return not self.arguments and self.launch_flag is None

    def spec(self) -> BackendSpec:
        spec: BackendSpec = importlib.import_module(self.module).spec
        return spec


_SHARD_TWICE = "they are two ways to shard the same model and cannot run together"

# Precedence order: the first row whose spec runs builds the strategy.
TABLE: tuple[Row, ...] = (
    Row(
        name="deepspeed",
        module="accelerate.backends.deepspeed.spec",
        arguments=("deepspeed_plugin", "deepspeed_plugins"),
        launch_flag="use_deepspeed",
    ),
    Row(name="megatron_lm", module="accelerate.backends.megatron_lm", arguments=("megatron_lm_plugin",)),
    Row(
        name="parallel",
        module="accelerate.backends.parallel.spec",
        arguments=("parallelism_config", "torch_tp_plugin"),
        launch_flag="use_parallelism_config",
    ),
    Row(
        name="fsdp",
        module="accelerate.backends.fsdp.spec",
        arguments=("fsdp_plugin",),
        launch_flag="use_fsdp",
        conflicts=(("deepspeed", _SHARD_TWICE),),
    ),
    Row(name="xla", module="accelerate.backends.xla.spec", device_type="xla"),
    Row(name="ddp", module="accelerate.backends.ddp", min_processes=2),
    Row(name="single_device", module="accelerate.backends.single_device"),
)
# The Accelerator arguments some row owns: connect() passes exactly these through.
BACKEND_ARGUMENTS: tuple[str, ...] = tuple(name for row in TABLE for name in row.arguments)


def row(name: str) -> Row:
    """The row called ``name`` (a KeyError names the known rows)."""
    for candidate in TABLE:
        if candidate.name == name:
            return candidate
    raise KeyError(f"no backend row {name!r}; the table has {[r.name for r in TABLE]}")
