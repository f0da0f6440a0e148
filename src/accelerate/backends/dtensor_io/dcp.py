"""torch.distributed.checkpoint (DCP) folders inside our checksummed, manifest-committed checkpoints.

DCP writes one ``__{rank}_{n}.distcp`` file per process and a ``.metadata`` file from the
coordinator. Its writer is given a file system whose streams are :class:`ChecksumSink` s: each
file is checksummed from the page cache while DCP fsyncs it, and each process returns the records
of the files it wrote for the manifest. DCP itself fsyncs every file.

Loading goes through DCP's own planner, which reshards: a folder written by N processes loads into
a model sharded over M processes, or into a plain model (every process reads whole tensors).
"""

from __future__ import annotations

import os
from collections.abc import Generator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from accelerate.backends.dtensor_io.state_dict import check_shapes, global_shapes, raw_optimizer
from accelerate.storage.durable_io import ChecksumSink, FileRecord
from accelerate.storage.entry_names import entry_path
from accelerate.storage.errors import CheckpointError, DiskFullError, disk_full_error
from accelerate.storage.verified_read import file_record, file_record_soon, verify_file

METADATA_NAME = ".metadata"
MODEL_KEY = "model"
OPTIMIZER_KEY = "optimizer"


class _DcpSink(ChecksumSink):
    """A ChecksumSink with what DCP's writer also asks of its streams (``tell``, ``fileno``).

    Its checksum is not computed while the bytes are written (when hashing competes with the
    writing for the CPU) but from the page cache while DCP fsyncs the finished file, which waits
    on the disk: DCP asks for ``fileno()`` exactly then.
    """

    def __init__(self, fd: int, path: Path) -> None:
        super().__init__(fd, checksum=False)
        self._path = path
        self._pending: tuple[int, Future[FileRecord]] | None = None  # (size when started, record)

    def tell(self) -> int:
        return self.size + self.pending_bytes

    def fileno(self) -> int:
        self.drain()  # DCP fsyncs through it: the gathered bytes must be in the file first
        if self._pending is None or self._pending[0] != self.size:
            self._pending = (self.size, file_record_soon(self._path))
        return self._fd

    def checksummed(self) -> FileRecord:
        """The finished file's record: the one hashed during the fsync, unless bytes came after it."""
        if self._pending is not None:
            size, pending = self._pending
            record = pending.result()
            if size == self.size == record.size:
                return record
        return file_record(self._path)


def _writer_class() -> type:
    """A FileSystemWriter whose streams checksum what they write (built lazily: DCP is heavy)."""
    from torch.distributed.checkpoint import FileSystemWriter
    from torch.distributed.checkpoint.filesystem import FileSystem

    class RecordingFileSystem(FileSystem):
        def __init__(self) -> None:
            self.records: dict[Path, FileRecord] = {}
            self.disk_full: DiskFullError | None = None

        @contextmanager
        def create_stream(self, path: str | os.PathLike[str], mode: str) -> Generator[Any, None, None]:
            if mode != "wb":
                with super().create_stream(path, mode) as stream:
                    yield stream
                return
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            sink = _DcpSink(fd, Path(path))
            try:
                yield sink
                sink.drain()
            except BaseException as exc:
                # DCP wraps whatever its writer raised into its own CheckpointException; keep a
                # full disk's details for save_dcp to report.
                self.disk_full = self.disk_full or disk_full_error(sink.os_error or exc, path, sink.size)
                raise
            finally:
                os.close(fd)
            self.records[Path(path)] = sink.checksummed()

        def rename(self, path: str | os.PathLike[str], new_path: str | os.PathLike[str]) -> None:
            super().rename(path, new_path)  # the metadata file: written under .tmp, renamed whole
            record = self.records.pop(Path(path), None)
            if record is not None:
                self.records[Path(new_path)] = record

    class RecordingWriter(FileSystemWriter):
        def __init__(self, path: Path) -> None:
            super().__init__(path)
            self.fs = RecordingFileSystem()
            self.path = self.fs.init_path(path)

    return RecordingWriter


def save_dcp(state: dict[str, Any], folder: Path, *, root: Path) -> dict[str, FileRecord]:
    """``dcp.save(state)`` into ``folder`` (a collective); returns this process's files' records.

    The records are named relative to ``root`` (the checkpoint folder), e.g.
    ``pytorch_model_fsdp_0/__1_0.distcp``.
    """
    import torch.distributed.checkpoint as dcp

    writer = _writer_class()(folder)
    try:
        dcp.save(state, storage_writer=writer)
    except _dcp_errors() as exc:
        if writer.fs.disk_full is not None:  # this process ran out of space: say so, as other saves do
            raise writer.fs.disk_full from exc
        raise CheckpointError(f"Writing {folder} with torch.distributed.checkpoint failed: {exc}") from exc
    return {path.relative_to(root).as_posix(): rec for path, rec in writer.fs.records.items()}


def _dcp_errors() -> tuple[type[BaseException], ...]:
    """What a DCP save or load raises. Its CheckpointException (every rank's failure, raised on every
    rank) derives from BaseException, so a plain ``except Exception`` would let it through."""
    from torch.distributed.checkpoint.api import CheckpointException

    return (Exception, CheckpointException)


def verify_folder(
    records: Mapping[str, FileRecord], folder_name: str, folder: Path, *, rank: int, world_size: int
) -> None:
    """Checks this process's share of a DCP folder's files against the manifest (sizes, checksums)."""
    names = sorted(name for name in records if name.startswith(f"{folder_name}/"))
    if f"{folder_name}/{METADATA_NAME}" not in names:
        raise CheckpointError(f"{folder} has no {METADATA_NAME} listed in the manifest")
    for name in names[rank::world_size]:
        verify_file(entry_path(folder, name.split("/", 1)[1]), records[name])


def _saved_shapes(folder: Path, key: str) -> tuple[Any, dict[str, torch.Size]]:
    from torch.distributed.checkpoint import FileSystemReader

    if not (folder / METADATA_NAME).is_file():
        raise CheckpointError(f"{folder} is not a torch.distributed.checkpoint folder (no {METADATA_NAME})")
    reader = FileSystemReader(folder)
    metadata = reader.read_metadata()
    prefix = f"{key}."
    shapes = {
        name[len(prefix) :]: entry.size
        for name, entry in metadata.state_dict_metadata.items()
        if name.startswith(prefix) and hasattr(entry, "size")
    }
    return reader, shapes


def load_model_dcp(model: nn.Module, folder: Path, *, strict: bool = True, part: bool = False) -> None:
    """Loads a DCP model folder (``{"model": state}``) into ``model``, sharded or not; a collective.

    ``part``: ``model`` holds a part of the saved model (a pipeline stage): the checkpoint's other
    tensors are not unexpected.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        set_model_state_dict,
    )

    reader, saved = _saved_shapes(folder, MODEL_KEY)
    state = get_model_state_dict(model)
    expected = {name: shape for name, shape in saved.items() if name in state} if part else saved
    check_shapes(global_shapes(state.items()), expected, source=f"Checkpoint {folder}", strict=strict)
    if not strict:
        state = {name: value for name, value in state.items() if name in saved}
    try:
        dcp.load({MODEL_KEY: state}, storage_reader=reader)
    except _dcp_errors() as exc:
        raise CheckpointError(f"Loading the model state in {folder} failed: {exc}") from exc
    set_model_state_dict(model, state, options=StateDictOptions(strict=strict))


def load_optimizer_dcp(model: nn.Module, optimizer: Any, folder: Path) -> None:
    """Loads a DCP optimizer folder (``{"optimizer": state}``) into the optimizer of ``model``."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    inner = raw_optimizer(optimizer)
    reader, _ = _saved_shapes(folder, OPTIMIZER_KEY)
    # Creates the optimizer's state (a step with zero learning rate) so DCP has tensors to fill.
    state: Any = get_optimizer_state_dict(model, inner)
    own_names = [list(group["params"]) for group in state["param_groups"]]
    try:
        dcp.load({OPTIMIZER_KEY: state}, storage_reader=reader)
    except _dcp_errors() as exc:
        raise CheckpointError(
            f"Loading the optimizer state in {folder}: {exc}. Was it saved for this model and optimizer?"
        ) from exc
    _own_parameters_in_groups(state, own_names)
    set_optimizer_state_dict(model, inner, state)


def _own_parameters_in_groups(state: dict[str, Any], own_names: list[list[str]]) -> None:
    """Puts this optimizer's parameter names back into the loaded param groups when the state holds no
    per-parameter entries (plain SGD, or before the first step).

    The groups are one value in a DCP folder, written by one rank: the names of its parameters only,
    when each rank steps a part of the model (a pipeline stage). With per-parameter state, torch
    matches the groups by those names; without, it loads them as they are and finds groups of
    another size. The hyperparameters still come from the checkpoint, group by group.
    """
    loaded = state["param_groups"]
    if state["state"] or len(loaded) != len(own_names):
        return
    for group, names in zip(loaded, own_names, strict=True):
        group["params"] = names


def read_full_dcp(folder: Path) -> dict[str, Any]:
    """A DCP folder as one plain state dict, in this process alone (no process group needed)."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    state: dict[str, Any] = {}
    # The empty planner builds the state dict from the folder's metadata (DCP's own format_utils do
    # the same); no_dist reads every shard in this process.
    _load_state_dict(state, storage_reader=FileSystemReader(folder), planner=_EmptyStateDictLoadPlanner(), no_dist=True)  # fmt: skip
    return state
