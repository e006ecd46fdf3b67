"""`history`, `status --at/--version`, `why` and `verify` on a log the tests write.

The stream is produced the way the controller produces it — observations through
`decide` and `evolve`, appended to a real log (SQLite and PostgreSQL) — so the CLI is
checked against what it will read in production, without a cluster.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import sqlalchemy as sa
import yaml

import store
from adapters.cli.main import main
from fsm import decide, status
from fsm import events as ev
from fsm.fold import evolve, fold
from fsm.reasons import Reason
from fsm.state import OrderState
from store import schema
from tests.support import strategies as s

UID = "0b7c2a8e-1111-4c1e-9a55-000000000001"
KEY = store.StreamKey(UID, "support", "support-llm")
NEW_UID = "0b7c2a8e-1111-4c1e-9a55-000000000003"


def _write_life(log: store.EventLog, key: store.StreamKey = KEY, t0: float = 0) -> list[int]:
    """An order that waits for capacity, then plans, rolls out and serves, from `t0` on.

    Returns the version reached after each observation."""
    observations = [
        s.spec(t0),
        s.klass(t0 + 1),
        s.model(t0 + 2),
        s.planned(t0 + 3, Reason.NO_CAPACITY, message="no A100 is free"),
        s.planned(t0 + 60),
        s.applied(t0 + 61),
        s.workload(t0 + 62),
        s.probe(t0 + 63),
    ]
    state, versions = OrderState(), []
    for obs in observations:
        events = decide.decide(state, obs)
        if events:
            log.append(key, events, expected_version=state.version, epoch=1, recorded_at=obs.at)
            for event in events:
                state = evolve(state, event)
        versions.append(state.version)
    log.record_projection(key.uid, state.version, status.render_status(state))
    return versions


@pytest.fixture
def written(log_url: str) -> tuple[str, list[int]]:
    with store.open_log(log_url) as log:
        return log_url, _write_life(log)


@pytest.fixture
def recreated(log_url: str) -> str:
    """support/support-llm deleted at t=100 (as the controller does: an OrderDeleted event,
    then the stream marked), and created again as another order at t=200."""
    with store.open_log(log_url) as log:
        head = _write_life(log)[-1]
        log.append(KEY, [ev.OrderDeleted(observed_at=s.at(100))], head, 1, s.at(100))
        log.mark_deleted(UID, s.at(100))
        _write_life(log, store.StreamKey(NEW_UID, "support", "support-llm"), t0=200)
    return log_url


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def _when(seconds: float) -> str:
    return status.rfc3339(s.at(seconds))


def _lose_events(url: str, versions: list[int]) -> None:
    """Delete events of the order's stream: what a restore from a bad backup could leave."""
    with store.open_log(url) as log, log.engine.begin() as conn:
        conn.execute(
            sa.delete(schema.events).where(
                schema.events.c.stream_uid == UID, schema.events.c.version.in_(versions)
            )
        )


def test_history_lists_every_event_with_its_phase_change(written, capsys) -> None:
    url, versions = written
    code, out = _run(capsys, "history", "support/support-llm", "--store", url)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("support/support-llm (uid " + UID)
    rows = lines[2:]
    assert len(rows) == versions[-1]
    assert "PlanFailed" in out and "NoCapacity" in out
    assert any("Pending->Ready" in row and "ProbeSucceeded" in row for row in rows)


def test_history_as_json(written, capsys) -> None:
    url, versions = written
    code, out = _run(capsys, "history", "support/support-llm", "--store", url, "--output", "json")
    doc = json.loads(out)
    assert code == 0 and doc["uid"] == UID
    assert [e["version"] for e in doc["events"]] == list(range(1, versions[-1] + 1))
    assert doc["events"][-1]["phaseAfter"] == "Ready"


def test_history_numbers_each_event_by_its_stored_version(written, capsys) -> None:
    url, versions = written
    _lose_events(url, [5])
    code, out = _run(capsys, "history", "support/support-llm", "--store", url, "-o", "json")
    shown = [e["version"] for e in json.loads(out)["events"]]
    # The events it has, and exit 3: the phases after the gap are not the order's.
    assert code == 3 and shown == [v for v in range(1, versions[-1] + 1) if v != 5]


def test_status_at_a_time_is_the_status_then(written, capsys) -> None:
    url, _ = written
    # Between the failed plan (t=3) and the successful one (t=60).
    when = (s.at(30)).isoformat().replace("+00:00", "Z")
    code, out = _run(capsys, "status", "support/support-llm", "--store", url, "--at", when)
    doc = yaml.safe_load(out)
    assert code == 0 and doc["status"]["phase"] == "Pending"
    planned = next(c for c in doc["status"]["conditions"] if c["type"] == "Planned")
    assert (planned["status"], planned["reason"]) == ("False", "NoCapacity")
    with store.open_log(url) as log:
        expected = status.render_status(
            fold(r.event for r in log.read(UID, upto_version=doc["version"]))
        )
    assert doc["status"] == expected


def test_status_at_a_version(written, capsys) -> None:
    url, versions = written
    code, out = _run(
        capsys, "status", "support/support-llm", "--store", url, "--version", str(versions[-1])
    )
    assert code == 0 and yaml.safe_load(out)["status"]["phase"] == "Ready"


def test_status_at_a_version_the_stream_lacks_says_so(written, capsys) -> None:
    url, versions = written
    head = versions[-1]
    code = main(["status", "support/support-llm", "--store", url, "--version", str(head + 1)])
    assert code == 1 and f"has no version {head + 1} (head {head})" in capsys.readouterr().err
    _lose_events(url, [5])
    assert main(["status", "support/support-llm", "--store", url, "--version", "5"]) == 1
    for bad in ("-1", "0"):
        with pytest.raises(SystemExit) as usage:
            main(["status", "support/support-llm", "--store", url, "--version", bad])
        assert usage.value.code == 2


def test_status_at_a_time_reads_the_order_that_had_the_name_then(recreated, capsys) -> None:
    # At t=30 the first order waited for capacity; the second began only at t=200.
    argv = ["status", "support/support-llm", "--store", recreated, "--at"]
    code, out = _run(capsys, *argv, _when(30))
    doc = yaml.safe_load(out)
    assert code == 0 and doc["status"]["phase"] == "Pending" and doc["deleted"] is None
    code, out = _run(capsys, *argv, _when(230))  # the second, 30 s in
    assert code == 0 and yaml.safe_load(out)["status"]["phase"] == "Pending"
    code, out = _run(capsys, *argv, _when(300))
    assert code == 0 and yaml.safe_load(out)["status"]["phase"] == "Ready"


@pytest.mark.parametrize("order", ["support/support-llm", f"uid:{UID}"], ids=["name", "uid"])
def test_status_after_the_deletion_says_the_order_was_deleted(recreated, capsys, order) -> None:
    # Between the deletion (t=100) and the order of the same name made again (t=200).
    argv = ["status", order, "--store", recreated, "--at", _when(150)]
    code, out = _run(capsys, *argv, "-o", "json")
    doc = json.loads(out)
    assert code == 0 and doc["deleted"] == _when(100) and doc["status"]["phase"] == "Ready"
    code, out = _run(capsys, *argv, "-o", "table")
    assert code == 0 and out.splitlines()[1] == f"deleted at {_when(100)}: the last status it had"
    code, out = _run(capsys, "status", order, "--store", recreated, "--at", _when(99))
    assert code == 0 and yaml.safe_load(out)["deleted"] is None


def test_status_before_the_first_event_says_so(written, capsys) -> None:
    url, _ = written
    when = (s.at(0) - timedelta(hours=1)).isoformat()
    assert main(["status", "support/support-llm", "--store", url, "--at", when]) == 1


def test_why_explains_the_order_in_words(written, capsys) -> None:
    url, _ = written
    code, out = _run(capsys, "why", "support/support-llm", "--store", url)
    assert code == 0
    assert "Ready" in out.splitlines()[0] and "Nothing blocks it" in out


def test_verify_passes_then_catches_a_tampered_projection(written, capsys) -> None:
    url, _ = written
    code, out = _run(capsys, "verify", "--store", url)
    assert code == 0 and "1 streams verified, 0 divergent" in out
    with store.open_log(url) as log, log.engine.begin() as conn:
        # What a buggy writer could have left: a projection the stream does not fold to.
        bad = dict(log.projection(UID).status, phase="Failed")
        conn.execute(sa.update(schema.projections).values(status=bad))
    code, out = _run(capsys, "verify", "--store", url)
    assert code == 1 and "DIVERGES support/support-llm" in out and "phase" in out


@pytest.mark.parametrize(
    ("lost", "said"),
    [
        (slice(4, 6), "versions do not run 1..{head}: 5-6 missing"),
        (slice(-2, None), "status recorded at version {head}, beyond the head {kept}"),
        (slice(None), "no events, status recorded at version {head}"),
    ],
    ids=["a-gap", "the-tail", "every-event"],
)
def test_verify_catches_lost_events(written, capsys, lost: slice, said: str) -> None:
    # Lost events may fold to the very status recorded: the versions tell.
    url, versions = written
    head = versions[-1]
    gone = list(range(1, head + 1))[lost]
    _lose_events(url, gone)
    code, out = _run(capsys, "verify", "--store", url)
    expected = said.format(head=head, kept=head - len(gone))
    assert code == 1 and f"DIVERGES support/support-llm (uid {UID}): {expected}\n" in out


@pytest.mark.parametrize("command", ["status", "why", "history"])
def test_a_stream_missing_events_is_not_replayed_as_if_whole(written, capsys, command) -> None:
    """Events 5-6 lost (a bad restore): what the rest folds to is a state the order never
    had, so status and why refuse to show one; history lists the events it has, with the
    gap in its numbers. Each says why on stderr, exit 3, as verify reports the stream."""
    url, versions = written
    _lose_events(url, [5, 6])
    code = main([command, "support/support-llm", "--store", url])
    out, err = capsys.readouterr()
    assert code == 3
    assert f"support/support-llm's versions do not run 1..{versions[-1]}: 5-6 missing" in err
    if command == "history":
        numbers = [int(line.split()[0]) for line in out.splitlines()[2:]]
        assert numbers == [v for v in range(1, versions[-1] + 1) if v not in (5, 6)]
    else:
        assert out == ""
    # Before the gap, the order's past is whole: its status there is still shown.
    if command == "status":
        assert main([command, "support/support-llm", "--store", url, "--version", "4"]) == 0


def test_an_unknown_order_is_a_clear_error(written, capsys) -> None:
    url, _ = written
    assert main(["history", "support/nope", "--store", url]) == 1
    assert "no stream" in capsys.readouterr().err


@pytest.mark.parametrize("ref", ["no-slash", "a/b/c", "/x", "x/", "uid:"])
def test_a_malformed_order_reference_is_a_usage_error(written, capsys, ref: str) -> None:
    url, _ = written
    with pytest.raises(SystemExit) as usage:
        main(["history", ref, "--store", url])
    assert usage.value.code == 2 and "NAMESPACE/NAME or uid:UID" in capsys.readouterr().err
