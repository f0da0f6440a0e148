"""A checkpoint's manifest (``accelerate_manifest.json``): every file's size and checksum, written last.

Its presence means "complete"; its own checksum (``manifest_checksum``) catches an edit of the step
or the file list. Reading it checks every entry name (no path outside the folder) and refuses a
manifest from a newer accelerate with a message that says to upgrade.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelerate.storage.durable_io import CHECKSUM_ALGORITHM, SUPPORTED_ALGORITHMS, FileRecord, Hasher
from accelerate.storage.entry_names import check_entry_name
from accelerate.storage.errors import CheckpointError
from accelerate.storage.regular_files import open_regular

MANIFEST_FORMAT = "accelerate-checkpoint"
MANIFEST_VERSION = 1


def _library_version() -> str:
    try:
        from accelerate import __version__
    except ImportError:  # pragma: no cover - only during a broken install
        return "unknown"
    return str(__version__)


def _body_checksum(body: dict[str, Any], algorithm: str) -> str:
    """A checksum of the manifest's own content, so an edit (say, of ``step``) is caught on load."""
    hasher = Hasher(algorithm)
    hasher.update(memoryview(json.dumps(body, sort_keys=True).encode("utf-8")))
    return hasher.hexdigest()


@dataclass
class Manifest:
    """What a committed checkpoint holds; written last, so its presence means "complete"."""

    files: dict[str, FileRecord]
    world_size: int = 1
    step: int = 0
    library_version: str = field(default_factory=_library_version)
    created: float = field(default_factory=time.time)
    extra: dict[str, Any] = field(default_factory=dict)
    # False for a manifest from before the self-checksum (an older accelerate): still good for reading
    # and verifying files, never trusted to say which files a save may delete. Not serialised.
    signed: bool = field(default=True, compare=False)

    def to_json(self) -> dict[str, Any]:
        body = {
            "format": MANIFEST_FORMAT,
            "format_version": MANIFEST_VERSION,
            "library": "accelerate",
            "library_version": self.library_version,
            "checksum_algorithm": CHECKSUM_ALGORITHM,
            "created": self.created,
            "world_size": self.world_size,
            "step": self.step,
            "extra": self.extra,
            "files": {name: rec.to_json() for name, rec in sorted(self.files.items())},
        }
        return {**body, "manifest_checksum": _body_checksum(body, CHECKSUM_ALGORITHM)}

    @classmethod
    def from_json(cls, data: Any, *, source: str) -> Manifest:
        if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
            raise CheckpointError(f"{source} is not an accelerate checkpoint manifest")
        if int(data.get("format_version", 0)) > MANIFEST_VERSION:
            raise CheckpointError(
                f"{source} was written by a newer accelerate (manifest version {data['format_version']}, "
                f"this one reads up to {MANIFEST_VERSION}); upgrade accelerate to load it"
            )
        algorithm = data.get("checksum_algorithm")
        if algorithm not in SUPPORTED_ALGORITHMS:
            raise CheckpointError(
                f"{source} uses checksum {algorithm!r}; this accelerate reads "
                f"{', '.join(SUPPORTED_ALGORITHMS)}. Upgrade accelerate to load it."
            )
        _check_entries(data.get("files"), source)
        _check_body(data, str(algorithm), source)
        try:
            return cls(
                files={str(k): FileRecord.from_json(v) for k, v in data["files"].items()},
                world_size=int(data["world_size"]),
                step=int(data["step"]),
                library_version=str(data.get("library_version", "unknown")),
                created=float(data.get("created", 0.0)),
                extra=dict(data.get("extra") or {}),
                signed="manifest_checksum" in data,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CheckpointError(f"{source} is malformed: {exc!r}") from exc


def _check_entries(files: Any, source: str) -> None:
    # Before the manifest's own checksum: a newer writer's unknown algorithm is the clearer message.
    if not isinstance(files, dict):
        return  # reported as malformed below
    for name, entry in files.items():
        check_entry_name(name, source=source)
        algorithm = entry.get("algorithm", "crc32") if isinstance(entry, dict) else "crc32"
        if algorithm not in SUPPORTED_ALGORITHMS:
            raise CheckpointError(
                f"{source}: the entry for {name!r} uses checksum algorithm {algorithm!r}; this "
                f"accelerate reads {', '.join(SUPPORTED_ALGORITHMS)}. Upgrade accelerate, or load an "
                "earlier checkpoint."
            )


def _check_body(data: dict[str, Any], algorithm: str, source: str) -> None:
    # Manifests from before the self-checksum have none; their step is cross-checked against the
    # (checksummed) random-states files by the loader instead.
    expected = data.get("manifest_checksum")
    if expected is None:
        return
    body = {k: v for k, v in data.items() if k != "manifest_checksum"}
    if _body_checksum(body, algorithm) != expected:
        raise CheckpointError(
            f"{source} was modified after it was written (its own {algorithm} checksum does not match), so "
            "its step and file list cannot be trusted. Load an earlier checkpoint."
        )


def manifest_at(path: Path) -> Manifest | None:
    try:
        with open_regular(path) as handle:  # a FIFO there is refused, never read (it would block)
            raw = handle.readall()
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path} is unreadable: {exc}") from exc
    return Manifest.from_json(data, source=str(path))
