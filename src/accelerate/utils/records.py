"""``frozen_record``: a frozen, keyword-only record class that costs what a plain class costs to create.

``@dataclass`` writes its methods (``__init__``, ``__repr__``, ``__eq__``, ``__hash__``,
``__setattr__``, ...) as source text and compiles them with ``exec`` when the class is created,
that is at import. On a 2-core AMD EPYC that is about 0.5 ms for a 3-field frozen dataclass and
4–5 ms for the 47 fields of ``LaunchEnv``: a cost that ``from accelerate import Accelerator``
paid for records it only builds and reads. A class decorated here gets the same behaviour from
methods shared by every record (nothing is compiled), so creating it is as cheap as a plain class.
Type checkers see a frozen, keyword-only dataclass (PEP 681's ``dataclass_transform``).

What it is not: no ``dataclasses.fields`` / ``asdict`` / ``replace`` (it is not a dataclass), no
positional arguments, no ``field(default_factory=...)``. Use it for internal records on the
start-up path; public classes that users inspect as dataclasses stay dataclasses.

Example:
    >>> @frozen_record
    ... class Point:
    ...     x: int
    ...     label: str | None = None
    >>> Point(x=1)
    Point(x=1, label=None)
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:  # typing.dataclass_transform is Python 3.11+; at run time the marker does nothing anyway

    def dataclass_transform(**_: Any) -> Any:
        return lambda obj: obj


C = TypeVar("C", bound=type)

_FIELDS = "__record_fields__"
_REQUIRED = "__record_required__"


@dataclass_transform(frozen_default=True, kw_only_default=True)
def frozen_record(cls: C) -> C:
    """Makes ``cls`` (annotated fields, optional immutable defaults) a frozen keyword-only record.

    A field without a default must be given; a defaulted one not given reads the class attribute.
    """
    annotations: dict[str, Any] = cls.__dict__.get("__annotations__", {})
    names = tuple(n for n, a in annotations.items() if not str(a).startswith(("ClassVar", "typing.ClassVar")))
    for name in names:
        default = cls.__dict__.get(name)
        if isinstance(default, dataclasses.Field | list | dict | set):
            raise TypeError(
                f"frozen_record {cls.__name__}.{name}: defaults must be immutable values "
                f"(got {type(default).__name__}); use a tuple, frozenset or None, or a dataclass."
            )
    setattr(cls, _FIELDS, names)
    setattr(cls, _REQUIRED, frozenset(n for n in names if n not in cls.__dict__))
    methods = {
        "__init__": _init,
        "__repr__": _repr,
        "__eq__": _eq,
        "__hash__": _hash,
        "__setattr__": _setattr,
        "__delattr__": _delattr,
    }
    for name, method in methods.items():
        setattr(cls, name, method)
    return cls


def _init(self: Any, *args: Any, **values: Any) -> None:
    cls = type(self)
    fields: tuple[str, ...] = getattr(cls, _FIELDS)
    if args:
        raise TypeError(
            f"{cls.__name__}() takes keyword arguments only ({', '.join(fields)}); got {len(args)} positional"
        )
    unknown = values.keys() - set(fields)
    if unknown:
        raise TypeError(f"{cls.__name__}() got unexpected keyword argument(s): {', '.join(sorted(unknown))}")
    missing = getattr(cls, _REQUIRED) - values.keys()
    if missing:
        raise TypeError(f"{cls.__name__}() missing keyword argument(s): {', '.join(sorted(missing))}")
    for name, value in values.items():
        object.__setattr__(self, name, value)


def _values(record: Any) -> tuple[Any, ...]:
    return tuple(getattr(record, name) for name in getattr(type(record), _FIELDS))


def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in getattr(type(self), _FIELDS))
    return f"{type(self).__qualname__}({shown})"


def _eq(self: Any, other: object) -> bool:
    if type(other) is not type(self):
        result: bool = NotImplemented  # Python then tries the other side, as for a dataclass
        return result
    return _values(self) == _values(other)


def _hash(self: Any) -> int:
    return hash(_values(self))


def _setattr(self: Any, name: str, value: Any) -> None:
    # The same error a frozen dataclass raises, so callers that catch it keep working.
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _delattr(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
