"""Reading DRA objects into a snapshot, and finding places in it (priority reclaim)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fsm.placement import capacity, inventory
from fsm.placement.capacity import FULL_SHARE, find_place, usage_by_device
from fsm.values import PlacementMode, SharingMode
from tests.support.planner_inputs import (
    claim,
    device_class,
    gpu,
    priority_class,
    resource_slice,
    snapshot,
)

T4 = "Tesla T4"


def _ids(*names: str, node: str = "node1") -> tuple[str, ...]:
    return tuple(f"gpu.nvidia.com/{node}/{name}" for name in names)


# --- parsing ----------------------------------------------------------------------------


def test_devices_carry_typed_attributes_and_exact_capacity() -> None:
    snap = snapshot(
        slices=[
            resource_slice(
                "node1",
                gpu(
                    "gpu-0",
                    T4,
                    "16Gi",
                    cudaComputeCapability={"version": "7.5.0"},
                    cores={"int": 2560},
                    healthy={"bool": True},
                ),
            )
        ]
    )
    (device,) = snap.devices
    assert device.id == "gpu.nvidia.com/node1/gpu-0"
    assert device.node == "node1"
    assert device.product_name == T4
    assert device.device_type == "gpu"
    assert device.memory_bytes == 16 * 2**30
    assert device.attribute("cores") == 2560
    assert device.attribute("gpu.nvidia.com/healthy") is True


@pytest.mark.parametrize("memory", ["1e30", "99999999999999999999999", "1000000000000Ei"])
def test_a_capacity_no_device_has_is_as_good_as_unpublished(memory: str) -> None:
    """A driver's bug publishing 1e30 bytes (an API server stores it): planned onto, it
    overflowed the log's encoder, so every pass raised, or the status's int32
    acceleratorMemoryGiB, so no status was ever written."""
    snap = snapshot(slices=[resource_slice("node1", gpu("gpu-0", T4, memory))])
    (device,) = snap.devices
    assert device.memory_bytes is None
    (sane,) = snapshot(slices=[resource_slice("node1", gpu("gpu-0", T4, "2Ei"))]).devices
    assert sane.memory_bytes == 2 * 2**60


@pytest.mark.parametrize(
    ("shareable", "capacity_", "shared"),
    [
        pytest.param(False, {"memory": {"value": "16Gi"}}, False, id="exclusive-device"),
        pytest.param(True, {"memory": {"value": "16Gi"}}, False, id="no-policy-taken-whole"),
        pytest.param(
            True,
            {"memory": {"value": "16Gi", "requestPolicy": {"validValues": ["4Gi", "16Gi"]}}},
            False,
            id="no-default-taken-whole",
        ),
        pytest.param(
            True,
            {"memory": {"value": "16Gi", "requestPolicy": {"default": "16Gi"}}},
            False,
            id="default-of-all-of-it",
        ),
        pytest.param(
            True,
            {"memory": {"value": "16Gi", "requestPolicy": {"default": "1Gi"}}},
            True,
            id="default-below-the-capacity",
        ),
        pytest.param(
            True,
            {
                "memory": {"value": "16Gi", "requestPolicy": {"default": "1Gi"}},
                "cores": {"value": "40"},
            },
            False,
            id="another-capacity-taken-whole",
        ),
        pytest.param(
            True,
            {
                "memory": {"value": "16Gi", "requestPolicy": {"default": "1Gi"}},
                "cores": {"value": "40", "requestPolicy": {"default": "4"}},
            },
            True,
            id="every-capacity-in-part",
        ),
        pytest.param(
            True,
            {"memory": {"value": "16Gi", "requestPolicy": {"default": "a lot"}}},
            True,
            id="an-unreadable-default-is-no-promise",
        ),
        pytest.param(True, {}, True, id="no-capacity-nothing-taken"),
    ],
)
def test_a_device_a_claim_asking_no_capacity_would_share(
    shareable: bool, capacity_: dict[str, Any], shared: bool
) -> None:
    """A claim with no `capacity.requests` (every Dedicated one) consumes each capacity's
    requestPolicy default, else all of it (KEP-5075): it holds a shareable device alone
    only if it takes some capacity whole."""
    device = gpu("gpu-0", T4, "16Gi", shareable=shareable)
    device["capacity"] = capacity_
    (parsed,) = snapshot(slices=[resource_slice("node1", device)]).devices
    assert parsed.shared_by_default is shared


_CORES_40 = {"memory": {"value": "16Gi"}, "cores": {"value": "40"}}


def _cores(value: str, **policy: Any) -> dict[str, Any]:
    return {"memory": {"value": "16Gi"}, "cores": {"value": value, "requestPolicy": policy}}


@pytest.mark.parametrize(
    ("shareable", "capacity_", "most"),
    [
        pytest.param(False, _CORES_40, None, id="exclusive-device"),
        pytest.param(True, {"memory": {"value": "16Gi"}}, None, id="memory-only"),
        pytest.param(
            True,
            {"memory": {"value": "16Gi", "requestPolicy": {"default": "1Gi"}}},
            None,
            id="memory-is-the-capacity-the-claim-names",
        ),
        pytest.param(True, _CORES_40, 1, id="another-capacity-taken-whole"),
        pytest.param(True, _cores("40", validValues=["10", "40"]), 1, id="no-default-whole"),
        pytest.param(True, _cores("40", default="30"), 1, id="default-3/4"),
        pytest.param(True, _cores("40", default="20"), 2, id="default-half"),
        pytest.param(True, _cores("30", default="10"), 3, id="default-third"),
        pytest.param(True, _cores("40", default="50"), 0, id="default-above-the-capacity"),
        pytest.param(True, _cores("40", default="0"), None, id="default-nothing"),
        pytest.param(True, _cores("400", default="4"), None, id="room-for-100-claims-of-1%"),
        pytest.param(True, _cores("40", default="many"), None, id="unreadable-default"),
        pytest.param(
            True,
            {**_cores("30", default="10"), "sm": {"value": "80"}},
            1,
            id="the-tightest-capacity",
        ),
    ],
)
def test_how_many_claims_asking_only_memory_a_device_holds(
    shareable: bool, capacity_: dict[str, Any], most: int | None
) -> None:
    """A Shared claim asks only memory: every other capacity is consumed at its
    requestPolicy default, else whole (KEP-5075), whatever memory is left."""
    device = gpu("gpu-0", T4, "16Gi", shareable=shareable)
    device["capacity"] = capacity_
    (parsed,) = snapshot(slices=[resource_slice("node1", device)]).devices
    assert parsed.sharers_at_most == most


@pytest.mark.parametrize(
    ("slices", "devices", "problem"),
    [
        pytest.param(
            [
                resource_slice("n1", gpu("old", T4, "16Gi"), generation=1),
                resource_slice("n1", gpu("new", T4, "16Gi"), generation=2),
            ],
            _ids("new", node="n1"),
            None,
            id="newest-generation-only",
        ),
        pytest.param(
            [resource_slice("n1", gpu("gpu-0", T4, "16Gi"), count=2)],
            (),
            "incomplete",
            id="incomplete-pool-offers-nothing",
        ),
        pytest.param(
            [resource_slice("n1", gpu("gpu-0", T4, "16Gi"), gpu("gpu-0", T4, "16Gi"))],
            (),
            "duplicate",
            id="duplicate-names-invalidate-pool",
        ),
    ],
)
def test_pools_follow_the_scheduler(
    slices: list[dict[str, object]], devices: tuple[str, ...], problem: str | None
) -> None:
    snap = snapshot(slices=slices)
    assert tuple(d.id for d in snap.devices) == devices
    assert (problem is None) == (not snap.problems)
    if problem:
        assert problem in snap.problems[0]


@pytest.mark.parametrize(
    ("labels", "placement", "sharing", "share", "error"),
    [
        pytest.param({}, None, SharingMode.DEDICATED, None, None, id="no-labels"),
        pytest.param(
            {"placement": "Partition"},
            PlacementMode.PARTITION,
            SharingMode.DEDICATED,
            None,
            None,
            id="partition",
        ),
        pytest.param(
            {"sharing": "Shared", "share_percent": "25"},
            None,
            SharingMode.SHARED,
            25,
            None,
            id="shared-quarter",
        ),
        pytest.param(
            {"sharing": "Shared"}, None, SharingMode.SHARED, 50, None, id="shared-default-half"
        ),
        pytest.param(
            {"placement": "Whole"},
            None,
            SharingMode.DEDICATED,
            None,
            "placement",
            id="bad-placement",
        ),
        pytest.param(
            {"sharing": "Sometimes"}, None, SharingMode.DEDICATED, None, "sharing", id="bad-sharing"
        ),
        pytest.param(
            {"sharing": "Shared", "share_percent": "150"},
            None,
            SharingMode.SHARED,
            None,
            "share-percent",
            id="bad-percent",
        ),
    ],
)
def test_device_class_labels(
    labels: dict[str, str],
    placement: PlacementMode | None,
    sharing: SharingMode,
    share: int | None,
    error: str | None,
) -> None:
    (info,) = snapshot([device_class("c", **labels)]).device_classes
    assert (info.placement, info.sharing, info.share_percent) == (placement, sharing, share)
    assert (info.label_error is None) == (error is None)
    if error:
        assert error in (info.label_error or "")


def test_claims_record_devices_share_holder_and_priority() -> None:
    snap = snapshot(
        slices=[resource_slice("node1", gpu("gpu-0", T4, "16Gi", shareable=True))],
        claims=[
            claim("a-gpu-x", "node1", "gpu-0", holder="uid-a", mps_percent=50),
            claim("other-workload", "node1", "gpu-0", mps_percent=25),
            {"metadata": {"name": "pending", "namespace": "team"}, "spec": {}, "status": {}},
        ],
        priorities={"uid-a": 500},
    )
    first, second = snap.allocations
    assert (first.key, first.devices, first.share_percent) == (
        "team/a-gpu-x",
        _ids("gpu-0"),
        50,
    )
    assert (first.holder, first.priority) == ("uid-a", 500)
    assert (second.holder, second.priority) == (None, None)  # never reclaimable
    assert usage_by_device(snap) == {_ids("gpu-0")[0]: 75}


def test_an_admin_access_claim_takes_no_device() -> None:
    """Monitoring's claims with adminAccess (a DaemonSet on every GPU) do not use the
    device for Kubernetes' allocator; counted, they made every GPU look full."""
    admin = claim("monitor-gpu-0", "node1", "gpu-0")
    admin["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = True
    snap = snapshot(
        slices=[resource_slice("node1", gpu("gpu-0", T4, "16Gi"), gpu("gpu-1", T4, "16Gi"))],
        claims=[admin, claim("runtime", "node1", "gpu-1")],
    )
    assert [a.key for a in snap.allocations] == ["team/runtime"]
    assert usage_by_device(snap) == {_ids("gpu-0")[0]: 0, _ids("gpu-1")[0]: 100}


def _versioned(obj: dict[str, Any], version: str | None) -> dict[str, Any]:
    meta = (
        dict(obj["metadata"])
        if version is None
        else {**obj["metadata"], "resourceVersion": version}
    )
    return {**obj, "metadata": meta}


def test_a_claim_reader_parses_each_claim_once_per_version() -> None:
    read = inventory.ClaimReader()
    first = [
        _versioned(claim("a-gpu", "node1", "gpu-0", holder="uid-a"), "1"),
        _versioned(claim("b-gpu", "node1", "gpu-1", holder="uid-b"), "2"),
        _versioned({"metadata": {"name": "pending", "namespace": "team"}, "status": {}}, "3"),
    ]
    kept = read(first)
    assert kept == inventory.parse_allocations(first)
    assert read.parsed == 3
    # b's claim changed (its allocation moved); a's did not; the pending one is gone.
    second = [first[0], _versioned(claim("b-gpu", "node1", "gpu-2", holder="uid-b"), "4")]
    again = read(second)
    assert again == inventory.parse_allocations(second)
    assert again[0] is kept[0]  # not made anew: the planner's memos key on it
    assert read.parsed == 4
    # Without a version a claim cannot be known unchanged: it is parsed each time.
    unversioned = [_versioned(claim("c-gpu", "node1", "gpu-3"), None)]
    assert read(unversioned) == read(unversioned) == inventory.parse_allocations(unversioned)
    assert read.parsed == 6


@given(
    st.lists(
        st.lists(
            st.tuples(st.sampled_from("abc"), st.sampled_from(["0", "1", "2", "3"])), max_size=4
        ),
        max_size=5,
    )
)
def test_a_claim_reader_reads_what_a_parse_reads(rounds: list[list[tuple[str, str]]]) -> None:
    """Whatever the claims do between calls — move, change version, vanish, come back —
    the reader's answer is the parse's. A device follows the version, as on the API
    server (a claim's content changes only with it)."""
    read = inventory.ClaimReader()
    for claims in rounds:
        objs = {
            name: _versioned(claim(f"{name}-gpu", "node1", f"gpu-{name}{version}"), version)
            for name, version in claims
        }
        assert read(objs.values()) == inventory.parse_allocations(objs.values())


def test_priorities_judged_again_only_where_they_changed() -> None:
    snap = snapshot(
        slices=[resource_slice("node1", gpu("gpu-0", T4, "16Gi"), gpu("gpu-1", T4, "16Gi"))],
        claims=[
            claim("a-gpu", "node1", "gpu-0", holder="uid-a"),
            claim("b-gpu", "node1", "gpu-1", holder="uid-b"),
            claim("other", "node1", "gpu-1"),
        ],
    )
    kept: capacity.JudgedClaims = {}
    before = capacity.with_holder_priorities(snap, {"uid-a": 100, "uid-b": 200}, kept)
    assert before == capacity.with_holder_priorities(snap, {"uid-a": 100, "uid-b": 200})
    after = capacity.with_holder_priorities(snap, {"uid-a": 100, "uid-b": 300}, kept)
    assert after == capacity.with_holder_priorities(snap, {"uid-a": 100, "uid-b": 300})
    assert after.allocations[0] is before.allocations[0]  # a's priority stayed
    assert (after.allocations[1].key, after.allocations[1].priority) == ("team/b-gpu", 300)
    assert len(kept) == 2  # a holder's claims only, and only this snapshot's
    assert capacity.with_holder_priorities(snapshot(), {}, kept).allocations == ()
    assert kept == {}


def test_priority_classes_and_the_global_default() -> None:
    snap = snapshot(
        priority_classes=[priority_class("low", 100), priority_class("std", 300, default=True)]
    )
    assert snap.priority_value("low") == 100
    assert snap.priority_value(None) == 300
    assert snap.priority_value("missing") is None


# --- places -----------------------------------------------------------------------------


def _two_nodes(shareable: bool = False) -> list[dict[str, object]]:
    return [
        resource_slice(
            "node1",
            gpu("gpu-0", T4, "16Gi", shareable=shareable),
            gpu("gpu-1", T4, "16Gi", shareable=shareable),
        ),
        resource_slice("node2", gpu("gpu-0", T4, "16Gi", shareable=shareable)),
    ]


def test_free_devices_first_and_one_node_per_replica() -> None:
    snap = snapshot(slices=_two_nodes(), claims=[claim("c", "node1", "gpu-0")])
    place = find_place(snap, snap.devices, count=1)
    assert place is not None
    assert place.devices == _ids("gpu-1") and not place.reclaims
    assert find_place(snap, snap.devices, count=2) is None  # node1 has one free, node2 one


def test_replicas_take_separate_places() -> None:
    snap = snapshot(slices=_two_nodes())
    place = find_place(snap, snap.devices, count=1, replicas=3)
    assert place is not None
    assert sorted(place.devices) == sorted(d.id for d in snap.devices)
    assert find_place(snap, snap.devices, count=1, replicas=4) is None


@pytest.mark.parametrize(
    ("shareable", "consumers"),
    [
        pytest.param(True, 2, id="multiple-allocations"),
        pytest.param(False, 1, id="exclusive-device"),
    ],
)
def test_shares_count_per_device(shareable: bool, consumers: int) -> None:
    snap = snapshot(slices=[resource_slice("node1", gpu("gpu-0", T4, "16Gi", shareable=shareable))])
    assert find_place(snap, snap.devices, count=1, share_percent=50, replicas=consumers)
    assert find_place(snap, snap.devices, count=1, share_percent=50, replicas=consumers + 1) is None


def _t4_with_cores(name: str, cores: dict[str, Any]) -> dict[str, Any]:
    device = gpu(name, T4, "16Gi", shareable=True)
    device["capacity"]["cores"] = cores
    return device


@pytest.mark.parametrize(
    ("cores", "shares", "fits"),
    [
        pytest.param({"value": "40"}, [50, 50], False, id="whole-cores-one-half"),
        pytest.param({"value": "40"}, [25, 25], False, id="whole-cores-one-quarter"),
        pytest.param({"value": "40"}, [50], True, id="whole-cores-a-free-device"),
        pytest.param(
            {"value": "40", "requestPolicy": {"default": "20"}}, [50, 50], True, id="half-cores"
        ),
        pytest.param(
            {"value": "30", "requestPolicy": {"default": "10"}}, [50, 25, 25], True, id="thirds"
        ),
        pytest.param(
            {"value": "40", "requestPolicy": {"default": "20"}}, [25, 25, 25], False, id="halves"
        ),
    ],
)
def test_a_device_holds_no_more_claims_than_its_other_capacities_allow(
    cores: dict[str, Any], shares: list[int], fits: bool
) -> None:
    """Claims of `shares` percent hold the device; one more (`shares[-1]`) fits only
    where units and the claims' count both leave room."""
    *held, last = shares
    claims = [
        claim(f"c{i}", "node1", "gpu-0", holder=f"h{i}", mps_percent=share)
        for i, share in enumerate(held)
    ]
    snap = snapshot(slices=[resource_slice("node1", _t4_with_cores("gpu-0", cores))], claims=claims)
    assert (find_place(snap, snap.devices, count=1, share_percent=last) is not None) is fits
    usage = capacity.usage_of(snap)
    (device,) = snap.devices
    assert capacity.has_room(usage, device, last) is fits


def test_the_claims_count_is_freed_with_them_and_held_places_count_too() -> None:
    """A higher order frees a lower claim for the count alone (the units had room), and
    an order's own held place, not allocated yet, counts as a claim there."""
    slices = [resource_slice("node1", _t4_with_cores("gpu-0", {"value": "40"}))]
    low = snapshot(
        slices=slices,
        claims=[claim("low", "node1", "gpu-0", holder="l", mps_percent=25)],
        priorities={"l": 100},
    )
    assert find_place(low, low.devices, count=1, share_percent=25) is None
    place = find_place(low, low.devices, count=1, share_percent=25, priority=1000)
    assert place is not None and place.reclaims == ("team/low",)
    # A claim freed on one device is freed on the others: its count too.
    whole = {"value": "40"}
    tp2 = snapshot(
        slices=[
            resource_slice("node1", _t4_with_cores("gpu-0", whole), _t4_with_cores("gpu-1", whole))
        ],
        claims=[claim("tp2", "node1", "gpu-0", "gpu-1", holder="l", mps_percent=25)],
        priorities={"l": 100},
    )
    both = find_place(tp2, tp2.devices, count=1, share_percent=25, replicas=2, priority=1000)
    assert both is not None and both.reclaims == ("team/tp2",)
    assert sorted(both.devices) == sorted(_ids("gpu-0", "gpu-1"))
    empty = snapshot(slices=slices)
    held = _ids("gpu-0")
    assert (
        find_place(empty, empty.devices, count=1, share_percent=25, held=held, held_share=25)
        is None
    )


def test_reclaim_takes_the_lowest_priority_first() -> None:
    snap = snapshot(
        slices=_two_nodes(),
        claims=[
            claim("normal", "node1", "gpu-0", holder="n"),
            claim("low", "node1", "gpu-1", holder="l"),
            claim("high", "node2", "gpu-0", holder="h"),
        ],
        priorities={"n": 500, "l": 100, "h": 1000},
    )
    place = find_place(snap, snap.devices, count=1, priority=1000)
    assert place is not None
    assert place.reclaims == ("team/low",) and place.devices == _ids("gpu-1")
    both = find_place(snap, snap.devices, count=2, priority=1000)
    assert both is not None and both.reclaims == ("team/low", "team/normal")
    assert find_place(snap, snap.devices, count=1, priority=100) is None  # equal is not lower
    assert find_place(snap, snap.devices, count=1) is None  # no priority: never reclaims


def test_a_reclaimed_claim_frees_every_device_it_holds() -> None:
    snap = snapshot(
        slices=_two_nodes(),
        claims=[claim("tp2", "node1", "gpu-0", "gpu-1", holder="l")],
        priorities={"l": 100},
    )
    place = find_place(snap, snap.devices, count=2, priority=500)
    assert place is not None
    assert place.reclaims == ("team/tp2",) and set(place.devices) == set(_ids("gpu-0", "gpu-1"))


def test_the_orders_own_place_is_never_offered_nor_reclaimed() -> None:
    slices = [resource_slice("node1", gpu("gpu-0", T4, "16Gi"), gpu("gpu-1", T4, "16Gi"))]
    # Planned on gpu-1, not allocated yet: gpu-1 is its place, gpu-0 is free.
    planned = snapshot(slices=slices)
    place = find_place(planned, planned.devices, count=1, own_uid="me", held=_ids("gpu-1"))
    assert place is not None and place.devices == _ids("gpu-0")
    # Allocated on gpu-0 although the plan named gpu-1 (the scheduler's choice): what it
    # holds is its place — never offered nor reclaimed — and gpu-1 is free.
    snap = snapshot(
        slices=slices,
        claims=[claim("mine", "node1", "gpu-0", holder="me")],
        priorities={"me": 100},
    )
    place = find_place(snap, snap.devices, count=1, priority=1000, own_uid="me", held=_ids("gpu-1"))
    assert place is not None and place.devices == _ids("gpu-1") and not place.reclaims
    two = find_place(snap, snap.devices, count=1, replicas=2, priority=1000, own_uid="me")
    assert two is None  # gpu-0 is its own: not offered, not reclaimed
    free = find_place(snap, snap.devices, count=1, own_uid="me")
    assert free is not None and free.devices == _ids("gpu-1")


def test_a_held_share_leaves_the_rest_of_a_shared_device() -> None:
    snap = snapshot(slices=[resource_slice("node1", gpu("gpu-0", T4, "16Gi", shareable=True))])
    held = _ids("gpu-0")
    assert usage_by_device(snap, held=held, held_share=50) == {held[0]: 50}
    assert find_place(snap, snap.devices, count=1, share_percent=50, held=held, held_share=50)
    assert find_place(snap, snap.devices, count=1, held=held, held_share=50) is None
    assert find_place(snap, snap.devices, count=1, share_percent=50, held=held) is None
    assert FULL_SHARE == 100


# --- what a search costs (counts, not times) ------------------------------------------


def test_free_room_is_found_without_weighing_a_reclaim(monkeypatch: pytest.MonkeyPatch) -> None:
    """Free room always beats a reclaim, so a search with a priority walks the full nodes
    before the free one without pricing their claims (it did, on every full node, for
    every plan in a filling cluster)."""
    slices = [
        resource_slice(node, *(gpu(f"gpu-{i}", T4, "16Gi") for i in range(4)))
        for node in ("node1", "node2", "node3")
    ]
    claims = [
        claim(f"{node}-{i}", node, f"gpu-{i}", holder="low")
        for node in ("node1", "node2")
        for i in range(4)
    ]
    snap = snapshot(slices=slices, claims=claims, priorities={"low": 100})
    weighed: list[int | None] = []
    take = capacity._take

    def counted(*args: object, **kwargs: Any) -> object:
        weighed.append(kwargs["priority"])
        return take(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(capacity, "_take", counted)
    place = find_place(snap, snap.devices, count=2, priority=1000)
    assert place is not None and not place.reclaims
    assert set(place.devices) <= set(_ids("gpu-0", "gpu-1", "gpu-2", "gpu-3", node="node3"))
    assert weighed and all(p is None for p in weighed)
    # With no free room left, the reclaim is weighed and taken.
    weighed.clear()
    full = snapshot(slices=slices[:2], claims=claims, priorities={"low": 100})
    reclaiming = find_place(full, full.devices, count=1, priority=1000)
    assert reclaiming is not None and reclaiming.reclaims == ("team/node1-0",)
    assert 1000 in weighed


def test_a_search_copies_only_the_devices_it_takes() -> None:
    """A trial on a node holds the devices it changes, not a copy of every device there
    (for 300 plans waiting at once on a 330-device node: 15 million copies before)."""
    snap = snapshot(
        slices=[resource_slice("node1", *(gpu(f"gpu-{i}", T4, "16Gi") for i in range(64)))]
    )
    usage = capacity.usage_of(snap)
    devices = [d for d in snap.devices if d.node == "node1"]
    trial = capacity._take(usage, devices, 2, FULL_SHARE, priority=None, own_uid=None)
    assert trial is not None
    after, chosen, freed = trial
    assert sorted(after) == sorted(chosen) and len(chosen) == 2 and not freed
    assert all(usage[d].used == 0 for d in chosen)  # the caller's usage is not touched


def test_a_shared_place_naming_one_device_twice_is_covered_claim_by_claim() -> None:
    """A Shared plan put its two replicas on one device; one replica's claim is there.
    The other half is still the order's (its pending pod needs it): compared as sets,
    the one claim covered both, and that half was offered to the order's own replan
    and to other orders' demand."""
    snap = snapshot(
        slices=[
            resource_slice("node1", gpu("d0", T4, "16Gi", shareable=True), gpu("d1", T4, "16Gi"))
        ],
        claims=[claim("me-0", "node1", "d0", holder="me", mps_percent=50)],
    )
    d0, d1 = _ids("d0", "d1")
    assert capacity.uncovered_held(snap, "me", (d0, d0)) == [d0]
    assert capacity.uncovered_held(snap, "me", (d0, d1)) == [d1]
    assert capacity.uncovered_held(snap, "me", (d0,)) == []
    # A held device no longer published is not counted, and takes no slot of one that is:
    # two replicas wait (three named, one claim), and d1 is named for both.
    gone = "gpu.nvidia.com/node1/gone"
    assert capacity.uncovered_held(snap, "me", (gone, d1, d1)) == [d1, d1]


def test_a_reclaim_frees_no_claim_the_place_does_not_need() -> None:
    """Device by device, a replica of two freed x's d0 and then y's d1, and y's d2 made
    x's stop needless: a running replica stopped for nothing. And on one shared device,
    claims of 25 % and 50 % were both freed for a 75 % share the 50 % one makes room for."""
    two = snapshot(
        slices=[resource_slice("node1", *(gpu(f"d{i}", T4, "16Gi") for i in range(3)))],
        claims=[
            claim("x", "node1", "d0", holder="low-a"),
            claim("y", "node1", "d1", "d2", holder="low-b"),
        ],
        priorities={"low-a": 100, "low-b": 100},
    )
    place = find_place(two, two.devices, count=2, priority=1000)
    assert place is not None
    assert (place.replicas, place.reclaims) == ((_ids("d1", "d2"),), ("team/y",))
    shared = snapshot(
        slices=[resource_slice("node1", gpu("d0", T4, "16Gi", shareable=True))],
        claims=[
            claim("a", "node1", "d0", holder="low", mps_percent=25),
            claim("b", "node1", "d0", holder="mid", mps_percent=50),
        ],
        priorities={"low": 100, "mid": 100},
    )
    place = find_place(shared, shared.devices, count=1, share_percent=75, priority=1000)
    assert place is not None and place.reclaims == ("team/b",)


def test_at_equal_priority_a_waiting_place_goes_before_a_running_replica() -> None:
    """V serves on d0; W, of V's priority, waits with a plan naming d1. A higher plan
    took V's replica (d0 sorts first) where W's room would have stopped nothing, and W
    then held the room V needed to come back."""
    running = capacity.Allocation("team", "serving-v-0", _ids("d0"), holder="v", priority=100)
    waiting = capacity.Allocation(
        "team", "waiting-w-planned-0", _ids("d1"), holder="w", priority=100, planned=True
    )
    base = snapshot(slices=[resource_slice("node1", gpu("d0", T4, "16Gi"), gpu("d1", T4, "16Gi"))])
    snap = replace(base, allocations=(running, waiting))
    place = find_place(snap, snap.devices, count=1, priority=1000)
    assert place is not None and place.reclaims == ("team/waiting-w-planned-0",)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
_SHAPED = st.fixed_dictionaries(
    {},
    optional={
        "requests": _JSON,
        "opaque": st.fixed_dictionaries(
            {},
            optional={
                "driver": _JSON,
                "parameters": _JSON
                | st.fixed_dictionaries(
                    {},
                    optional={
                        "sharing": _JSON
                        | st.fixed_dictionaries(
                            {},
                            optional={
                                "strategy": st.just("MPS") | _JSON,
                                "mpsConfig": _JSON
                                | st.fixed_dictionaries(
                                    {}, optional={"defaultActiveThreadPercentage": _JSON}
                                ),
                            },
                        )
                    },
                ),
            },
        ),
    },
)


@given(config=st.lists(_SHAPED | _JSON, max_size=3) | _JSON)
def test_any_claims_opaque_config_is_read_and_a_device_held_whole_or_in_share(
    config: Any,
) -> None:
    """Any claim of the cluster is read, and Kubernetes asks of an opaque config's
    parameters only that they be an object: another driver's `sharing: "x"` (or a
    tenant's) raised in every order's planning pass, cluster-wide."""
    held = claim("other-driver", "node1", "gpu-0")
    held["spec"]["devices"]["config"] = config
    (allocation,) = inventory.parse_allocations([held])
    assert allocation.devices == _ids("gpu-0")
    assert 1 <= allocation.share_percent <= FULL_SHARE


@pytest.mark.parametrize(
    ("sharing", "share"),
    [
        ("x", FULL_SHARE),
        (True, FULL_SHARE),
        ({"strategy": "MPS", "mpsConfig": "half"}, FULL_SHARE),
        ({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": True}}, FULL_SHARE),
        ({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 30}}, 30),
    ],
)
def test_a_sharing_config_of_another_shape_holds_the_whole_device(sharing: Any, share: int) -> None:
    held = claim("other", "node1", "gpu-0", mps_percent=50)
    held["spec"]["devices"]["config"][0]["opaque"]["parameters"]["sharing"] = sharing
    (allocation,) = inventory.parse_allocations([held])
    assert allocation.share_percent == share
