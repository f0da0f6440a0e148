"""The library's own exception types (the rest are the builtins: ValueError, TypeError, ...).

Also the one way a hardware- or service-only feature (fp8 recipes, Megatron-LM, bitsandbytes,
TPU set-up, ...) says it cannot run here: :func:`requires_hardware` builds the error and
:func:`hardware_only` turns a function or class with upstream's signature into a face whose use
raises it. Every such face in the package is made by these two, so the message is the same shape
everywhere and no module carries its own copy of a stub body.
"""

from __future__ import annotations

import functools
from types import FunctionType

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: this module stays free of the typing import
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    T = TypeVar("T", bound=Callable[..., Any])


class NotAvailableYetError(NotImplementedError):
    """A feature the public API names but this release does not implement; the message says what to do."""


def requires_hardware(feature: str, needs: str) -> NotAvailableYetError:
    """The error for using ``feature``, which cannot run without ``needs`` (hardware, a package, a service).

    Returned, not raised, so callers write ``raise requires_hardware(...)`` and tracebacks point at them.

    Example:
        >>> raise requires_hardware("bitsandbytes quantization", "a CUDA GPU and `pip install bitsandbytes`")
    """
    return NotAvailableYetError(
        f"{feature} cannot run in this accelerate: it needs {needs}, and this release implements it only "
        "as a name with upstream's signature. Nothing was changed; remove the call (or the option that "
        "asked for it) to continue without it."
    )


def hardware_only(feature: str, needs: str) -> Callable[[T], T]:
    """Decorator: the decorated function (or every public method and ``__init__`` of the decorated class)
    keeps its signature for ``inspect`` and raises :func:`requires_hardware` when used.

    The body of a decorated function is never run; write it as ``...``.
    """

    def wrap_function(func: Callable[..., Any], name: str) -> Callable[..., Any]:
        @functools.wraps(func)
        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise requires_hardware(f"{feature} (`{name}`)", needs)

        refuse.hardware_requirement = (feature, needs)  # type: ignore[attr-defined]  # for tests and tools
        return refuse

    def decorate(obj: T) -> T:
        if not isinstance(obj, type):
            return wrap_function(obj, obj.__qualname__)  # type: ignore[return-value]
        for attr, value in list(vars(obj).items()):
            if isinstance(value, FunctionType) and (attr == "__init__" or not attr.startswith("_")):
                setattr(obj, attr, wrap_function(value, f"{obj.__qualname__}.{attr}"))
        obj.hardware_requirement = (feature, needs)  # type: ignore[attr-defined]
        return obj

    return decorate
