"""What a name listed in a checkpoint's manifest may be, and where it may lead.

A checkpoint folder can come from someone else (a downloaded checkpoint, a shared filesystem), so
its manifest is untrusted input: every name in it is used to read, move or delete a file. A name is
accepted only when it is relative, normalised and stays inside the folder:

* a non-empty ``str`` of ``/``-separated components, with no empty, ``.`` or ``..`` component, no
  backslash (a Windows separator), no NUL byte, and not absolute (``/x``, ``C:x``);
* not one of the library's own bookkeeping names (the manifest itself, the in-folder staging area),
  which no checkpoint lists, so a crafted manifest cannot make a commit delete the new manifest;
* on use, no component below the checkpoint folder is a symbolic link: a link inside a checkpoint
  could lead a read, a move or a deletion anywhere the training user may write.

The first two rules are checked when the manifest is parsed (one bad name refuses the whole
manifest before any file is touched); the last when a name is turned into a path, since links can
appear after parsing. The checkpoint folder itself and the folders above it may be links (a
checkpoint directory placed on another disk is common): only what lies below it is checked.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PureWindowsPath

from accelerate.storage.durable_io import MANIFEST_NAME
from accelerate.storage.errors import UntrustedCheckpointError

# The in-folder staging area of a commit into an existing folder (see atomic.py).
INNER_STAGING = ".accelerate-staging"
_RESERVED = {MANIFEST_NAME, f"{MANIFEST_NAME}.partial", INNER_STAGING}


def check_entry_name(name: object, *, source: str, bookkeeping: bool = False) -> str:
    """Returns ``name`` when it is a safe relative entry name (see the module docstring).

    ``bookkeeping`` admits the library's own names (used for the manifest's own path).

    Raises:
        UntrustedCheckpointError: naming the entry and ``source`` (the manifest or folder it came from).
    """
    problem = _name_problem(name, bookkeeping=bookkeeping)
    if problem is None and isinstance(name, str):
        return name
    raise UntrustedCheckpointError(
        f"{source} lists the entry {name!r}, which {problem}. A checkpoint only ever lists relative "
        "names of files inside its own folder, so this manifest was not written by accelerate (or was "
        "edited); nothing was read, moved or deleted. Do not use this folder as a checkpoint."
    )


def _name_problem(name: object, *, bookkeeping: bool) -> str | None:
    if not isinstance(name, str):
        return f"is a {type(name).__name__}, not a string"
    if not name:
        return "is empty"
    if "\x00" in name:
        return "holds a NUL byte"
    if "\\" in name:
        return "holds a backslash (names use '/' only)"
    if name.startswith("/") or PureWindowsPath(name).is_absolute() or PureWindowsPath(name).drive:
        return "is an absolute path"
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "is not a normalised relative path (it has an empty, '.' or '..' component)"
    if parts[0] in _RESERVED and not bookkeeping:
        return "names the library's own bookkeeping (the manifest or the staging area)"
    return None


def entry_path(folder: Path, name: str, *, source: str | None = None, bookkeeping: bool = False) -> Path:
    """``folder / name`` once no existing component of ``name`` below ``folder`` is a symbolic link.

    ``name`` is checked again (cheaply) so a caller that did not come through a parsed manifest is
    held to the same rules.

    Raises:
        UntrustedCheckpointError: naming the entry, the link and the folder.
    """
    where = source if source is not None else str(folder)
    check_entry_name(name, source=where, bookkeeping=bookkeeping)
    current = folder
    for part in name.split("/"):
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except (FileNotFoundError, NotADirectoryError):
            break  # nothing further down exists either
        if stat.S_ISLNK(mode):
            raise UntrustedCheckpointError(
                f"The entry {name!r} of {where} goes through {current}, a symbolic link. accelerate never "
                "follows links inside a checkpoint folder (one could lead a read, move or deletion outside "
                "it); nothing was read, moved or deleted. Replace the link with the real file or folder."
            )
    return folder / name


def own_folder(path: Path, *, what: str) -> bool:
    """True when ``path`` is a real folder; False when absent. A link there is refused, never followed.

    For the library's own helper folders (staging areas), whose names it derives: a link with such a
    name was not made by the library, and removing through it would delete what it points to.

    Raises:
        UntrustedCheckpointError: ``path`` is a symbolic link.
    """
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return False
    if stat.S_ISLNK(mode):
        raise UntrustedCheckpointError(
            f"{path} ({what}) is a symbolic link; accelerate never follows links it finds in place of its own "
            "folders, and never deletes through them. Remove the link, then save again."
        )
    return stat.S_ISDIR(mode)
