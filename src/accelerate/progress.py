"""A tqdm progress bar that, by default, only the local main process draws.

With several processes on a node each would otherwise print its own bar over the others.
Upstream's path is ``accelerate.utils.tqdm``, a lazy face of this module: the bar asks the process
state, which utils may not import.
"""

from __future__ import annotations

# Not `typing.TYPE_CHECKING`: `import accelerate.utils` loads this module eagerly (see
# utils/__init__.py), so it imports nothing at module level.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def tqdm(*args: Any, main_process_only: bool = True, **kwargs: Any) -> Any:
    """``tqdm.auto.tqdm(*args, **kwargs)``, disabled on every process but the local main one.

    Args:
        main_process_only: draw only on the local main process (``False``: on every process).
        *args, **kwargs: passed to tqdm; an explicit ``disable=True`` always wins.

    Example:
        >>> for batch in tqdm(loader, desc="train"):
        ...     ...
    """
    if args and isinstance(args[0], bool):
        raise ValueError(
            f"tqdm({args[0]!r}, ...): the first argument is the iterable. Pass the flag by name: "
            f"tqdm(iterable, main_process_only={args[0]!r})."
        )
    from tqdm.auto import tqdm as auto_tqdm

    if main_process_only and not kwargs.get("disable", False):
        from accelerate.state import PartialState

        kwargs["disable"] = PartialState().local_process_index != 0
    return auto_tqdm(*args, **kwargs)
