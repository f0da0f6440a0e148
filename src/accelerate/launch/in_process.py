"""Launching a function (not a script) on several processes: `notebook_launcher` and `debug_launcher`.

Both run the function under torch.distributed.run's elastic agent, hosted in the calling process,
with the same ACCELERATE_* environment contract `accelerate launch` writes. Processes are forked
where the platform allows it (a function defined in a notebook cell cannot be pickled for spawn),
which is why CUDA must not be initialised in the parent and no Accelerator may exist there yet.
"""

from __future__ import annotations

import contextlib
import gc
import io
import logging
import multiprocessing
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from accelerate.config.env import write_launch_env
from accelerate.launch.checks import check_count, check_mixed_precision_setting
from accelerate.launch.failures import report_failures
from accelerate.launch.plan import Setting
from accelerate.launch.restarts import reporting_restarts
from accelerate.launch.runner import patched_environ, preserved_signals
from accelerate.utils.ports import find_free_port, port_is_free


def _argument(launcher: str, name: str, value: Any) -> Setting:
    """An argument of the launcher as a setting, so it goes through the same checks as `accelerate launch`."""
    return Setting(name, value, f"{launcher}({name}=...)")


class LaunchedProcessError(RuntimeError):
    """A process started by notebook_launcher/debug_launcher failed; the message has its traceback."""


def _worker(function: Callable[..., Any], args: tuple[Any, ...], single_thread: bool) -> Any:
    """Runs in each started process: a clean accelerate state, then the user's function."""
    from accelerate.state import reset_state

    # A forked child inherits the parent's (empty) per-process state objects; start from nothing.
    reset_state()
    if single_thread:
        import torch

        # OMP_NUM_THREADS is read once at start-up, before the fork, so set the pool size directly;
        # several processes sharing the cores each with a full pool only slows every one of them.
        torch.set_num_threads(1)
    return function(*args)


def _refuse_if_parent_is_initialised(launcher: str) -> None:
    import torch

    from accelerate.state import state_is_initialized

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        raise RuntimeError(
            f"{launcher}: CUDA was already initialised in this process, so it cannot start new processes "
            "that use the GPU. Restart the notebook kernel and make sure no cell touches CUDA (moving a "
            "tensor or model to 'cuda', torch.cuda.* calls) before calling the launcher."
        )
    if state_is_initialized():
        raise RuntimeError(
            f"{launcher}: an Accelerator (or PartialState) was already created in this process. Create it "
            "inside the function you launch instead, restart the notebook kernel, and run the launcher "
            "before any cell creates one."
        )


def _launch(
    launcher: str,
    function: Callable[..., Any],
    args: Sequence[Any],
    *,
    num_processes: int,
    env: Mapping[str, str],
    port: int,
    master_addr: str,
    node_rank: int,
    num_nodes: int,
    rdzv_backend: str,
    rdzv_endpoint: str,
    rdzv_conf: Mapping[str, Any] | None,
    rdzv_id: str,
    max_restarts: int,
    monitor_interval: float,
    log_line_prefix_template: str | None,
    single_thread: bool,
) -> dict[int, Any]:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    configs: dict[str, Any] = dict(rdzv_conf or {})
    if rdzv_backend == "static":
        configs["rank"] = node_rank
    config = LaunchConfig(
        min_nodes=num_nodes,
        max_nodes=num_nodes,
        nproc_per_node=num_processes,
        run_id=rdzv_id,
        rdzv_endpoint=rdzv_endpoint or f"{master_addr}:{port}",
        rdzv_backend=rdzv_backend,
        rdzv_configs=configs,
        max_restarts=max_restarts,
        monitor_interval=monitor_interval,
        start_method="fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn",
        log_line_prefix_template=log_line_prefix_template,
    )
    error: LaunchedProcessError | None = None
    # Garbage this process still holds (an earlier launch's, say) is collected here, not in the
    # forked processes, which would tear down copies of objects they do not own.
    gc.collect()
    with (
        patched_environ(env),
        preserved_signals(),
        reporting_restarts(sys.stderr),
        _no_live_tracebacks_in_torch_logs(),
    ):
        try:
            results: dict[int, Any] = elastic_launch(config, _worker)(function, tuple(args), single_thread)
        except ChildFailedError as failure:
            report = io.StringIO()
            report_failures(failure.failures, report)
            print(report.getvalue(), file=sys.stderr)
            error = LaunchedProcessError(
                f"{launcher}: {len(failure.failures)} process(es) failed.{report.getvalue()}"
            )
            # torch's traceback holds the elastic agent's frames, and through them the rendezvous
            # TCPStore. Raised from here, the error would keep the store (and its port) alive for as
            # long as the caller keeps the error (pytest, a notebook's sys.last_value).
            traceback.clear_frames(failure.__traceback__)
            failure.__traceback__ = None
        finally:
            # Whatever the launch left in reference cycles goes now, in this process, not in the
            # next launch's forked processes.
            gc.collect()
    if error is not None:
        raise error  # outside the except block: no __context__ back to torch's failure
    return results


class _RenderedTracebacks(logging.Filter):
    """Renders a record's exception into its text and drops the live traceback.

    torch's elastic agent logs a failed worker with ``logger.exception``; the record's traceback
    holds the agent's frames, and through them the rendezvous TCPStore (a server thread on the
    launch's port). A handler that keeps records (pytest's log capture, a notebook's log viewer)
    would keep that store alive after the launch, and once the record is dropped the frames
    form reference cycles that a later launch's forked processes may be the first to collect,
    hanging in the store's teardown there. The logged text is unchanged.
    """

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[0] is not None:
            if not record.exc_text:
                record.exc_text = self._formatter.formatException(record.exc_info)
            record.exc_info = None
        return True


@contextlib.contextmanager
def _no_live_tracebacks_in_torch_logs() -> Iterator[None]:
    """Puts `_RenderedTracebacks` on torch.distributed's loggers for the block."""
    loggers = [logging.getLogger(name) for name in _TORCH_LAUNCH_LOGGERS]
    loggers += [
        logger
        for name, logger in list(logging.Logger.manager.loggerDict.items())
        if name.startswith("torch.distributed") and isinstance(logger, logging.Logger)
    ]
    rendered = _RenderedTracebacks()
    for logger in loggers:
        logger.addFilter(rendered)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(rendered)


# Created (if torch has not yet) so the filter is on them before the launch first logs.
_TORCH_LAUNCH_LOGGERS = (
    "torch.distributed.elastic.multiprocessing.api",
    "torch.distributed.elastic.agent.server.api",
    "torch.distributed.elastic.agent.server.local_elastic_agent",
    "torch.distributed.launcher.api",
    "torch.multiprocessing.spawn",
)


def _check_port(launcher: str, port: int, node_rank: int) -> None:
    if node_rank == 0 and not port_is_free(port):
        raise RuntimeError(
            f"{launcher}: port {port} is already in use on this machine (another launch still running?). "
            "Pass a free one with use_port=..."
        )


def notebook_launcher(
    function: Callable[..., Any],
    args: Sequence[Any] = (),
    num_processes: int | None = None,
    mixed_precision: str = "no",
    use_port: str = "29500",
    master_addr: str = "127.0.0.1",
    node_rank: int = 0,
    num_nodes: int = 1,
    rdzv_backend: str = "static",
    rdzv_endpoint: str = "",
    rdzv_conf: Mapping[str, Any] | None = None,
    rdzv_id: str = "none",
    max_restarts: int = 0,
    monitor_interval: float = 0.1,
    log_line_prefix_template: str | None = None,
) -> Any:
    """Runs ``function(*args)`` on several processes, from a notebook or any Python code.

    Without ``num_processes`` it starts one process per visible GPU, or, without a GPU, calls the
    function once in this process (and says how to ask for more). With ``num_processes=N`` and no
    GPU it starts N CPU processes on gloo.

    Example:
        >>> def training_function():
        ...     accelerator = Accelerator()
        ...     ...
        >>> notebook_launcher(training_function, num_processes=2)

    Returns:
        The function's return value in a single process; otherwise ``None`` (each process returns
        its own value, which stays in that process).

    Raises:
        RuntimeError: CUDA or an Accelerator was already initialised here, or the port is busy.
        LaunchedProcessError: a started process raised; the message carries its traceback.
    """
    launcher = "notebook_launcher"
    mixed_precision = check_mixed_precision_setting(_argument(launcher, "mixed_precision", mixed_precision))
    check_count(_argument(launcher, "num_processes", num_processes))
    from accelerate.state.xla import xla_requested

    if xla_requested():  # torch_xla installed (Colab/Kaggle TPU, TPU VM): its processes, one per device
        from accelerate.launch.xla_notebook import launch_on_xla

        return launch_on_xla(launcher, function, args, num_processes, mixed_precision)
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if num_processes is None:
        if gpus > 1:
            num_processes = gpus
        else:
            num_processes = 1
            if gpus == 0:
                print(
                    f"{launcher}: no GPU visible, running the function in this process on CPU. Pass "
                    "num_processes=N to run N CPU processes."
                )
    env = write_launch_env({"mixed_precision": mixed_precision, "cpu": gpus == 0 or None})
    if num_processes == 1 and num_nodes == 1:
        with patched_environ(env):
            return function(*args)
    _refuse_if_parent_is_initialised(launcher)
    port = int(use_port)
    if not rdzv_endpoint:
        _check_port(launcher, port, node_rank)
    single_thread = gpus == 0 and "OMP_NUM_THREADS" not in os.environ
    _launch(
        launcher, function, args, num_processes=num_processes, env=env, port=port, master_addr=master_addr,
        node_rank=node_rank, num_nodes=num_nodes, rdzv_backend=rdzv_backend, rdzv_endpoint=rdzv_endpoint,
        rdzv_conf=rdzv_conf, rdzv_id=rdzv_id, max_restarts=max_restarts, monitor_interval=monitor_interval,
        log_line_prefix_template=log_line_prefix_template, single_thread=single_thread,
    )  # fmt: skip
    return None


def debug_launcher(function: Callable[..., Any], args: Sequence[Any] = (), num_processes: int = 2) -> None:
    """Runs ``function(*args)`` on ``num_processes`` CPU processes (gloo), for tests and debugging.

    Example:
        >>> debug_launcher(training_function, num_processes=2)
    """
    launcher = "debug_launcher"
    check_count(_argument(launcher, "num_processes", num_processes))
    _refuse_if_parent_is_initialised(launcher)
    env = write_launch_env({"cpu": True})
    _launch(
        launcher, function, args, num_processes=num_processes, env=env, port=find_free_port(),
        master_addr="127.0.0.1", node_rank=0, num_nodes=1, rdzv_backend="static", rdzv_endpoint="",
        rdzv_conf=None, rdzv_id="none", max_restarts=0, monitor_interval=0.1, log_line_prefix_template=None,
        single_thread="OMP_NUM_THREADS" not in os.environ,
    )  # fmt: skip
