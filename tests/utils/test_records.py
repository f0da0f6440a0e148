"""`frozen_record`: behaves like a frozen keyword-only dataclass, without compiling methods at import."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from accelerate.utils.records import frozen_record


@frozen_record
class Point:
    x: int
    label: str | None = None
    tags: tuple[str, ...] = ()


def test_keyword_construction_defaults_and_repr() -> None:
    point = Point(x=1)
    assert (point.x, point.label, point.tags) == (1, None, ())
    assert repr(Point(x=2, label="a")) == "Point(x=2, label='a', tags=())"


def test_wrong_or_missing_keywords_raise_naming_them() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument.*: y"):
        Point(x=1, y=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="missing keyword argument.*: x"):
        Point()  # type: ignore[call-arg]
    with pytest.raises(
        TypeError, match=r"Point\(\) takes keyword arguments only \(x, label, tags\); got 1 positional"
    ):
        Point(1)  # type: ignore[misc]


def test_equality_hash_and_immutability_as_a_frozen_dataclass() -> None:
    assert Point(x=1) == Point(x=1, label=None)
    assert Point(x=1) != Point(x=1, label="b")
    assert hash(Point(x=1)) == hash(Point(x=1))
    assert Point(x=1) != (1, None, ())
    point = Point(x=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        point.x = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del point.x  # type: ignore[misc]


def test_copies_and_pickles() -> None:
    point = Point(x=1, label="c")
    assert pickle.loads(pickle.dumps(point)) == point
    assert copy.copy(point) == point
    assert copy.deepcopy(point) == point


def test_mutable_default_is_refused() -> None:
    with pytest.raises(TypeError, match="defaults must be immutable"):

        @frozen_record
        class Bad:
            items: list[int] = []  # noqa: RUF012
