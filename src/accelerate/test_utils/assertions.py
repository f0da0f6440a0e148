"""Small checks for tests: same tensor on every process, an expected exception, captured stdout."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def are_the_same_tensors(tensor: torch.Tensor) -> bool:
    """True when every process holds a tensor equal to ``tensor`` (same shape, dtype and values).

    A collective: every process must call it. With one process it is always True.
    """
    import torch

    from accelerate.state import PartialState
    from accelerate.utils import gather

    state = PartialState()
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"are_the_same_tensors(tensor) expects a torch.Tensor, got {type(tensor).__name__}")
    if state.num_processes == 1:
        return True
    # Gathering needs equal shapes; compare shapes first so a mismatch answers False instead of failing.
    from accelerate.utils import gather_object

    shapes = gather_object([(tuple(tensor.shape), str(tensor.dtype))])
    if any(shape != shapes[0] for shape in shapes):
        return False
    gathered = gather(tensor[None].contiguous().to(state.device)).cpu()
    mine = tensor.detach().cpu()
    return all(torch.equal(gathered[i], mine) for i in range(gathered.shape[0]))


@contextlib.contextmanager
def assert_exception(exception_class: type[BaseException], msg: str | None = None) -> Iterator[None]:
    """Asserts that the ``with`` block raises ``exception_class`` (and that ``msg`` is in its message).

    Example::

        with assert_exception(ValueError, "batch_size"):
            make_loader(batch_size=-1)
    """
    try:
        yield
    except exception_class as exc:
        if msg is not None and msg not in str(exc):
            raise AssertionError(
                f"{type(exc).__name__} was raised, but its message does not contain {msg!r}: {exc}"
            ) from exc
        return
    except Exception as exc:
        raise AssertionError(
            f"expected {exception_class.__name__} to be raised, got {type(exc).__name__}: {exc}"
        ) from exc
    raise AssertionError(f"expected {exception_class.__name__} to be raised, but the block finished normally")


def capture_call_output(func: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """Calls ``func(*args, **kwargs)`` and returns what it printed to ``sys.stdout``."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        func(*args, **kwargs)
    return buffer.getvalue()
