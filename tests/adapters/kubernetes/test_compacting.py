"""Cached objects hold equal parts once (adapters/kubernetes/compacting.py), and that
changes no value: not a key's order, not `True` into `1`, not what a reader's copy may
change without touching the cache or another copy."""

from __future__ import annotations

import gc
import json
import uuid
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from test_cache_memory import UID_LABEL, _copies

from adapters.kubernetes.compacting import Compactor, copied
from tests.support import fakes

_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=30,
)


def _text(value: Any) -> str:
    # JSON's text tells apart what Python's equality does not: true, 1 and 1.0; key order.
    return json.dumps(value)


@given(st.lists(_JSON, min_size=1, max_size=6))
def test_compacting_changes_no_value(values: list[Any]) -> None:
    table = Compactor()
    kept = [table.compact(json.loads(_text(v))) for v in values * 3]  # parts met again
    assert [_text(v) for v in kept] == [_text(v) for v in values * 3]


def test_equal_values_of_other_types_or_key_orders_are_not_one_part() -> None:
    table = Compactor()
    objects = [
        {"a": {"x": True}},
        {"a": {"x": 1}},
        {"a": {"x": 1.0}},
        {"a": {"x": 1, "y": 2}},
        {"a": {"y": 2, "x": 1}},
    ]
    kept = [table.compact(json.loads(json.dumps(o))) for o in objects * 3]
    assert [_text(o) for o in kept] == [_text(o) for o in objects * 3]
    assert len({id(o["a"]) for o in kept}) == len(objects)


def _order(cache: Any, texts: list[str]) -> dict[str, dict[str, Any]]:
    """One order's objects fed to the cache, as it keeps them, by kind."""
    kept = {}
    for text in texts:
        obj = json.loads(text)
        labelled = UID_LABEL in (obj["metadata"].get("labels") or {})
        informer = fakes.informer_for(cache, obj["kind"], labelled)
        informer._apply("ADDED", obj)
        kept[obj["kind"]] = informer.get(obj["metadata"]["uid"], copy_=False)
    return kept


def test_orders_alike_hold_their_alike_parts_once() -> None:
    cache = fakes.world()
    first, second, third = (_order(cache, texts) for texts in _copies(3))

    # From the third order on, what the orders' Deployments have alike is one object.
    def container(order: dict[str, Any]) -> dict[str, Any]:
        return dict(order["Deployment"]["spec"]["template"]["spec"]["containers"][0])

    assert container(third)["args"] is container(second)["args"]
    assert container(third)["resources"] is container(second)["resources"]
    assert third["Deployment"]["spec"]["strategy"] is second["Deployment"]["spec"]["strategy"]
    assert third["Deployment"]["status"] is second["Deployment"]["status"]
    # What is one order's own is not: its labels differ (its UID) and so are not shared...
    labels = third["Deployment"]["metadata"]["labels"]
    assert labels is not second["Deployment"]["metadata"]["labels"]
    assert labels != second["Deployment"]["metadata"]["labels"]
    # ...but are the same on each of its children, across kinds.
    assert third["Service"]["metadata"]["labels"] is labels
    assert first["Deployment"] == _order(fakes.world(), _copies(1)[0])["Deployment"]


def test_a_copy_from_the_cache_shares_nothing_with_it_nor_within_itself() -> None:
    cache = fakes.world()
    for texts in _copies(3):
        deployment = _order(cache, texts)["Deployment"]
    uid = deployment["metadata"]["uid"]
    cached = cache.deployments.get(uid, copy_=False)
    template_labels = cached["spec"]["template"]["metadata"]["labels"]
    assert cached["metadata"]["labels"] is template_labels  # equal parts, one object
    mine, other = cache.deployments.get(uid), cache.deployments.get(uid)
    mine["metadata"]["labels"]["changed"] = "here"
    mine["spec"]["template"]["spec"]["containers"][0]["args"].append("--changed")
    assert "changed" not in mine["spec"]["template"]["metadata"]["labels"]
    assert "changed" not in other["metadata"]["labels"] and "changed" not in template_labels
    assert "--changed" not in cached["spec"]["template"]["spec"]["containers"][0]["args"]
    assert copied(cached) == cached


def _drop(table: Compactor) -> None:
    # A sweep comes after as many changes as the table has entries (amortized).
    for _ in range(len(table) + 1):
        table.dropped()


def test_parts_are_freed_with_the_last_object_that_holds_them() -> None:
    table = Compactor(sweep_after=0)
    part = {"ports": [{"name": "http", "port": 8000}], "type": "ClusterIP"}
    kept = [table.compact({"spec": json.loads(json.dumps(part)), "n": i}) for i in range(4)]
    assert kept[3]["spec"] is kept[2]["spec"] and len(table) == 3  # item, list, spec
    del kept[:3]
    _drop(table)
    assert len(table) == 3  # still held by the last object
    again = table.compact({"spec": json.loads(json.dumps(part))})
    assert again["spec"] is kept[0]["spec"]
    del kept, again
    gc.collect()
    _drop(table)
    assert len(table) == 0


def test_a_part_with_a_string_new_to_the_process_is_entered_from_its_second_sighting() -> None:
    table = Compactor()
    known = [table.compact({"labels": {"app": "x"}}) for _ in range(2)]  # labels held
    entered = len(table)
    unique = uuid.uuid4().hex  # a UID no object of this process has had
    text = json.dumps({"metadata": {"uid": unique, "labels": {"app": "x"}}})
    first, second, third = (table.compact(json.loads(text)) for _ in range(3))
    assert first["metadata"]["labels"] is known[1]["labels"]
    # The first object's metadata held a string never seen: not entered, lest every
    # object's metadata take a slot of the table; the second's was, the third shares it.
    assert first["metadata"] is not second["metadata"]
    assert third["metadata"] is second["metadata"] and len(table) == entered + 1
    assert third["metadata"]["uid"] is first["metadata"]["uid"]  # the string is one


def test_one_letter_and_empty_strings_are_not_new_however_often_met() -> None:
    table = Compactor()
    text = json.dumps({"spec": {"a": "x", "b": ""}})
    kept = [table.compact(json.loads(text)) for _ in range(3)]
    # The interpreter holds each as one object: telling them new would share nothing.
    assert kept[2]["spec"] is kept[1]["spec"]
