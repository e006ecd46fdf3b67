"""The audit CLI for people and scripts: `list`, `-o`, `--store` forms, relative times,
exit codes, progress, `migrate`, and reading without ever writing (a SELECT-only role).

The log is written as the controller writes it (tests/adapters/cli/test_audit_cli.py's
life of one order), on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import json
import os
import string
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import make_url

import store
from adapters.cli import audit_cmd, options
from adapters.cli.main import main
from fsm import decide, status
from fsm import events as ev
from fsm.fold import evolve
from fsm.reasons import Reason
from fsm.state import OrderState
from store import schema
from tests.adapters.cli.test_audit_cli import UID, _write_life
from tests.store.conftest import admin_connection
from tests.support import strategies as s

OTHER_UID = "0b7c2a8e-2222-4c1e-9a55-000000000002"
OTHER = store.StreamKey(OTHER_UID, "analytics", "embedder")
ROOT = Path(__file__).resolve().parents[3]
# A URL whose secrets must never be printed, of a server nothing listens on (port 1).
SECRET_URL = (
    "postgresql://reader:hunter2@127.0.0.1:1/ai"
    "?password=qwerty7&sslmode=disable&sslpassword=zxcvb9&connect_timeout=2"
)
SECRETS = ("hunter2", "qwerty7", "zxcvb9")


def _write_waiting(log: store.EventLog) -> None:
    """A second order, in another namespace, stuck without capacity; then deleted."""
    state = OrderState()
    for obs in (s.spec(0), s.klass(1), s.model(2), s.planned(3, Reason.NO_CAPACITY)):
        events = decide.decide(state, obs)
        if events:
            log.append(OTHER, events, expected_version=state.version, epoch=1, recorded_at=obs.at)
            for event in events:
                state = evolve(state, event)
    log.record_projection(OTHER_UID, state.version, status.render_status(state))
    log.mark_deleted(OTHER_UID, s.at(100))


@pytest.fixture
def two(log_url: str) -> str:
    with store.open_log(log_url) as log:
        _write_life(log)
        _write_waiting(log)
    return log_url


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _cli(*argv: str, store_env: str) -> subprocess.CompletedProcess[str]:
    """The command in a fresh interpreter: AI_INFERENCE_STORE is read as it starts."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AI_INFERENCE_STORE": store_env}
    return subprocess.run(
        [sys.executable, "-m", "adapters.cli.main", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


# -- --store: a path or a URL, everywhere ---------------------------------------------------


def test_history_takes_a_plain_path_like_the_controller(tmp_path: Path, capsys) -> None:
    path = tmp_path / "events.sqlite"
    with store.open_log(f"sqlite:///{path}") as log:
        _write_life(log)
    code, out, err = _run(capsys, "history", "support/support-llm", "--store", str(path))
    assert code == 0, err
    assert out.startswith("support/support-llm (uid " + UID)


# -- list -----------------------------------------------------------------------------------


def test_list_shows_every_order_and_filters(two, capsys) -> None:
    code, out, _ = _run(capsys, "list", "--store", two)
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split()[:4] == ["NAMESPACE", "NAME", "PHASE", "REASON"]
    assert len(rows) == 2
    assert rows[0].split()[:4] == ["support", "support-llm", "Ready", "-"]
    assert rows[1].split()[:4] == ["analytics", "embedder", "Pending", "NoCapacity"]

    def names(*argv: str) -> list[str]:
        code, out, _ = _run(capsys, "list", "--store", two, "-o", "json", *argv)
        assert code == 0
        return [f"{d['namespace']}/{d['name']}" for d in json.loads(out)]

    assert names("-n", "analytics") == ["analytics/embedder"]
    assert names("--phase", "Ready") == ["support/support-llm"]
    assert names("--reason", "NoCapacity") == ["analytics/embedder"]
    assert names("--deleted") == ["analytics/embedder"]
    assert names("--live") == ["support/support-llm"]
    assert names("--phase", "Failed") == []


def test_list_as_yaml_carries_the_same_fields(two, capsys) -> None:
    code, out, _ = _run(capsys, "list", "--store", two, "-o", "yaml")
    docs = yaml.safe_load(out)
    assert code == 0 and [d["uid"] for d in docs] == [UID, OTHER_UID]
    assert docs[1]["deleted"] is not None and docs[1]["reason"] == "NoCapacity"
    assert docs[0]["version"] > 0 and docs[0]["phase"] == "Ready"


# -- -o on every read command ----------------------------------------------------------------


def test_every_read_command_speaks_json_and_yaml(two, capsys) -> None:
    for fmt, load in (("json", json.loads), ("yaml", yaml.safe_load)):
        code, out, _ = _run(capsys, "history", "support/support-llm", "--store", two, "-o", fmt)
        assert code == 0 and load(out)["events"][-1]["phaseAfter"] == "Ready"
        code, out, _ = _run(capsys, "status", "support/support-llm", "--store", two, "-o", fmt)
        assert code == 0 and load(out)["status"]["phase"] == "Ready"
        code, out, _ = _run(capsys, "why", "analytics/embedder", "--store", two, "-o", fmt)
        doc = load(out)
        assert code == 0 and doc["blocking"]["reason"] == "NoCapacity"
        assert doc["blocking"]["condition"] == "Planned" and doc["deleted"] is not None
        code, out, _ = _run(capsys, "verify", "--store", two, "-o", fmt)
        assert code == 0 and load(out) == {"checked": 2, "divergent": []}


def test_status_as_a_table(two, capsys) -> None:
    code, out, _ = _run(capsys, "status", "analytics/embedder", "--store", two, "-o", "table")
    assert code == 0
    assert out.splitlines()[0].endswith(": Pending")
    assert any(line.split()[:3] == ["Planned", "False", "NoCapacity"] for line in out.splitlines())


def _tamper(url: str, *uids: str) -> None:
    """Record a status the streams never reached: phase Failed where they are Ready."""
    with store.open_log(url) as log, log.engine.begin() as conn:
        for uid in uids:
            bad = dict(log.projection(uid).status, phase="Failed")
            conn.execute(
                sa.update(schema.projections)
                .where(schema.projections.c.stream_uid == uid)
                .values(status=bad)
            )


def test_verify_reports_a_divergence_for_scripts(two, capsys) -> None:
    _tamper(two, UID)
    code, out, _ = _run(capsys, "verify", "--store", two, "-o", "json")
    doc = json.loads(out)
    assert code == 1 and doc["checked"] == 2
    assert [d["uid"] for d in doc["divergent"]] == [UID]
    assert doc["divergent"][0]["differences"]["phase"] == {
        "recorded": "Failed",
        "replayed": "Ready",
    }


def test_verify_folds_each_stream_up_to_its_projection_and_lists_the_oldest_first(
    two, capsys
) -> None:
    # A third order whose uid sorts first but which began last; then the first order's
    # stream moves on past its recorded status (a probe failed, not yet projected).
    late = store.StreamKey("0" * 8 + "-0000-4000-8000-000000000003", "support", "late")
    spec = ev.SpecObserved(observed_at=s.at(200), generation=1, model_ref=s.model_ref())
    with store.open_log(two) as log:
        log.append(late, [spec], 0, 1, s.at(200))
        log.record_projection(late.uid, 1, status.render_status(evolve(OrderState(), spec)))
        head = log.stream(UID).version
        failed = ev.ProbeFailed(observed_at=s.at(201), error="unavailable")
        log.append(store.StreamKey(UID, "support", "support-llm"), [failed], head, 1, s.at(201))
    code, out, _ = _run(capsys, "verify", "--store", two, "-o", "json")
    assert code == 0 and json.loads(out) == {"checked": 3, "divergent": []}

    _tamper(two, late.uid, UID)
    code, out, _ = _run(capsys, "verify", "--store", two, "-o", "json")
    doc = json.loads(out)
    assert code == 1 and [d["uid"] for d in doc["divergent"]] == [UID, late.uid]
    assert doc["divergent"][0]["atVersion"] == head


# -- relative times ----------------------------------------------------------------------------


def test_relative_times_count_back_from_now() -> None:
    now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    parse = audit_cmd.parse_instant
    assert parse("-2h", now=lambda: now) == now - timedelta(hours=2)
    assert parse("-15m", now=lambda: now) == now - timedelta(minutes=15)
    assert parse("-1d", now=lambda: now) == now - timedelta(days=1)
    assert parse("-1h30m", now=lambda: now) == now - timedelta(hours=1, minutes=30)
    assert parse("2026-12-02T10:00:00Z") == datetime(2026, 12, 2, 10, tzinfo=UTC)
    for bad in ("-", "-2x", "2h", "-h", "yesterday", "2026-12-02T10:00:00"):
        with pytest.raises(Exception, match="time"):
            parse(bad)


@pytest.mark.parametrize(
    "argv",
    [
        ["--at", "-1000000000d"],  # beyond timedelta's days
        ["--at", "-99999999d"],  # before the year 1
        ["--at", "0001-01-01T00:00:00+05:00"],  # the year 0 in UTC
        ["--at", "9999-12-31T23:59:59-01:00"],  # the year 10000 in UTC
        ["--version", "99999999999999999999"],  # beyond the log's INTEGER
    ],
    ids=["days", "before-year-1", "year-0-utc", "year-10000-utc", "version"],
)
def test_a_point_out_of_range_is_a_usage_error(two, capsys, argv: list[str]) -> None:
    # Not a traceback (argparse turns only ValueError/TypeError into usage errors), and not
    # a database that "cannot be used" (exit 3) for a value the log could never hold.
    with pytest.raises(SystemExit) as usage:
        main(["status", "support/support-llm", "--store", two, *argv])
    err = capsys.readouterr().err
    assert usage.value.code == 2, err
    assert "out of range" in err or "must be at most" in err, err


def test_rfc3339_letters_may_be_lower_case() -> None:
    # RFC 3339, section 5.6: "T" and "Z" may alternatively be lower case.
    moment = datetime(2026, 12, 2, 10, tzinfo=UTC)
    assert audit_cmd.parse_instant("2026-12-02t10:00:00z") == moment
    assert audit_cmd.parse_instant("2026-12-02t12:00:00+02:00") == moment


def test_status_at_a_time_ago(two, capsys) -> None:
    # The life was recorded in 2025: an hour ago it was long Ready...
    code, out, _ = _run(capsys, "status", "support/support-llm", "--store", two, "--at", "-1h")
    assert code == 0 and yaml.safe_load(out)["status"]["phase"] == "Ready"
    # ...and 100 years ago it had no events at all.
    code, _, err = _run(capsys, "status", "support/support-llm", "--store", two, "--at", "-36500d")
    assert code == 1 and "no events yet" in err


# -- exit codes -------------------------------------------------------------------------------


def test_exit_codes_tell_usage_unreadable_and_missing_apart(tmp_path, two, capsys) -> None:
    with pytest.raises(SystemExit) as usage:
        main(["history"])  # no order named
    assert usage.value.code == 2
    with pytest.raises(SystemExit) as bad_format:
        main(["list", "--store", two, "-o", "xml"])
    assert bad_format.value.code == 2
    code, _, err = _run(capsys, "list", "--store", str(tmp_path / "nope.sqlite"))
    assert code == 3 and "no file" in err
    assert not (tmp_path / "nope.sqlite").exists(), "a read must not create the log"
    code, _, err = _run(capsys, "list", "--store", "mysql://someone@127.0.0.1/x")
    assert code == 3 and "unsupported database" in err
    code, _, _ = _run(capsys, "why", "support/nobody", "--store", two)
    assert code == 1


@pytest.mark.parametrize(
    "url",
    ["postgresql://a:b@h:5432x/ai", "postgresql://u@[::1/db"],
    ids=["port-not-a-number", "ipv6-unclosed"],
)
@pytest.mark.parametrize("command", ["list", "migrate"])
def test_a_malformed_url_cannot_be_opened(capsys, url: str, command: str) -> None:
    code, _, err = _run(capsys, command, "--store", url)
    assert code == 3 and "not a database URL" in err
    assert ":b@" not in err


@pytest.mark.parametrize("command", ["list", "migrate"])
def test_no_password_of_the_url_is_printed(capsys, command: str) -> None:
    code, out, err = _run(capsys, command, "--store", SECRET_URL)
    assert code == 3 and "cannot open the event log postgresql://reader:***@127.0.0.1:1" in err
    assert not [s for s in SECRETS if s in out + err]


@pytest.mark.parametrize(
    "password",
    ["s3cr?t99", "p@ss?w0rd", "ab#cd/ef", "with:colon", "x?y@z#w", "new\nline"],
)
def test_a_password_is_hidden_whatever_it_holds(password: str) -> None:
    """Typed unencoded, a password may hold what a URL uses as separators; SQLAlchemy
    takes it to its first `@`, a person means it to the last one before the host."""
    url = f"postgresql://reader:{password}@db.example:5432/ai?sslmode=disable"
    assert make_url(url).password in password  # what the store connects with
    assert options.redacted(url) == "postgresql://reader:***@db.example:5432/ai?sslmode=disable"


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1), st.text(alphabet=string.ascii_letters + string.digits + "._-"))
def test_everything_between_the_user_and_the_host_is_hidden(password: str, user: str) -> None:
    # Whatever SQLAlchemy makes of it: the part it reads as the password is in there.
    url = f"postgresql+psycopg://{user}:{password}@127.0.0.1/ai"
    assert options.redacted(url) == f"postgresql+psycopg://{user}:***@127.0.0.1/ai"


def test_help_shows_the_store_from_the_environment_without_its_passwords() -> None:
    done = _cli("list", "--help", store_env=SECRET_URL)
    assert done.returncode == 0, done.stderr
    shown = "".join(done.stdout.split())  # argparse wraps the help text, even mid-word
    assert "(defaultpostgresql://reader:***@127.0.0.1:1/ai?password=***&" in shown
    assert not [s for s in SECRETS if s in shown]


def test_an_empty_store_variable_counts_as_unset() -> None:
    done = _cli("--version", store_env="")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    done = _cli("list", "--help", store_env="")
    assert "(defaultai-inference.sqlite;" in "".join(done.stdout.split())


def test_migrate_refuses_a_missing_sqlite_file_unless_told_to_create_it(tmp_path, capsys) -> None:
    path = tmp_path / "typo.sqlite"
    code, _, err = _run(capsys, "migrate", "--store", str(path))
    assert code == 3 and f"no file {path} (--create starts a new log there)" in err
    assert not path.exists(), "a mistyped path must not become a new, empty log"
    code, out, _ = _run(capsys, "migrate", "--store", str(path), "--create")
    assert code == 0 and "at revision" in out
    code, out, _ = _run(capsys, "verify", "--store", str(path))
    assert code == 0 and "0 streams verified" in out


def test_verify_reports_an_unreadable_stream_and_verifies_the_others(two, capsys) -> None:
    # The first stream in the replay's order holds an event no release can decode; the
    # second's recorded status was tampered with. Both are reported.
    with store.open_log(two) as log, log.engine.begin() as conn:
        conn.execute(
            sa.update(schema.events)
            .where(schema.events.c.stream_uid == UID, schema.events.c.version == 2)
            .values(payload=b"\xc1")
        )
    _tamper(two, OTHER_UID)
    code, out, _ = _run(capsys, "verify", "--store", two)
    assert code == 3
    assert f"DIVERGES support/support-llm (uid {UID}): unreadable: stream {UID} v2" in out
    assert f"DIVERGES analytics/embedder (uid {OTHER_UID}) at version" in out
    assert out.endswith("2 streams verified, 2 divergent (1 of them unreadable)\n")
    code, out, _ = _run(capsys, "verify", "--store", two, "-o", "json")
    doc = json.loads(out)
    assert code == 3 and [d["uid"] for d in doc["divergent"]] == [UID, OTHER_UID]
    assert doc["divergent"][1]["differences"]["phase"]["replayed"] == "Pending"


def test_a_log_without_schema_is_refused_not_migrated(tmp_path, capsys) -> None:
    path = tmp_path / "empty.sqlite"
    sa.create_engine(f"sqlite:///{path}").connect().close()  # an empty database file
    code, _, err = _run(capsys, "verify", "--store", str(path))
    assert code == 3 and "no schema" in err
    engine = sa.create_engine(f"sqlite:///{path}")
    try:
        assert sa.inspect(engine).get_table_names() == []
    finally:
        engine.dispose()
    code, out, _ = _run(capsys, "migrate", "--store", str(path))
    assert code == 0 and "at revision" in out
    code, out, _ = _run(capsys, "verify", "--store", str(path))
    assert code == 0 and "0 streams verified" in out


# -- progress ------------------------------------------------------------------------------


def test_verify_shows_progress_on_stderr_when_asked(two, capsys) -> None:
    code, out, err = _run(capsys, "verify", "--store", two, "--progress")
    assert code == 0 and "2 streams verified" in out
    assert "verify: 2/2 streams" in err
    code, _, err = _run(capsys, "verify", "--store", two)  # not a terminal: quiet
    assert code == 0 and err == ""


# -- a role that may only read ----------------------------------------------------------------


@pytest.mark.postgres
def test_a_select_only_role_reads_everything(postgres_url: str, capsys) -> None:
    with store.open_log(postgres_url) as log:
        _write_life(log)
        _write_waiting(log)
    schema_name = postgres_url.rsplit("search_path%3D", 1)[1]
    database = postgres_url.rsplit("/", maxsplit=1)[-1].split("?", maxsplit=1)[0]
    role = f"reader_{uuid.uuid4().hex[:8]}"
    with admin_connection(database) as admin:
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
        admin.execute(f'GRANT USAGE ON SCHEMA "{schema_name}" TO "{role}"')
        admin.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema_name}" TO "{role}"')
    try:
        url = postgres_url.replace("postgres@", f"{role}@", 1)
        for argv in (
            ["list"],
            ["history", "support/support-llm"],
            ["status", "support/support-llm", "--at", "-1h"],
            ["why", "analytics/embedder"],
            ["verify"],
        ):
            code, out, err = _run(capsys, *argv, "--store", url)
            assert code == 0, (argv, err)
            assert out
        # The same role cannot write: migrate (a writer) is refused, with exit code 3.
        with admin_connection(database) as admin:
            admin.execute(f'DELETE FROM "{schema_name}".alembic_version')
        code, _, err = _run(capsys, "migrate", "--store", url)
        assert code == 3 and "permission denied" in err
        code, _, err = _run(capsys, "list", "--store", url)
        assert code == 3 and "no schema" in err
    finally:
        with admin_connection(database) as admin:
            admin.execute(f'DROP OWNED BY "{role}"')
            admin.execute(f'DROP ROLE "{role}"')


def test_a_reader_gone_before_the_output_is_no_divergence_and_no_traceback(two) -> None:
    """`ai-inference verify | ...` in a `set -o pipefail` script, the reader gone first
    (a pager quit): a BrokenPipeError traceback and exit 1, which the README gives to a
    divergence. A pipe's writer exits as a shell's would, 141, and says nothing."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for command in ("list", "verify"):
        reader, writer = os.pipe()
        os.close(reader)  # gone before anything is written
        with os.fdopen(writer, "wb") as stdout:
            done = subprocess.run(
                [sys.executable, "-m", "adapters.cli.main", command, "--store", two],
                stdout=stdout,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                timeout=60,
                check=False,
            )
        assert done.returncode == 141, done.stderr
        assert "Traceback" not in done.stderr
