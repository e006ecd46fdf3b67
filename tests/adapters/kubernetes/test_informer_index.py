"""An informer's index: which cached objects have a value, as objects come, change, go."""

from __future__ import annotations

from adapters.kubernetes.watching import _Index


def _index() -> _Index:
    return _Index(key=lambda obj: [])


def test_one_member_two_members_and_back() -> None:
    index = _index()
    index.add("order-1", "a")
    index.add("order-1", "a")  # the same object again (a MODIFIED): still one
    assert sorted(index.members("order-1")) == ["a"]
    index.add("order-1", "b")
    assert sorted(index.members("order-1")) == ["a", "b"]
    index.discard("order-1", "a")
    assert sorted(index.members("order-1")) == ["b"]
    index.discard("order-1", "a")  # gone already: nothing changes
    assert sorted(index.members("order-1")) == ["b"]
    index.discard("order-1", "b")
    assert list(index.members("order-1")) == []
    assert "order-1" not in index.values  # an empty value is not kept


def test_values_are_independent_and_an_unknown_one_has_no_members() -> None:
    index = _index()
    index.add("class-a", "x")
    index.add("class-a", "y")
    index.add("class-a", "z")
    index.add("class-b", "x")
    index.discard("class-a", "y")
    assert sorted(index.members("class-a")) == ["x", "z"]
    assert sorted(index.members("class-b")) == ["x"]
    assert list(index.members("class-c")) == []
    index.discard("class-c", "x")  # never indexed: nothing to do
    assert sorted(index.values) == ["class-a", "class-b"]


def test_a_single_member_costs_no_container() -> None:
    index = _index()
    index.add("order-1", "uid-1")
    assert index.values["order-1"] == "uid-1"  # the UID itself, not a set holding it
