"""accelerate.storage.state_tree: a state dict rebuilt with its leaves replaced, containers kept."""

from __future__ import annotations

from collections import OrderedDict, namedtuple

from accelerate.storage.state_tree import map_leaves


def test_dicts_keep_their_class_and_attributes_and_the_input_is_left_alone() -> None:
    state: OrderedDict[str, object] = OrderedDict(w=1, b=[2, (3, 4)])
    state._metadata = {"": {"version": 1}}  # type: ignore[attr-defined]
    out = map_leaves(state, lambda x: x * 10)
    assert type(out) is OrderedDict and out == OrderedDict(w=10, b=[20, (30, 40)])
    assert out._metadata == {"": {"version": 1}}
    assert state == OrderedDict(w=1, b=[2, (3, 4)])


def test_namedtuples_stay_namedtuples() -> None:
    Pair = namedtuple("Pair", "x y")
    out = map_leaves({"p": Pair(1, 2)}, lambda x: -x)
    assert type(out["p"]) is Pair and out["p"] == Pair(-1, -2)
