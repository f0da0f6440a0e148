"""`PartialState`: the one per-process description of the distributed environment.

There is exactly one distributed environment per process, so ``PartialState()`` returns the same
object every time (the first call creates it and initialises the process group). Library code
receives this object as an argument; tests call :func:`reset_process_state` between cases.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from accelerate.collectives.communicator import bind_communicator, current_communicator, make_communicator
from accelerate.collectives.operations import check_arrival
from accelerate.config.env import read_launch_env
from accelerate.diagnostics.watchdog import SLOT, start_watchdog, stop_watchdog
from accelerate.state.distributed_type import process_distributed_type
from accelerate.state.environment import ClusterEnvironment, detect_environment
from accelerate.state.process_group import GroupRequest, group_timeout, init_or_adopt, release_unused_groups
from accelerate.state.shared import (
    SharedStateView,
    adopt_held,
    fork_launched,
    mark_reset,
    set_device,
    was_reset,
)
from accelerate.state.teardown import on_shutdown, stop_background_work
from accelerate.state.xla import detect_xla

F = TypeVar("F", bound=Callable[..., Any])

_STATE: PartialState | None = None


def _pick_device(local_rank: int, cpu: bool) -> torch.device:
    if cpu:
        return torch.device("cpu")
    if torch.cuda.is_available():
        # local_rank counts the GPUs visible to this node's processes.
        return torch.device("cuda", local_rank % max(torch.cuda.device_count(), 1))
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        return torch.device("xpu", local_rank % max(xpu.device_count(), 1))
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _default_backend(device: torch.device) -> str:
    return {"cuda": "nccl", "xpu": "xccl"}.get(device.type, "gloo")


class PartialState:
    """The process's place in the job, its device, and rank helpers.

    Example:
        >>> state = PartialState()
        >>> with state.main_process_first():
        ...     prepare_dataset()  # the main process builds the cache, the others then read it
    """

    _initialized: bool = False
    # Upstream's names for "the shared attributes" and "forget them" (transformers reads both).
    _shared_state = SharedStateView(lambda: _STATE)

    @classmethod
    def _reset_state(cls) -> None:
        """Upstream's test helper: forgets the state; a reference still held answers nothing until a new one exists.

        Reading a state attribute from such a reference raises an ``AttributeError`` that names this
        reset (as upstream's does); once a new ``PartialState`` exists, the reference reads that one
        (upstream's states share one dict), so an older Accelerator keeps working.
        """
        held = _STATE
        reset_process_state()
        if held is not None:
            mark_reset(held)

    def __new__(cls, *args: Any, **kwargs: Any) -> PartialState:
        global _STATE
        if _STATE is None:
            _STATE = super().__new__(cls)
            adopt_held(_STATE)
        return _STATE

    def __init__(
        self,
        cpu: bool = False,
        *,
        backend: str | None = None,
        timeout: timedelta | None = None,
        init_method: str | None = None,
        environment: ClusterEnvironment | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs:
            raise TypeError(f"PartialState() got unexpected keyword arguments: {sorted(kwargs)}")
        launch = read_launch_env()
        cpu = bool(cpu or launch.cpu)
        if self._initialized:
            self._check_same(cpu=cpu, backend=backend)
            return
        # Where torch_xla is installed (and CPU is not forced) the process runs on its XLA device,
        # and torch_xla's runtime, not torch.distributed, knows the ranks.
        xla = detect_xla(cpu)
        env = environment if environment is not None else (xla.environment if xla else detect_environment())
        self.environment = env
        self._cpu = cpu
        self._debug = bool(launch.debug)
        if xla:
            self.device = xla.device
        elif launch.torch_device:
            # Named by the caller (a test harness, a scheduler wrapper): taken as given, like upstream.
            self.device = _named_device(launch.torch_device)
        else:
            self.device = _pick_device(env.local_rank, cpu)
        if self.device.type == "cuda" and self.device.index is not None:
            torch.cuda.set_device(self.device)
        self.backend: str | None = None
        self.distributed_type = process_distributed_type(self.device.type, env.world_size, xla=bool(xla))
        if xla:
            self.backend = "xla"
            # Debug mode's cross-process check talks through a torch.distributed store, which XLA
            # processes do not share: the collectives run unchecked there.
            bind_communicator(xla.communicator(env))
            self._initialized = True
            return
        if env.is_distributed:
            # The group's real backend, also when an existing group was adopted (that warns,
            # naming each requested setting it could not apply).
            request = GroupRequest(backend=backend, timeout=timeout, init_method=init_method)
            self.backend = init_or_adopt(env, request, _default_backend(self.device))
            # Ranks that stop meeting in collectives end with a report instead of hanging.
            start_watchdog(
                rank=env.rank,
                world_size=env.world_size,
                timeout=group_timeout(request),
                report_dir=launch.hang_report_dir,
            )
            on_shutdown(stop_watchdog)
        # The collectives learn the group's facts from here, not from torch.distributed globals.
        bind_communicator(
            make_communicator(
                world_size=env.world_size,
                rank=env.rank,
                backend=self.backend,
                debug=self.debug,
                debug_timeout=launch.debug_timeout,
            )
        )
        self._initialized = True

    # --- construction helpers -------------------------------------------------------------
    def _check_same(self, *, cpu: bool, backend: str | None) -> None:
        if cpu and not self._cpu and self.device.type != "cpu":
            raise ValueError(
                f"PartialState was already created on {self.device} (cpu=False); a later call asked for "
                "cpu=True. Create the first Accelerator/PartialState with cpu=True, or drop the second flag."
            )
        if backend is not None and self.backend is not None and backend != self.backend:
            raise ValueError(
                f"The process group already uses backend {self.backend!r}; a later call asked for "
                f"{backend!r}. Pass the backend to the first Accelerator/PartialState only."
            )

    def __getattr__(self, name: str) -> Any:
        # Reached only when ordinary lookup fails: a typo, or a reference held across _reset_state().
        if was_reset(self) and name in _state_attributes(type(self)):
            raise AttributeError(
                f"`PartialState` object has no attribute `{name}`. This happens if `PartialState._reset_state()` "
                "was called and an `Accelerator` or `PartialState` was not reinitialized: create a new one "
                "(`PartialState()`) and read it from that."
            )
        raise AttributeError(f"'PartialState' object has no attribute {name!r}")

    # --- facts ----------------------------------------------------------------------------
    @property
    def initialized(self) -> bool:
        return self._initialized

    @property
    def debug(self) -> bool:
        """Debug mode: collectives first check every process's shapes (``ACCELERATE_DEBUG_MODE``).

        Settable at run time (``state.debug = True``, on every process at the same point), as upstream's
        operation checks allow; the collectives read it from the bound communicator.
        """
        return self._debug

    @debug.setter
    def debug(self, value: bool) -> None:
        self._debug = bool(value)
        communicator = current_communicator()
        # A communicator that cannot run the checks (XLA: no shared store) stays unchecked.
        if communicator.can_check_shapes:
            communicator.debug = self._debug

    @property
    def num_processes(self) -> int:
        return self.environment.world_size

    @property
    def process_index(self) -> int:
        return self.environment.rank

    @property
    def local_process_index(self) -> int:
        return self.environment.local_rank

    @property
    def num_processes_per_node(self) -> int:
        return self.environment.local_world_size

    @property
    def is_main_process(self) -> bool:
        return self.process_index == 0

    @property
    def is_local_main_process(self) -> bool:
        return self.local_process_index == 0

    @property
    def is_last_process(self) -> bool:
        return self.process_index == self.num_processes - 1

    @property
    def use_distributed(self) -> bool:
        return self.num_processes > 1

    @property
    def use_cpu(self) -> bool:
        return self.device.type == "cpu"

    @property
    def default_device(self) -> torch.device:
        return self.device

    @property
    def fork_launched(self) -> bool:
        """True when a launcher started this process by ``fork`` (notebook_launcher/debug_launcher)."""
        return fork_launched()

    def set_device(self) -> None:
        """Makes this process's device the current one of its backend (done at creation already)."""
        set_device(self.device)

    def __repr__(self) -> str:
        return (
            f"Distributed environment: {self.distributed_type}{'  Backend: ' + self.backend if self.backend else ''}\n"
            f"Num processes: {self.num_processes}\nProcess index: {self.process_index}\n"
            f"Local process index: {self.local_process_index}\nDevice: {self.device}\n"
        )

    # --- synchronisation --------------------------------------------------------------------
    def wait_for_everyone(self) -> None:
        """Blocks until every process reaches this call (a no-op in one process)."""
        if self.use_distributed:
            with SLOT.enter("wait_for_everyone"):  # the hang watchdog's record
                check_arrival("wait_for_everyone")
                current_communicator().barrier()  # the backend's own barrier (torch.distributed, torch_xla)

    @contextlib.contextmanager
    def _goes_first(self, is_first: bool) -> Iterator[None]:
        if not is_first:
            self.wait_for_everyone()
        yield
        if is_first:
            self.wait_for_everyone()

    def main_process_first(self) -> contextlib.AbstractContextManager[None]:
        """The main process runs the block first; the others run it once it has finished."""
        return self._goes_first(self.is_main_process)

    def local_main_process_first(self) -> contextlib.AbstractContextManager[None]:
        """Like :meth:`main_process_first`, once per node."""
        return self._goes_first(self.is_local_main_process)

    # --- decorators -------------------------------------------------------------------------
    def _only_if(self, function: F, condition: Callable[[], bool]) -> F:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if condition():
                return function(*args, **kwargs)
            return None

        return wrapper  # type: ignore[return-value]

    def on_main_process(self, function: F | None = None) -> Any:
        """Decorator: the function runs on the main process only (returns None elsewhere).

        Works bare (``@state.on_main_process``) and called (``@state.on_main_process()``).
        """
        if function is None:
            return self.on_main_process
        return self._only_if(function, lambda: self.is_main_process)

    def on_local_main_process(self, function: F | None = None) -> Any:
        if function is None:
            return self.on_local_main_process
        return self._only_if(function, lambda: self.is_local_main_process)

    def on_last_process(self, function: F) -> F:
        return self._only_if(function, lambda: self.is_last_process)

    def on_process(self, function: F | None = None, process_index: int | None = None) -> Any:
        """Decorator: runs on process ``process_index`` only. ``@state.on_process(process_index=1)``."""
        if process_index is None:
            raise TypeError("on_process needs process_index=..., e.g. @state.on_process(process_index=1)")
        if function is None:
            return functools.partial(self.on_process, process_index=process_index)
        return self._only_if(function, lambda: self.process_index == process_index)

    def on_local_process(self, function: F | None = None, local_process_index: int | None = None) -> Any:
        if local_process_index is None:
            raise TypeError("on_local_process needs local_process_index=...")
        if function is None:
            return functools.partial(self.on_local_process, local_process_index=local_process_index)
        return self._only_if(function, lambda: self.local_process_index == local_process_index)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """`print` on the local main process only."""
        if self.is_local_main_process:
            print(*args, **kwargs)

    # --- work splitting -----------------------------------------------------------------------
    @contextlib.contextmanager
    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Iterator[Any]:
        """Yields this process's share of ``inputs`` (list, tuple, tensor, `datasets.Dataset`, or a dict of them).

        Shares differ by at most one element (earlier processes get the extra). With
        ``apply_padding=True`` the shorter shares are padded with the last element so every process
        gets the same length (useful before a gather; drop the padding afterwards).
        """
        yield split_for_process(inputs, self.num_processes, self.process_index, apply_padding)

    def destroy_process_group(self, group: Any = None) -> None:
        """Stops the library's background work, then destroys the process group (safe to repeat).

        With ``group`` (a subgroup the caller made) only that group is destroyed.

        Wrappers such as DistributedDataParallel may keep the group's threads alive after this;
        the exit handler (:mod:`accelerate.state.teardown`) releases them before the interpreter
        finalises.
        """
        if group is not None:
            dist.destroy_process_group(group)
            return
        stop_background_work()
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        release_unused_groups()


def split_for_process(inputs: Any, num_processes: int, index: int, apply_padding: bool = False) -> Any:
    """The ``index``-th of ``num_processes`` contiguous shares of ``inputs``; see split_between_processes."""
    if num_processes == 1:
        return inputs
    if isinstance(inputs, Mapping):
        lengths = {key: _length(value, f"inputs[{key!r}]") for key, value in inputs.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(
                f"split_between_processes needs dict values of one length; got lengths {lengths}"
            )
        return {k: split_for_process(v, num_processes, index, apply_padding) for k, v in inputs.items()}
    length = _length(inputs, "inputs")
    per, extra = divmod(length, num_processes)
    start = index * per + min(index, extra)
    end = start + per + (1 if index < extra else 0)
    if _is_hf_dataset(inputs):
        return _select_share(inputs, length, start, end, per + (1 if extra else 0), apply_padding)
    share = inputs[start:end]
    if apply_padding and extra and index >= extra and length > 0:
        last = inputs[-1:]  # a slice keeps the container type (list, tuple or tensor)
        share = torch.cat([share, last]) if isinstance(share, torch.Tensor) else share + last
    return share


def _is_hf_dataset(value: Any) -> bool:
    """A `datasets.Dataset` (looked up only if the caller's code imported `datasets`)."""
    datasets = sys.modules.get("datasets")
    dataset_type = getattr(datasets, "Dataset", None)
    return isinstance(dataset_type, type) and isinstance(value, dataset_type)


def _select_share(
    dataset: Any, length: int, start: int, end: int, padded_length: int, apply_padding: bool
) -> Any:
    """A `datasets.Dataset` share, as upstream makes it: ``dataset.select`` of the share's rows.

    With ``apply_padding`` a shorter share is completed with the dataset's last row (as lists and
    tensors are); without it, a process past the end of the data gets no rows.
    """
    rows = list(range(min(start, length), min(end, length)))
    if apply_padding and length > 0:
        rows += [length - 1] * (padded_length - len(rows))
    return dataset.select(rows)


def _length(value: Any, where: str) -> int:
    if isinstance(value, torch.Tensor):
        return int(value.shape[0]) if value.dim() > 0 else 1
    if isinstance(value, Sequence) and not isinstance(value, str | bytes) or _is_hf_dataset(value):
        return len(value)
    raise TypeError(
        f"split_between_processes cannot split {where} of type {type(value).__name__}: give a list, tuple, "
        "tensor, datasets.Dataset, or a dict of those (materialise generators with list(...) first)"
    )


def _named_device(name: str) -> torch.device:
    try:
        return torch.device(name)
    except RuntimeError:
        raise ValueError(
            f"ACCELERATE_TORCH_DEVICE={name!r} is not a torch device; use a name such as 'cuda:0', 'cpu' or "
            "'xpu:1', or unset it to let the process pick its device from its rank."
        ) from None


# The instance attributes __init__ sets; with the properties, what a reset reference must not answer.
_INSTANCE_ATTRIBUTES = frozenset({"environment", "_cpu", "_debug", "device", "backend", "distributed_type"})


def _state_attributes(cls: type) -> frozenset[str]:
    properties = {
        name for klass in cls.__mro__ for name, value in vars(klass).items() if isinstance(value, property)
    }
    return _INSTANCE_ATTRIBUTES | properties


def current_process_state() -> PartialState | None:
    """This process's state once a ``PartialState`` (or an Accelerator) made it, else None; creates nothing."""
    return _STATE if _STATE is not None and _STATE.initialized else None


def reset_process_state(destroy_process_group: bool = False) -> None:
    """Forgets the per-process state (tests). The process group survives unless asked."""
    global _STATE
    if destroy_process_group and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
        release_unused_groups()
    _STATE = None
    bind_communicator(None)
    stop_watchdog()
