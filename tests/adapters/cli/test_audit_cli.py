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
from fsm.fold import evolve, fold
from fsm.reasons import Reason
from fsm.state import OrderState
from store import schema
from tests.support import strategies as s

UID = "0b7c2a8e-1111-4c1e-9a55-000000000001"
KEY = store.StreamKey(UID, "support", "support-llm")


def _write_life(log: store.EventLog) -> list[int]:
    """An order that waits for capacity, then plans, rolls out and serves.

    Returns the version reached after each observation."""
    observations = [
        s.spec(0),
        s.klass(1),
        s.model(2),
        s.planned(3, Reason.NO_CAPACITY, message="no A100 is free"),
        s.planned(60),
        s.applied(61),
        s.workload(62),
        s.probe(63),
    ]
    state, versions = OrderState(), []
    for obs in observations:
        events = decide.decide(state, obs)
        if events:
            log.append(KEY, events, expected_version=state.version, epoch=1, recorded_at=obs.at)
            for event in events:
                state = evolve(state, event)
        versions.append(state.version)
    log.record_projection(UID, state.version, status.render_status(state))
    return versions


@pytest.fixture
def written(log_url: str) -> tuple[str, list[int]]:
    with store.open_log(log_url) as log:
        return log_url, _write_life(log)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


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


def test_an_unknown_order_is_a_clear_error(written, capsys) -> None:
    url, _ = written
    assert main(["history", "support/nope", "--store", url]) == 1
    assert main(["history", "no-slash", "--store", url]) == 1
    assert "no stream" in capsys.readouterr().err
