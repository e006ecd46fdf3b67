"""Leader election against the real API server, with short leases (seconds).

A partition is simulated at the elector's seam: the Lease API it was given starts
failing every call as a dead network would, while the other candidate's stays healthy.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import urllib3.exceptions
from kubernetes import client

from adapters.kubernetes import leader
from tests.support.polling import eventually

pytestmark = pytest.mark.cluster

NAMESPACE = "default"
TIMING = {"lease_duration": 2, "renew_deadline": 1.5, "retry_period": 0.2}


class Partitionable:
    """A CoordinationV1Api whose calls fail, as over a cut network, once `cut` is set."""

    def __init__(self, api: client.CoordinationV1Api) -> None:
        self._api = api
        self.api_client = api.api_client
        self.cut = threading.Event()
        self.calls = 0
        self.by_method: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._api, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            self.by_method[name] += 1
            if self.cut.is_set():
                raise urllib3.exceptions.ProtocolError("connection reset (partition)")
            return method(*args, **kwargs)

        return call


class Candidate:
    """An elector plus a journal of its callbacks, with their times."""

    def __init__(self, api: client.ApiClient, lease: str, identity: str, **kw: Any) -> None:
        self.leases = Partitionable(client.CoordinationV1Api(api))
        self.journal: list[tuple[str, int | None, float]] = []
        self.elector = leader.Elector(
            self.leases,
            namespace=NAMESPACE,
            name=lease,
            identity=identity,
            on_started=lambda epoch: self.journal.append(("started", epoch, time.monotonic())),
            on_stopped=lambda: self.journal.append(("stopped", None, time.monotonic())),
            **{**TIMING, **kw},
        )

    def events(self) -> list[tuple[str, int | None]]:
        return [(what, epoch) for what, epoch, _ in self.journal]

    def when(self, what: str) -> float:
        return next(t for w, _, t in self.journal if w == what)


@pytest.fixture
def lease_name(cluster) -> Iterator[str]:
    name = f"lease-{uuid.uuid4().hex[:8]}"
    yield name
    api = client.CoordinationV1Api(cluster.api_client("admin"))
    try:
        api.delete_namespaced_lease(name, NAMESPACE)
    except client.ApiException as exc:
        assert exc.status == 404


@pytest.fixture
def candidates(cluster, lease_name) -> Iterator[Callable[..., Candidate]]:
    made: list[Candidate] = []

    def make(identity: str, **kw: Any) -> Candidate:
        candidate = Candidate(cluster.api_client("admin"), lease_name, identity, **kw)
        made.append(candidate)
        return candidate

    yield make
    for candidate in made:
        candidate.leases.cut.clear()
        candidate.elector.stop()


def test_one_leads_and_the_other_takes_over_when_renewals_stop(candidates) -> None:
    first, second = candidates("first"), candidates("second")
    first.elector.start()
    eventually(lambda: first.elector.is_leader)
    second.elector.start()
    time.sleep(1.0)  # several rounds: the Lease is held and fresh
    assert not second.elector.is_leader
    assert first.events() == [("started", 0)]

    first.leases.cut.set()  # the leader is partitioned: its renewals fail
    eventually(lambda: second.elector.is_leader)
    eventually(lambda: ("stopped", None) in first.events())
    assert second.events() == [("started", 1)]  # the epoch grew with the takeover
    assert second.elector.epoch == 1 and first.elector.epoch is None
    # Safety: the old leader stood down before the new one started.
    assert first.when("stopped") <= second.when("started")


def test_a_leader_that_lost_its_lease_never_takes_it_back(candidates) -> None:
    """Renewals failed past the deadline, then came back while the Lease still names it:
    the term is over for this process (its controller is shutting down)."""
    lasting = {**TIMING, "lease_duration": 30}  # the Lease outlives the whole test
    first = candidates("first", **lasting)
    first.elector.start()
    eventually(lambda: first.elector.is_leader)
    first.leases.cut.set()
    eventually(lambda: ("stopped", None) in first.events())
    first.leases.cut.clear()  # the API server answers again
    time.sleep(10 * TIMING["retry_period"])
    assert first.events() == [("started", 0), ("stopped", None)]
    assert not first.elector.is_leader


def test_racing_candidates_elect_exactly_one(candidates) -> None:
    racers = [candidates(f"racer-{index}") for index in range(3)]
    for racer in racers:
        racer.elector.start()
    eventually(lambda: any(r.elector.is_leader for r in racers))
    time.sleep(1.0)
    leaders = [r for r in racers if r.elector.is_leader]
    assert len(leaders) == 1
    assert leaders[0].events() == [("started", 0)]


def test_release_hands_over_without_waiting_for_expiry(candidates) -> None:
    # A long lease: only a release lets the second in quickly.
    slow = {"lease_duration": 30, "renew_deadline": 20, "retry_period": 0.2}
    first, second = candidates("first", **slow), candidates("second", **slow)
    first.elector.start()
    eventually(lambda: first.elector.is_leader)
    second.elector.start()
    time.sleep(0.5)
    first.elector.stop()
    assert first.events() == [("started", 0), ("stopped", None)]
    eventually(lambda: second.elector.is_leader, timeout=5)
    assert second.elector.epoch == 1


def test_a_returning_identity_starts_a_new_term(candidates) -> None:
    before = candidates("same")
    before.elector.start()
    eventually(lambda: before.elector.is_leader)
    before.elector.stop(release=False)  # crashed: the Lease still names it
    after = candidates("same")
    after.elector.start()
    eventually(lambda: after.elector.is_leader)
    assert after.events() == [("started", 1)]  # a new term, so a new epoch


def test_epoch_floor_keeps_the_epoch_growing_when_the_lease_is_new(candidates) -> None:
    # The log saw epoch 41 under a Lease since deleted; the recreated Lease starts above it.
    fresh = candidates("fresh", epoch_floor=lambda: 41)
    assert fresh.elector.try_acquire_or_renew()
    assert fresh.elector.epoch == 42
    assert fresh.elector.try_acquire_or_renew()  # a renewal keeps the term
    assert fresh.events() == [("started", 42)]


def test_a_leader_renews_with_one_write_and_no_read(candidates) -> None:
    # client-go's fast path: the leader writes the Lease it wrote last, unread.
    only = candidates("only")
    assert only.elector.try_acquire_or_renew()  # the Lease is created: one create
    only.leases.by_method.clear()
    for _ in range(5):
        assert only.elector.try_acquire_or_renew()
    assert only.leases.by_method == Counter(replace_namespaced_lease=5)
    assert only.events() == [("started", 0)]  # renewals keep the term


def test_a_leader_whose_lease_another_wrote_reads_it_and_steps_down(candidates, cluster) -> None:
    holder = candidates("holder")
    assert holder.elector.try_acquire_or_renew()
    # Someone else takes the Lease (an operator, a candidate with a skewed view): the
    # leader's unread renewal carries a stale resourceVersion and is refused.
    api = client.CoordinationV1Api(cluster.api_client("admin"))
    lease = api.read_namespaced_lease(holder.elector.name, NAMESPACE)
    lease.spec.holder_identity = "usurper"
    api.replace_namespaced_lease(holder.elector.name, NAMESPACE, lease)
    holder.leases.by_method.clear()
    assert not holder.elector.try_acquire_or_renew()
    assert holder.leases.by_method == Counter(replace_namespaced_lease=1, read_namespaced_lease=1)
    assert holder.events() == [("started", 0), ("stopped", None)]
    after = api.read_namespaced_lease(holder.elector.name, NAMESPACE)
    assert after.spec.holder_identity == "usurper"  # read, not overwritten


def test_timing_must_leave_room_to_step_down() -> None:
    with pytest.raises(ValueError, match="renew_deadline"):
        leader.Elector(
            object(),
            namespace="ns",
            name="l",
            identity="i",
            on_started=lambda epoch: None,
            on_stopped=lambda: None,
            lease_duration=5,
            renew_deadline=5,
        )


def test_the_lease_is_not_taken_while_the_epoch_floor_cannot_be_read(candidates, caplog) -> None:
    log_down = threading.Event()
    log_down.set()

    def floor() -> int:
        if log_down.is_set():
            raise ConnectionRefusedError("the event log's database is down")
        return 7

    standby = candidates("standby", epoch_floor=floor)
    standby.elector.start()
    time.sleep(1.0)  # five rounds: the Lease is free, but its epoch is unknown
    assert not standby.elector.is_leader and standby.events() == []
    refusals = [r for r in caplog.records if "newest epoch cannot be read" in r.getMessage()]
    assert refusals and all(r.exc_info is None for r in refusals)  # a line, not a traceback
    log_down.clear()
    eventually(lambda: standby.elector.is_leader, timeout=5)
    assert standby.events() == [("started", 8)]


def test_a_leader_whose_term_another_took_and_released_does_not_resume(
    candidates, cluster, lease_name
) -> None:
    """The leader did not run for longer than its Lease (a long GC, a frozen VM): another
    took the Lease, failed to start and released it. Back, the first one's term is over:
    it steps down (its process leaves and starts again as a standby), where it once took
    the Lease as a new term under its old epoch, writing with the fence open."""
    first = candidates("first")
    assert first.elector.try_acquire_or_renew()  # a round, by hand: no thread to pause
    assert first.events() == [("started", 0)]
    api = client.CoordinationV1Api(cluster.api_client("admin"))
    for holder, transitions in (("second", 1), (None, 1)):  # taken, then released
        lease = api.read_namespaced_lease(lease_name, NAMESPACE)
        lease.spec.holder_identity = holder
        lease.spec.lease_transitions = transitions
        api.replace_namespaced_lease(lease_name, NAMESPACE, lease)
    assert not first.elector.try_acquire_or_renew()
    assert first.events() == [("started", 0), ("stopped", None)]
    assert not first.elector.is_leader
    lease = api.read_namespaced_lease(lease_name, NAMESPACE)
    assert lease.spec.holder_identity is None  # not taken back
