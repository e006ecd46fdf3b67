"""The record of replicas taken names its takers by UID on the victim's Deployment.

The victim's tenant reads its own Deployment; the taker's namespace and name, which its
status and Events give by count only, must not be there either.
"""

from __future__ import annotations

import json
from typing import Any

from adapters.kubernetes import taken_records
from fsm.placement.arbitration import TAKEN_ANNOTATION, Taker, Taking
from tests.support import fakes


def _order(name: str, namespace: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "ai.deckhouse.io/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {},
    }


def _deployment(text: str) -> dict[str, Any]:
    return {"metadata": {"annotations": {TAKEN_ANNOTATION: text}}}


def test_takers_are_written_by_uid_and_read_back_by_name() -> None:
    world = fakes.world()
    fakes.put(world, _order("secret-project-llm", "tenant-a", "uid-a"))
    record = Taking((Taker("tenant-a/secret-project-llm", "inference-high", 2),))
    written = taken_records.text(record, world.orders)
    assert "tenant-a" not in written and "secret-project" not in written
    assert json.loads(written)["takers"][0]["order"] == "uid:uid-a"
    assert taken_records.read(_deployment(written), world.orders) == record


def test_a_taker_gone_counts_as_gone_and_an_older_record_reads_as_it_was() -> None:
    world = fakes.world()
    gone = '{"takers": [{"order": "uid:uid-gone", "priorityClassName": null, "replicas": 1}]}'
    read = taken_records.read(_deployment(gone), world.orders)
    assert read is not None and read.takers[0].order == "uid:uid-gone"  # names no order
    older = '{"takers": [{"order": "tenant-a/llm", "priorityClassName": null, "replicas": 1}]}'
    read = taken_records.read(_deployment(older), world.orders)
    assert read is not None and read.takers[0].order == "tenant-a/llm"
    # Written again: neither the gone taker's name nor a UID it never had.
    again = taken_records.text(read, world.orders)
    assert "tenant-a" not in again and "llm" not in again
    assert json.loads(again)["takers"][0]["replicas"] == 1
