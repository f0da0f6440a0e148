"""``save_state(async_save=True)``: snapshot now, write, fsync and commit on a background thread.

The caller's thread does what needs every rank at once and what must see the state as it is now:
it waits for the previous background save, copies the state to host memory (snapshot.py), and runs
the staging exchange of the synchronous path (training_state.py), a collective. Then it returns,
and a writer thread per process writes that process's files, checksummed and fsynced exactly as
the synchronous path does, and the writers commit (manifest last, atomic rename) and rotate old
checkpoints only after the commit.

The ranks must still agree on the commit: a writer may only publish the folder once every rank's
files are durable, and every rank must learn whether it did. The synchronous path does that with
``all_gather_object``; on a background thread a collective would interleave with the training
loop's own collectives on the same group, pairing the wrong calls (or deadlocking). The writer
threads talk through the process group's key-value store instead, under keys unique to this save:
each rank posts its file records (or its error), the writers post their commit's outcome, and
every rank waits for those. Nothing on the writer thread touches the process group.

The next ``save_state``, ``load_state``, ``end_training``, ``destroy_process_group`` or the
interpreter's exit waits for the thread; an error in it is raised by the next of those calls that
can raise (at exit it is printed), naming the folder. At most one snapshot is in flight, so the
cost is one host copy of the state while a save is being written.
"""

from __future__ import annotations

import logging
import os
import pickle
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from accelerate.checkpointing.rng import capture_rng_state
from accelerate.checkpointing.snapshot import HostBuffers, host_copy, snapshot_objects
from accelerate.checkpointing.training_state import (
    ProcessInfo,
    _stage,
    explain_failure,
    manifest_extra,
    write_rank_files,
    writer_and_node,
)
from accelerate.state.teardown import on_shutdown
from accelerate.storage.atomic import AtomicCheckpoint
from accelerate.storage.durable_io import FileRecord, ensure_helper
from accelerate.storage.errors import CheckpointError

logger = logging.getLogger(__name__)

__all__ = ["async_save_in_flight", "start_async_save", "wait_for_async_save"]

_PREFIX = "accelerate/async_save"
# How long rank 0 (which usually hosts the store) keeps it up for the others to read the outcome.
_LINGER_S = 60.0


def _describe(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _default_store() -> Any:
    getter = getattr(dist.distributed_c10d, "_get_default_store", None)
    if getter is None:  # pragma: no cover - every torch we support has it
        raise CheckpointError(
            "save_state(async_save=True) on several processes needs torch.distributed's key-value store "
            "(torch.distributed.distributed_c10d._get_default_store), which this torch lacks; save "
            "synchronously (async_save=False)"
        )
    return getter()


class StoreExchange:
    """Posts and collects small per-rank values through the store, polling (never blocking it).

    A blocking ``store.wait`` would hold the store client's lock for as long as it waits, stalling
    the training thread's own store calls; ``check`` returns at once.
    """

    def __init__(self, store: Any, token: str, rank: int) -> None:
        self.store = store
        self.base = f"{_PREFIX}/{token}"
        self.rank = rank
        timeout = getattr(store, "timeout", None)
        self.timeout_s = timeout.total_seconds() if isinstance(timeout, timedelta) else 1800.0

    def post(self, kind: str, value: Any) -> None:
        self.store.set(f"{self.base}/{kind}/{self.rank}", pickle.dumps(value))

    def forget(self, kinds: Iterable[str], ranks: Iterable[int]) -> None:
        """Deletes the keys of ``kinds`` posted by ``ranks`` (absent ones are skipped)."""
        ranks = list(ranks)
        for kind in kinds:
            for r in ranks:
                self.store.delete_key(f"{self.base}/{kind}/{r}")

    def collect(
        self, kind: str, ranks: Iterable[int], *, what: str, timeout_s: float | None = None
    ) -> dict[int, Any]:
        ranks = list(ranks)
        keys = [f"{self.base}/{kind}/{r}" for r in ranks]
        limit = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit
        delay = 0.001
        while not self.store.check(keys):
            if time.monotonic() > deadline:
                missing = [r for r, key in zip(ranks, keys, strict=True) if not self.store.check([key])]
                raise CheckpointError(
                    f"{what}: rank(s) {', '.join(map(str, missing))} did not report within {limit:.0f} s "
                    "(a process died or stopped calling save_state?)"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        return {r: pickle.loads(self.store.get(key)) for r, key in zip(ranks, keys, strict=True)}


@dataclass
class _Job:
    """One background save: what the writer thread needs, and how it ended."""

    ckpt: AtomicCheckpoint
    state: ProcessInfo
    writer: bool
    node: int
    writers: list[int]
    token: str
    step: int
    shared: dict[str, Any]
    rng_state: dict[str, Any]
    after_commit: Callable[[Path], None] | None
    on_end: Callable[[], None] | None = None
    host_buffers: list[torch.Tensor] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def run(self) -> None:
        try:
            self._save()
        except CheckpointError as exc:  # already names the folder
            self.error = exc
        except BaseException as exc:  # noqa: BLE001 - kept for the next call on the training thread
            # The store or a rotation failed: still say which save it was.
            error = CheckpointError(
                f"The background save_state(async_save=True) to {self.ckpt.target} failed: {_describe(exc)}"
            )
            error.__cause__ = exc
            self.error = error
        finally:
            # The snapshot is written: its memory serves the next one (the job holds no copy).
            self.shared, self.rng_state = {}, {}
            _BUFFERS.give_back(self.host_buffers)
            self.host_buffers = []
            if self.on_end is not None:
                self.on_end()
            self.done.set()

    def _failure(self, details: str, cause: BaseException | None) -> CheckpointError:
        error = CheckpointError(
            f"The background save_state(async_save=True) to {self.ckpt.target} failed: {details}; nothing "
            "was committed there, the previous checkpoint is untouched"
        )
        error.__cause__ = cause
        return error

    def _write(self) -> tuple[dict[str, FileRecord], Exception | None]:
        try:
            records = write_rank_files(
                self.ckpt,
                writer=self.writer,
                process_index=self.state.process_index,
                shared=self.shared,
                rng_state=self.rng_state,
            )
            return records, None
        except Exception as exc:
            return {}, explain_failure(exc, self.ckpt, self.shared)

    def _save(self) -> None:
        records, error = self._write()
        extra = manifest_extra(self.shared)
        world = self.state.num_processes
        if world == 1:
            if error is not None:
                self.ckpt.abort()
                raise self._failure(_describe(error), error)
            self.ckpt.update(records)
            try:
                self.ckpt.commit(step=self.step, world_size=1, extra=extra)
            except Exception as exc:
                self.ckpt.abort()
                raise self._failure(_describe(exc), exc) from exc
            self._after_commit()
            return
        rank = self.state.process_index
        exchange = StoreExchange(_default_store(), self.token, rank)
        what = f"The background save_state(async_save=True) to {self.ckpt.target}"
        exchange.post("files", (_describe(error) if error is not None else None, self.node, records))
        if self.writer:
            exchange.post("commit", self._commit(exchange, what, extra))
        outcomes = exchange.collect("commit", self.writers, what=what)
        failed = {r: report for r, report in outcomes.items() if report is not None}
        exchange.post("done", True)
        if rank == 0:  # the store usually lives in this process: keep it up while the others read
            try:
                exchange.collect("done", range(world), what=what, timeout_s=_LINGER_S)
            except CheckpointError as exc:
                logger.warning("%s", exc)
            else:  # everyone has read everything: the store need not keep this save's keys
                exchange.forget(["files", "commit", "done"], range(world))
        if failed:
            raise self._failure("; ".join(failed.values()), error)
        self._after_commit()

    def _commit(self, exchange: StoreExchange, what: str, extra: dict[str, Any]) -> str | None:
        """The writer's part: every rank's records in, then the manifest; None or what went wrong."""
        try:
            reports = exchange.collect("files", range(self.state.num_processes), what=what)
        except CheckpointError as exc:
            self.ckpt.abort()
            return str(exc)
        failed = {r: report for r, (report, _, _) in reports.items() if report is not None}
        if failed:
            self.ckpt.abort()
            return "; ".join(f"rank {r}: {report}" for r, report in failed.items())
        for node, rank_records in (payload[1:] for payload in reports.values()):
            if node == self.node:
                self.ckpt.update(rank_records)
        try:
            self.ckpt.commit(step=self.step, world_size=self.state.num_processes, extra=extra)
        except Exception as exc:  # noqa: BLE001 - reported to every rank through the store
            self.ckpt.abort()
            return f"rank {self.state.process_index}: committing: {_describe(exc)}"
        return None

    def _after_commit(self) -> None:
        if self.writer and self.after_commit is not None:
            self.after_commit(self.ckpt.target)


_LOCK = threading.Lock()
_BUFFERS = HostBuffers()  # the last snapshot's memory, reused by the next (one copy of the state)
_CURRENT: tuple[_Job, threading.Thread] | None = None
_EXIT_HOOKS_INSTALLED = False


def _forget_parent_save() -> None:
    """In a forked child: a background save in flight belongs to the parent, whose writer thread did
    not come along; the child neither waits for it nor reports it. The lock is made anew too."""
    global _CURRENT, _LOCK
    _CURRENT = None
    _LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parent_save)


def async_save_in_flight() -> bool:
    """Whether a background save is still being written."""
    current = _CURRENT
    return current is not None and not current[0].done.is_set()


def wait_for_async_save(*, raise_error: bool = True) -> None:
    """Waits for the background save, if any; raises its error (once) unless ``raise_error=False``.

    With ``raise_error=False`` an error stays pending for the next call that raises.
    """
    global _CURRENT
    with _LOCK:
        current = _CURRENT
    if current is None:
        return
    job, thread = current
    thread.join()
    if job.error is not None and not raise_error:
        return
    with _LOCK:
        if _CURRENT is current:
            _CURRENT = None
    if job.error is not None:
        raise job.error


def _wait_at_exit() -> None:
    """At exit nothing can raise to the script any more: the error is printed instead."""
    try:
        wait_for_async_save()
    except BaseException as exc:  # noqa: BLE001 - reported, exit goes on
        print(f"accelerate: {exc}", file=sys.stderr, flush=True)


def _stop() -> None:
    """Teardown: the writer finishes (its error stays pending) and the kept memory is released."""
    wait_for_async_save(raise_error=False)
    _BUFFERS.clear()


def _install_exit_hooks() -> None:
    """Exit and process-group teardown wait for the writer (once per process)."""
    global _EXIT_HOOKS_INSTALLED
    if _EXIT_HOOKS_INSTALLED:
        return
    _EXIT_HOOKS_INSTALLED = True
    # The checksum helper must stop after the writer (teardown stops the newest first).
    ensure_helper()
    on_shutdown(_stop)
    # Before concurrent.futures' own exit hook stops its pools (the writer still submits to one):
    # threading's exit hooks run newest first, before non-daemon threads are joined.
    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        register(_wait_at_exit)
    else:  # pragma: no cover - Python 3.9+ has it
        import atexit

        atexit.register(_wait_at_exit)


def start_async_save(
    output_dir: str | Path,
    *,
    state: ProcessInfo,
    models_state_dicts: Sequence[Any] = (),
    optimizers: Sequence[Any] = (),
    schedulers: Sequence[Any] = (),
    dataloaders: Sequence[Any] = (),
    scaler: Any = None,
    custom_objects: Sequence[Any] = (),
    step: int = 0,
    safe_serialization: bool = True,
    save_on_each_node: bool = False,
    pending_gradients: Sequence[dict[str, torch.Tensor]] | None = None,
    after_commit: Callable[[Path], None] | None = None,
    on_end: Callable[[], None] | None = None,
) -> Path:
    """Snapshots the state and starts writing it in the background; call it on every process.

    Arguments as :func:`save_training_state`; ``after_commit(folder)`` runs on the writing
    process's thread once the checkpoint is committed on every writer (rotation); ``on_end()`` runs
    there when the save ends, committed or not (the project lock's release).

    Returns:
        The folder the checkpoint will be committed to.

    Raises:
        CheckpointError: the previous background save's error; or, on every rank, a failure to
            take the snapshot or to create the staging folder on any rank.
    """
    global _CURRENT
    wait_for_async_save()
    _install_exit_hooks()
    ckpt = AtomicCheckpoint(output_dir)
    writer, node = writer_and_node(state, save_on_each_node)
    error: BaseException | None = None
    shared: dict[str, Any] = {}
    rng_state: dict[str, Any] = {}
    host_buffers: list[torch.Tensor] = []
    try:
        rng_state = host_copy(capture_rng_state(step, dataloaders, pending_gradients))
        shared = snapshot_objects(
            buffers=_BUFFERS,
            models_state_dicts=models_state_dicts,
            optimizers=optimizers,
            schedulers=schedulers,
            dataloaders=dataloaders,
            scaler=scaler,
            custom_objects=custom_objects,
        )
        shared["safe_serialization"] = safe_serialization
        host_buffers = shared.pop("host_buffers")
    except Exception as exc:  # every rank raises it now, before anything is written
        error = exc
    paths = _stage(ckpt, writer=writer, node=node, error=error)
    job = _Job(
        ckpt=ckpt,
        state=state,
        writer=writer,
        node=node,
        writers=[rank for rank, (_, staging, _) in enumerate(paths) if staging is not None],
        token=paths[0][2],
        step=step,
        shared=shared,
        rng_state=rng_state,
        after_commit=after_commit,
        on_end=on_end,
        host_buffers=host_buffers,
    )
    thread = threading.Thread(target=job.run, name="accelerate-async-save", daemon=False)
    with _LOCK:
        _CURRENT = (job, thread)
    thread.start()
    return ckpt.target
