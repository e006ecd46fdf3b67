"""The administrator's audit CLI run for real against the running platform's event log.

Three orders of this module's own go through the live controller — one Ready, one held
by a failed plan, one deleted after it served — and `ai-inference history|status|why|
verify` run as subprocesses against `platform.store_url` (SQLite: reading while the
controller writes is safe). Each answer is checked against the log itself and against
the order's status in the API: the CLI must tell the truth, not just print.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from adapters.kubernetes.manifests import Applier
from adapters.platform import LocalPlatform
from fsm import fold, status
from fsm.explain import WHO_CAN_ACT
from fsm.reasons import Who
from tests.e2e.conftest import GROUP, VERSION, Orders, conditions, delete_and_wait, wait_for

pytestmark = pytest.mark.cluster

__all__: list[str] = []

CLI = str(Path(sys.executable).with_name("ai-inference"))
QWEN_SMALL = "Qwen/Qwen2.5-0.5B-Instruct"
QWEN_AWQ = "Qwen/Qwen2.5-32B-Instruct-AWQ"
# A class that may use only the 16 GiB T4s: the 32B AWQ model (~19 GB) fits none of them.
T4_ONLY = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "InferenceServiceClass",
    "metadata": {"name": "audit-t4-only"},
    "spec": {
        "modelPolicy": {"allowedEndpointTypes": ["Chat"]},
        "acceleratorPolicy": {
            "allowedSharingModes": ["Shared"],
            "allowedPlacementTypes": ["WholeDevice"],
            "allowedDeviceClasses": ["nvidia-t4-mps-physical"],
            "maxAcceleratorCount": 1,
        },
        "exposurePolicy": {"type": "ClusterLocal", "authentication": "None"},
    },
}


@dataclass(frozen=True)
class AuditOrders:
    ready: dict[str, Any]  # the order as the API shows it once Ready
    held: dict[str, Any]  # Pending on a failed plan
    unnamed: dict[str, Any]  # Pending: it names a class that does not exist
    gone_uid: str  # served, then deleted


def ai_inference(platform: LocalPlatform, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, *args, "--store", platform.store_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _ok(platform: LocalPlatform, *args: str) -> str:
    done = ai_inference(platform, *args)
    assert done.returncode == 0, f"ai-inference {' '.join(args)}: {done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def audited(platform: LocalPlatform) -> Iterator[AuditOrders]:
    alice = Orders(platform.api("alice"))
    admin = platform.api("admin")
    custom = client.CustomObjectsApi(admin)
    Applier(admin).apply_all([T4_ONLY])
    made = ("audit-ready", "audit-held", "audit-gone", "audit-no-class")
    try:
        chat = {"inferenceServiceClassName": "default-llm", "model": _hf(QWEN_SMALL)}
        alice.create("support", "audit-ready", chat)
        alice.create("support", "audit-gone", chat)
        t4 = {"inferenceServiceClassName": "audit-t4-only", "model": _hf(QWEN_AWQ)}
        alice.create("support", "audit-held", t4)
        no_class = {"inferenceServiceClassName": "audit-no-such-class", "model": _hf(QWEN_SMALL)}
        alice.create("support", "audit-no-class", no_class)
        ready = alice.wait_phase("support", "audit-ready", "Ready")
        gone = alice.wait_phase("support", "audit-gone", "Ready")
        held = alice.wait_phase(
            "support", "audit-held", "Pending", reason="NoAcceleratorWithEnoughMemory"
        )
        unnamed = alice.wait_phase("support", "audit-no-class", "Pending", reason="ClassNotFound")
        alice.delete("support", "audit-gone")
        uid = gone["metadata"]["uid"]
        wait_for(lambda: (i := platform.log.stream(uid)) is not None and i.deleted, timeout=30)
        yield AuditOrders(ready=ready, held=held, unnamed=unnamed, gone_uid=uid)
    finally:
        for name in made:
            delete_and_wait(platform, alice, "support", name)
        try:
            custom.delete_cluster_custom_object(
                GROUP, VERSION, "inferenceserviceclasses", "audit-t4-only"
            )
        except ApiException as exc:
            if exc.status != 404:
                raise


def _hf(name: str) -> dict[str, Any]:
    return {"src": "HuggingFace", "ref": {"name": name}}


def _table(stdout: str) -> tuple[str, list[list[str]]]:
    """The history table's title line and its rows split into columns (CHANGES joined)."""
    title, header, *rows = stdout.rstrip("\n").split("\n")
    assert header.split()[:5] == ["VER", "TIME", "EVENT", "PHASE", "REASON"]
    return title, [row.split(None, 5) for row in rows]


# --- history ------------------------------------------------------------------------------


def test_history_lists_every_event_in_order_with_the_phase_changes(
    platform: LocalPlatform, audited: AuditOrders
) -> None:
    uid = audited.ready["metadata"]["uid"]
    title, rows = _table(_ok(platform, "history", "support/audit-ready"))
    records = platform.log.read(uid)[: len(rows)]  # the controller may have appended since
    assert title == f"support/audit-ready (uid {uid})"
    assert [int(r[0]) for r in rows] == list(range(1, len(rows) + 1))
    assert [r[2] for r in rows] == [rec.type_name for rec in records]
    assert [r[1] for r in rows] == [status.rfc3339(rec.recorded_at) for rec in records]
    assert rows[0][2] == "SpecObserved"
    phases = [r[3] for r in rows if "->" in r[3]]
    assert phases == ["Pending->Ready"]  # one change, and it is the one the API shows
    turned = next(r for r in rows if r[3] == "Pending->Ready")
    assert turned[2] == "ProbeSucceeded"
    assert "Ready: False (AwaitingFirstProbe) -> True (EndpointServing)" in turned[5]


def test_history_as_json_is_the_same_history(platform: LocalPlatform, audited: AuditOrders) -> None:
    uid = audited.held["metadata"]["uid"]
    doc = json.loads(_ok(platform, "history", "support/audit-held", "--output", "json"))
    assert (doc["uid"], doc["namespace"], doc["name"]) == (uid, "support", "audit-held")
    events = doc["events"]
    records = platform.log.read(uid)[: len(events)]
    assert [e["version"] for e in events] == [r.version for r in records]
    assert [e["type"] for e in events] == [r.type_name for r in records]
    assert {e["phaseAfter"] for e in events} == {"Pending"}
    failed = next(e for e in events if e["type"] == "PlanFailed")
    assert failed["reason"] == "NoAcceleratorWithEnoughMemory"
    assert any(
        c.startswith("Planned: ") and "NoAcceleratorWithEnoughMemory" in c
        for c in failed["changes"]
    )


def test_a_deleted_orders_history_is_still_readable(
    platform: LocalPlatform, audited: AuditOrders
) -> None:
    uid = audited.gone_uid
    title, rows = _table(_ok(platform, "history", f"uid:{uid}"))
    assert title.startswith(f"support/audit-gone (uid {uid}), deleted at ")
    types = [r[2] for r in rows]
    assert types[-1] == "OrderDeleted" and "ProbeSucceeded" in types
    assert [r[3] for r in rows if "->" in r[3]] == ["Pending->Ready"]
    by_name = _table(_ok(platform, "history", "support/audit-gone"))[1]
    assert by_name == rows
    why = _ok(platform, "why", "support/audit-gone")
    assert "The order was deleted; its stream is closed." in why


# --- status at a point in the past ---------------------------------------------------------


def test_status_before_ready_is_pending_and_equals_the_fold_at_that_version(
    platform: LocalPlatform, audited: AuditOrders
) -> None:
    uid = audited.ready["metadata"]["uid"]
    records = platform.log.read(uid)
    ready_at = next(r for r in records if r.type_name == "ProbeSucceeded")
    before = [r for r in records if r.recorded_at < ready_at.recorded_at]
    assert before, "the order was Pending for at least one recorded instant"
    expected = status.render_status(fold.fold([r.event for r in before]))
    assert expected["phase"] == "Pending"

    at = yaml.safe_load(
        _ok(platform, "status", "support/audit-ready", "--at", before[-1].recorded_at.isoformat())
    )
    assert at == {"version": before[-1].version, "deleted": None, "status": expected}
    by_version = yaml.safe_load(
        _ok(platform, "status", "support/audit-ready", "--version", str(before[-1].version))
    )
    assert by_version == at

    # And now: the fold of the whole stream is what the API shows.
    now = yaml.safe_load(_ok(platform, "status", "support/audit-ready"))
    live = Orders(platform.api("alice")).get("support", "audit-ready")
    assert live is not None and now["status"] == live["status"]
    assert now["status"]["phase"] == "Ready"


def test_status_at_a_time_the_api_or_history_printed_includes_that_second(
    platform: LocalPlatform, audited: AuditOrders
) -> None:
    # Kubernetes and the history table print whole seconds: the admin copies one of them.
    ready = next(c for c in audited.ready["status"]["conditions"] if c["type"] == "Ready")
    at = yaml.safe_load(
        _ok(platform, "status", "support/audit-ready", "--at", ready["lastTransitionTime"])
    )
    assert at["status"]["phase"] == "Ready"
    rows = _table(_ok(platform, "history", "support/audit-ready"))[1]
    turned = next(r for r in rows if r[3] == "Pending->Ready")
    at_row = yaml.safe_load(_ok(platform, "status", "support/audit-ready", "--at", turned[1]))
    assert at_row["version"] >= int(turned[0]) and at_row["status"]["phase"] == "Ready"


def test_status_before_the_first_event_says_so(
    platform: LocalPlatform, audited: AuditOrders
) -> None:
    first = platform.log.read(audited.ready["metadata"]["uid"])[0]
    done = ai_inference(platform, "status", "support/audit-ready", "--at", "2000-01-01T00:00:00Z")
    assert done.returncode == 1 and "no events yet" in done.stderr
    assert first.version == 1


# --- why ----------------------------------------------------------------------------------


def test_why_names_the_blocking_condition_who_can_act_and_the_candidates(
    platform: LocalPlatform, audited: AuditOrders
) -> None:
    held = audited.held
    assert conditions(held)[2] == ("Planned", "False", "NoAcceleratorWithEnoughMemory")
    message = held["status"]["conditions"][2]["message"]
    out = _ok(platform, "why", "support/audit-held")
    lines = out.splitlines()
    assert lines[0].startswith("support/audit-held: Pending (")
    assert f"Held at Planned=False, reason NoAcceleratorWithEnoughMemory: {message}" in lines
    assert f"  Who can unblock it: {WHO_CAN_ACT[Who.WAIT]}." in lines
    start = next(i for i, line in enumerate(lines) if line.startswith("Last plan attempt ("))
    assert lines[start].endswith(": NoAcceleratorWithEnoughMemory. Candidates:")
    candidates = [line for line in lines[start + 1 :] if line.startswith("    - ")]
    assert candidates and all(c.startswith("    - nvidia-t4-mps-physical") for c in candidates)
    assert all(": lost, " in c for c in candidates)  # nothing was chosen
    # The conditions block repeats what the API shows, in order.
    shown = lines[lines.index("Conditions:") + 1 :]
    assert [line.split()[:3] for line in shown] == [list(c) for c in conditions(held)]


def test_why_sends_a_missing_class_to_the_orders_author(
    platform: LocalPlatform, audited: AuditOrders
) -> None:
    message = audited.unnamed["status"]["conditions"][0]["message"]
    lines = _ok(platform, "why", "support/audit-no-class").splitlines()
    assert f"Held at ClassResolved=False, reason ClassNotFound: {message}" in lines
    assert f"  Who can unblock it: {WHO_CAN_ACT[Who.USER]}." in lines
    assert not any(line.startswith("Last plan attempt") for line in lines)  # never planned


def test_why_for_a_ready_order_says_nothing_blocks_it(
    platform: LocalPlatform, audited: AuditOrders
) -> None:
    out = _ok(platform, "why", "support/audit-ready")
    assert out.startswith("support/audit-ready: Ready (")
    assert "Nothing blocks it: every condition is True." in out


def test_why_for_an_unknown_order_fails_plainly(
    platform: LocalPlatform, audited: AuditOrders
) -> None:
    done = ai_inference(platform, "why", "support/no-such-order")
    assert done.returncode == 1
    assert "no stream for support/no-such-order" in done.stderr


# --- verify -------------------------------------------------------------------------------


def test_verify_replays_every_stream_without_divergence(
    platform: LocalPlatform, audited: AuditOrders
) -> None:
    out = _ok(platform, "verify")
    assert "DIVERGES" not in out
    last = out.splitlines()[-1]
    checked = int(last.split()[0])
    assert last == f"{checked} streams verified, 0 divergent"
    with_projection = [i for i in platform.log.streams() if platform.log.projection(i.uid)]
    assert checked >= 3 and checked <= len(with_projection)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        pytest.param("sqlite:///{tmp}/typo.sqlite", "no file {tmp}/typo.sqlite", id="missing-file"),
        pytest.param("mysql://db/log", "unsupported database 'mysql'", id="unsupported-database"),
        pytest.param("{tmp}/typo.sqlite", "no file {tmp}/typo.sqlite", id="missing-path"),
        pytest.param("postgresql://u@127.0.0.1:1/x", "127.0.0.1", id="unreachable"),
    ],
)
def test_audit_commands_refuse_a_log_that_is_not_there(tmp_path: Path, url: str, says: str) -> None:
    # A mistyped path must not become an empty log that "verifies" with nothing in it.
    store_url = url.format(tmp=tmp_path)
    commands = (
        [["verify"], ["history", "support/audit-ready"]] if "typo" in url else [["why", "x/y"]]
    )
    for command in commands:
        done = subprocess.run(
            [CLI, *command, "--store", store_url],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 3, done  # 3: the log cannot be opened or read
        assert done.stderr.startswith("cannot open the event log ")
        assert says.format(tmp=tmp_path) in done.stderr and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []
