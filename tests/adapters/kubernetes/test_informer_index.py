"""An informer's lookups, by an indexer's value and by namespace and name: which cached
objects they find as objects come, change, go."""

from __future__ import annotations

from typing import Any

from adapters.kubernetes import kinds
from adapters.kubernetes.cache_index import ValueIndex as _Index
from adapters.kubernetes.watching import Informer


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


def _informer() -> Informer:
    return Informer(None, kinds.SERVICES)  # type: ignore[arg-type]  # never started, fed


def _obj(namespace: str, name: str, uid: str) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, "uid": uid, "resourceVersion": "1"}}


def _names(informer: Informer) -> dict[tuple[str, str], str | None]:
    keys = [(ns, name) for ns in ("team-a", "team-b", "team-c") for name in ("llm", "other")]
    found = {key: informer.get_by_name(*key, copy_=False) for key in keys}
    return {key: obj["metadata"]["uid"] for key, obj in found.items() if obj is not None}


def test_a_name_in_several_namespaces_is_found_in_each_and_in_no_other() -> None:
    informer = _informer()
    informer._apply("ADDED", _obj("team-a", "llm", "a1"))
    assert _names(informer) == {("team-a", "llm"): "a1"}
    informer._apply("ADDED", _obj("team-b", "llm", "b1"))
    informer._apply("ADDED", _obj("team-c", "llm", "c1"))
    assert _names(informer) == {
        ("team-a", "llm"): "a1",
        ("team-b", "llm"): "b1",
        ("team-c", "llm"): "c1",
    }
    informer._apply("DELETED", _obj("team-a", "llm", "a1"))
    informer._apply("DELETED", _obj("team-c", "llm", "c1"))
    assert _names(informer) == {("team-b", "llm"): "b1"}
    assert informer._by_name._names == {"llm": "b1"}  # one namespace left: the UID itself
    informer._apply("DELETED", _obj("team-b", "llm", "b1"))
    assert _names(informer) == {} and len(informer._by_name) == 0


def test_an_object_recreated_under_its_name_is_found_before_the_old_one_goes() -> None:
    informer = _informer()
    informer._apply("ADDED", _obj("team-a", "llm", "old"))
    informer._apply("ADDED", _obj("team-b", "llm", "b1"))
    informer._apply("ADDED", _obj("team-a", "llm", "new"))  # before the old one's DELETED
    assert _names(informer) == {("team-a", "llm"): "new", ("team-b", "llm"): "b1"}
    informer._apply("DELETED", _obj("team-a", "llm", "old"))  # the newer keeps the name
    assert _names(informer) == {("team-a", "llm"): "new", ("team-b", "llm"): "b1"}
    informer._apply("DELETED", _obj("team-b", "llm", "b1"))
    informer._apply("ADDED", _obj("team-a", "llm", "newer"))
    informer._apply("DELETED", _obj("team-a", "llm", "new"))
    assert _names(informer) == {("team-a", "llm"): "newer"} and len(informer._by_name) == 1
