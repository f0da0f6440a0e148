"""Crash-safe checkpoint folders: stage, fsync, write a manifest last, then publish all at once.

Every file is written through :class:`ChecksumSink`, which computes a checksum of the bytes as they
stream out and fsyncs at the end. The manifest (``accelerate_manifest.json``: every file's size and
checksum, world size, library version, step, and a checksum of the manifest itself) is written
last. A folder is *committed* exactly when it holds a readable manifest. Two ways to publish:

* **New folder** (``name`` does not exist yet): the checkpoint is built in the sibling
  ``parent/.name.tmp-accelerate`` and renamed to ``name`` in one step; the parent is fsynced so the
  rename survives a power cut.
* **Existing folder** (an older checkpoint, a folder holding the user's own files, a mount point, the
  working directory): the folder itself is never renamed. The checkpoint is built in
  ``name/.accelerate-staging`` (on the target's own filesystem) and its manifest is renamed into
  place there: that rename is the commit point. Files are then moved into ``name`` one by one and
  the manifest last. Until the staging folder is gone, readers take each listed file from the
  staging folder when it is still there and from ``name`` otherwise, so a crash anywhere in the
  move reads as the complete new checkpoint, and a crash before the commit point as the complete
  old one. Files that are not the checkpoint's are never touched.

Why XXH3 (or CRC-32 without the xxhash package): the job is catching truncation and bit rot, not
resisting an attacker, so a fast non-cryptographic hash fits. XXH3 runs at ~10 GB/s, CRC-32 at ~1;
either way large buffers are hashed on a helper thread while the same bytes are written or read
(both hashes and file I/O release the GIL), so the checksum costs almost no wall time.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from accelerate.storage.durable_io import (
    MANIFEST_NAME,
    FileRecord,
    SyncGroup,
    fsync_dir,
    write_bytes,
)
from accelerate.storage.entry_names import INNER_STAGING, entry_path, own_folder
from accelerate.storage.errors import CheckpointError, UntrustedCheckpointError
from accelerate.storage.manifest import Manifest, manifest_at
from accelerate.storage.verified_read import verify_file

STAGING_SUFFIX = ".tmp-accelerate"
OLD_SUFFIX = ".old-accelerate"
TRASH_SUFFIX = ".trash-accelerate"
# Inside an existing target folder, the checkpoint being built, then being moved in, is INNER_STAGING
# (imported above: entry_names keeps manifests from naming it).
_PARTIAL_MANIFEST = f"{MANIFEST_NAME}.partial"


def pending_manifest(directory: str | os.PathLike[str]) -> Manifest | None:
    """The manifest of a commit into an existing folder whose files are still being moved in.

    Raises:
        UntrustedCheckpointError: the staging area is a link, or its manifest lists a name outside
            the folder or has no self-checksum (every accelerate that stages inside a folder writes one).
    """
    staging = Path(directory) / INNER_STAGING
    if not own_folder(staging, what="a checkpoint's staging area"):
        return None
    try:
        manifest = manifest_at(entry_path(staging, MANIFEST_NAME, bookkeeping=True))
    except UntrustedCheckpointError:
        raise
    except CheckpointError:
        return None  # only ever renamed into place whole, so an unreadable one was never committed
    if manifest is not None and not manifest.signed:
        raise UntrustedCheckpointError(
            f"{staging / MANIFEST_NAME} is a pending commit without the manifest's own checksum, which every "
            "accelerate that commits this way writes: it was not written by accelerate, so none of its files "
            "are moved or deleted. Remove that staging folder if you did not put it there."
        )
    return manifest


def checkpoint_folder(directory: str | os.PathLike[str]) -> Path:
    """Where the checkpoint named ``directory`` is: itself, or the previous one a crash left aside.

    Older saves replaced a checkpoint by renaming it to ``.name.old-accelerate`` and the new one
    to ``name``; a crash between the two left only the hidden folder, which is still complete.
    """
    path = Path(directory)
    if path.exists():
        return path
    old = sibling(path.absolute(), OLD_SUFFIX)
    if old.is_dir() and (old / MANIFEST_NAME).is_file():
        return old
    return path


def read_manifest(directory: str | os.PathLike[str]) -> Manifest | None:
    """The folder's manifest, or None when it has none (e.g. a folder saved by upstream Accelerate).

    A commit that is still moving its files in counts: its manifest is returned (see
    :func:`checkpoint_file` for where each file is then).

    Raises:
        CheckpointError: when a manifest exists but cannot be read.
    """
    folder = checkpoint_folder(directory)
    pending = pending_manifest(folder)
    if pending is not None:
        return pending
    return manifest_at(entry_path(folder, MANIFEST_NAME, bookkeeping=True))


def checkpoint_file(directory: str | os.PathLike[str], name: str) -> Path:
    """Where a checkpoint's file ``name`` is now (the staging folder while a commit moves files in)."""
    folder = checkpoint_folder(directory)
    staging = folder / INNER_STAGING
    if own_folder(staging, what="a checkpoint's staging area") and (staging / MANIFEST_NAME).is_file():
        staged = entry_path(staging, name)
        if staged.is_file():
            return staged
    return entry_path(folder, name)


def is_committed(directory: str | os.PathLike[str]) -> bool:
    """True when ``directory`` is a checkpoint whose save completed (it has a valid manifest)."""
    try:
        return read_manifest(directory) is not None
    except (CheckpointError, OSError):
        return False


def verify_checkpoint(directory: str | os.PathLike[str]) -> Manifest:
    """Checks every file a committed checkpoint lists (presence, size, checksum).

    Raises:
        CheckpointError: naming the first missing, truncated or corrupted file, or saying the
            folder has no manifest (an interrupted save, or a folder not written by this library).
    """
    manifest = read_manifest(directory)
    if manifest is None:
        raise CheckpointError(
            f"{directory} has no {MANIFEST_NAME}: it is not a committed checkpoint (an interrupted save, "
            "or a folder written by another tool, which can be loaded but not verified)"
        )
    for name, record in manifest.files.items():
        verify_file(checkpoint_file(directory, name), record)
    return manifest


# --- folders --------------------------------------------------------------------------------------
# Most filesystems refuse a file name over 255 bytes (ENAMETOOLONG).
_NAME_MAX = 255


def sibling(target: Path, suffix: str) -> Path:
    """A hidden name next to ``target``; deterministic so every rank derives the same one."""
    return target.parent / helper_name(target.name, prefix=".", suffix=suffix)


def helper_name(name: str, *, prefix: str, suffix: str) -> str:
    """``prefix + name + suffix`` when it fits in a file name, else a shortened name that does.

    A valid 241-255-byte ``name`` would overflow once a helper's suffix is added: its head is then
    kept and the rest replaced by a hash of the whole name, so two long names never share a helper.
    """
    whole = f"{prefix}{name}{suffix}"
    if len(os.fsencode(whole)) <= _NAME_MAX:
        return whole
    import hashlib

    raw = os.fsencode(name)
    digest = hashlib.sha256(raw).hexdigest()[:16]
    room = _NAME_MAX - len(os.fsencode(f"{prefix}-{digest}{suffix}"))
    head = raw[:room].decode("utf-8", errors="ignore")  # never split a character
    return f"{prefix}{head}-{digest}{suffix}"


def remove_tree(path: Path) -> None:
    """Removes a folder so that a crash midway never leaves it half-deleted under its real name.

    A symbolic link is removed as a link: what it points to is never touched.
    """
    if path.is_symlink():
        path.unlink()
        return
    if not path.exists():
        return
    trash = sibling(path, TRASH_SUFFIX) if not path.name.endswith(TRASH_SUFFIX) else path
    if trash != path:
        if trash.exists():
            shutil.rmtree(trash, ignore_errors=True)
        os.replace(path, trash)
        fsync_dir(path.parent)
    shutil.rmtree(trash, ignore_errors=True)


def recover_interrupted_swap(target: Path) -> None:
    """Puts back a checkpoint that an older version's interrupted replacement left aside.

    Older saves moved an existing checkpoint to ``.name.old-accelerate`` before renaming the new
    one in. If a crash hit between the two renames, the old one is moved back.
    """
    old = sibling(target, OLD_SUFFIX)
    if not old.exists():
        return
    if target.exists():
        remove_tree(old)
    else:
        os.replace(old, target)
        fsync_dir(target.parent)


def finish_pending_commit(target: Path) -> bool:
    """Completes a commit into an existing folder that a crash interrupted; True if there was one."""
    staging = target / INNER_STAGING
    new = pending_manifest(target)
    if new is None:
        return False
    try:
        old = manifest_at(target / MANIFEST_NAME)
    except UntrustedCheckpointError:
        raise
    except CheckpointError:
        old = None
    # Every path is resolved (and refused through a link) before the first file moves.
    moves = [(entry_path(staging, name), entry_path(target, name)) for name in new.files]
    # An older manifest without its own checksum cannot vouch that its files are the checkpoint's:
    # they are left in place (at worst, stale files of an older checkpoint stay behind).
    stale = sorted(set(old.files) - set(new.files)) if old is not None and old.signed else []
    removals = [entry_path(target, name) for name in stale]
    for source, destination in moves:
        if source.is_file():
            # Names may have folders (a sharded model's pytorch_model_fsdp_0/__0_0.distcp).
            destination.parent.mkdir(parents=True, exist_ok=True)
            os.replace(source, destination)
    fsync_dir(target)
    # The manifest goes last: from here on the folder is complete without the staging folder.
    os.replace(staging / MANIFEST_NAME, target / MANIFEST_NAME)
    fsync_dir(target)
    for path in removals:  # the previous checkpoint's, no one else's
        if not path.is_symlink() and path.is_file():
            path.unlink()
    shutil.rmtree(staging, ignore_errors=True)
    return True


class AtomicCheckpoint:
    """Builds a checkpoint folder that appears at ``target`` complete, or not at all.

    Example:
        >>> ckpt = AtomicCheckpoint(Path("run/checkpoint_3"))
        >>> ckpt.prepare()
        >>> ckpt.add("optimizer.bin", save_torch(opt.state_dict(), ckpt.path("optimizer.bin")))
        >>> ckpt.commit(step=300, world_size=1)

    In multi-process runs one process calls :meth:`prepare` and :meth:`commit`; the others only
    write into :attr:`staging` (which :meth:`prepare` chooses, so the committer tells them: pass it
    as ``staging``) and hand their records to the committer.
    """

    def __init__(
        self, target: str | os.PathLike[str], *, staging: str | os.PathLike[str] | None = None
    ) -> None:
        if str(target) == "":
            raise CheckpointError(
                "The checkpoint folder is an empty string; name a folder (use '.' for the current "
                "directory explicitly)"
            )
        self.target = Path(target).absolute()
        self.staging = Path(staging) if staging is not None else sibling(self.target, STAGING_SUFFIX)
        self.records: dict[str, FileRecord] = {}

    @property
    def in_place(self) -> bool:
        """True when the checkpoint is committed into an existing folder (see the module docstring)."""
        return self.staging.parent == self.target

    def prepare(self) -> Path:
        """Recovers from an earlier crash, chooses and creates a fresh staging folder; returns it."""
        if self.target.exists() and not self.target.is_dir():
            raise CheckpointError(f"Cannot save a checkpoint to {self.target}: it is a file, not a folder")
        self.target.parent.mkdir(parents=True, exist_ok=True)
        recover_interrupted_swap(self.target)
        if self.target.is_dir():
            finish_pending_commit(self.target)
        for leftover in (sibling(self.target, STAGING_SUFFIX), self.target / INNER_STAGING):
            if own_folder(leftover, what="a leftover staging folder"):
                shutil.rmtree(leftover)
        # An existing folder (perhaps a mount point, or the working directory) is never renamed: the
        # checkpoint is staged inside it, on its own filesystem, and moved in after the commit point.
        exists = self.target.is_dir()
        self.staging = self.target / INNER_STAGING if exists else sibling(self.target, STAGING_SUFFIX)
        self.staging.mkdir()
        return self.staging

    def path(self, name: str) -> Path:
        return self.staging / name

    def add(self, name: str, record: FileRecord) -> None:
        self.records[name] = record

    def update(self, records: dict[str, FileRecord]) -> None:
        self.records.update(records)

    def commit(self, *, step: int, world_size: int, extra: dict[str, Any] | None = None) -> Path:
        """Writes the manifest last, then publishes the staged files at :attr:`target` durably."""
        missing = sorted(name for name in self.records if not (self.staging / name).is_file())
        if missing:
            raise CheckpointError(
                f"Cannot commit {self.target}: staged files {missing} are missing from {self.staging}"
            )
        manifest = Manifest(
            files=dict(self.records), world_size=world_size, step=step, extra=dict(extra or {})
        )
        # Written under another name and renamed: inside an existing folder, the manifest appearing
        # in the staging folder is the commit point, so it must appear whole (and be durable before
        # it appears). A new folder's commit point is the rename below instead: the manifest and
        # the staging folder's entries need only be durable before it, so both fsyncs run at once.
        partial = self.staging / _PARTIAL_MANIFEST
        # Files in sub-folders (DCP's shards, DeepSpeed's engine files): their folders' entries must
        # be durable before the commit point too; fsynced while the manifest is written.
        folders = SyncGroup()
        for folder in sorted({(self.staging / name).parent for name in self.records} - {self.staging}):
            folders.submit(os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)), folder)
        sync = None if self.in_place else SyncGroup()
        try:
            write_bytes(partial, json.dumps(manifest.to_json(), indent=1).encode("utf-8"), sync=sync)
        finally:
            folders.wait()
        os.replace(partial, self.staging / MANIFEST_NAME)
        try:
            fsync_dir(self.staging)  # a new folder's: while the manifest's own fsync runs on a helper thread
        finally:
            if sync is not None:
                sync.wait()
        if self.in_place:
            finish_pending_commit(self.target)
        else:
            if self.target.exists():
                raise CheckpointError(
                    f"Cannot commit {self.target}: it was created by someone else while this checkpoint "
                    "was being written; save again"
                )
            os.replace(self.staging, self.target)
            fsync_dir(self.target.parent)
        return self.target

    def abort(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


def interrupted_merge(directory: Path) -> Path | None:
    """The staging folder of an older version's file-by-file commit into ``directory``, if one is left.

    Older saves into an existing folder deleted its manifest and moved files in one by one from
    ``.name.tmp-accelerate``; a crash in between left a mix of two checkpoints and no manifest.
    (Today's commits never touch the folder before their commit point.)
    """
    staging = sibling(directory.absolute(), STAGING_SUFFIX)
    return staging if directory.is_dir() and staging.is_dir() else None


def stale_entries(directory: Path) -> Iterable[Path]:
    """Leftovers of interrupted saves or removals inside ``directory``."""
    if not directory.is_dir():
        return []
    suffixes = (STAGING_SUFFIX, TRASH_SUFFIX)
    return [p for p in directory.iterdir() if p.name.startswith(".") and p.name.endswith(suffixes)]
