"""The schema comes from the migrations only, they are idempotent, and they match the models."""

from __future__ import annotations

import re
import shutil
import threading
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

import store
from store import connecting, migrating, schema
from tests.store.conftest import PG_HOST, PG_PORT, admin_connection
from tests.store.store_samples import at, things

REPO = Path(__file__).resolve().parents[2]
CREATE_ALL = re.compile(r"\.create_all\(")
TABLES = {
    "alembic_version",
    "event_types",
    "events",
    "leader_fence",
    "projections",
    "snapshots",
    "streams",
}


def test_the_migrations_are_found_in_the_source_tree() -> None:
    folder = migrating.migrations_folder()
    assert folder == REPO / "migrations"
    assert (folder / "env.py").is_file()
    assert (folder / "script.py.mako").is_file()
    assert migrating.head_revision() == "0002" == schema.HEAD  # readers compare with HEAD


def test_an_installed_wheel_finds_its_bundled_migrations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundled = tmp_path / "adapters" / "_bundled" / "migrations"
    shutil.copytree(REPO / "migrations", bundled)
    monkeypatch.setattr(migrating, "_PACKAGE", tmp_path / "store")
    assert migrating.migrations_folder() == bundled

    shutil.rmtree(tmp_path / "adapters")
    with pytest.raises(store.SchemaError, match="no migrations folder"):
        migrating.migrations_folder()


def test_opening_twice_migrates_once_and_keeps_the_data(log_url: str) -> None:
    key = store.StreamKey("uid-1", "support", "support-llm")
    with store.open_log(log_url) as first:
        first.append(key, things(1, 2), 0, 1, at(0))
    with store.open_log(log_url) as second:
        assert [r.version for r in second.read(key.uid)] == [1, 2]
        with second.engine.connect() as conn:
            assert migrating.current_revision(conn) == migrating.head_revision()
            assert set(sa.inspect(conn).get_table_names()) == TABLES
            fence_rows = conn.execute(sa.select(schema.leader_fence)).all()
    assert [tuple(r) for r in fence_rows] == [(schema.FENCE_ROW, 1)]


def test_the_models_match_the_migrations(log: store.EventLog) -> None:
    with log.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        differences = compare_metadata(context, schema.metadata)
    assert differences == []


def test_downgrade_to_base_and_back_to_head(log: store.EventLog) -> None:
    with log.engine.connect() as conn:
        conn.execution_options(**{connecting.WRITE: True})
        with conn.begin():
            command.downgrade(migrating.alembic_config(conn), "base")
        assert set(sa.inspect(conn).get_table_names()) == {"alembic_version"}
    migrating.upgrade(log.engine)
    with log.engine.connect() as conn:
        assert set(sa.inspect(conn).get_table_names()) == TABLES


def test_a_schema_newer_than_the_code_is_refused(log: store.EventLog, log_url: str) -> None:
    with log.engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
    with pytest.raises(store.SchemaError, match="9999"):
        store.open_log(log_url)
    # `migrate` says why as the readers do, not as Alembic does ("Can't locate ...").
    with pytest.raises(store.SchemaError) as refused:
        migrating.upgrade(log.engine)
    assert "revision 9999, unknown to this release" in str(refused.value)
    assert "written by a newer release" in str(refused.value)


def test_controllers_starting_together_both_find_the_schema_at_head(log_url: str) -> None:
    barrier = threading.Barrier(3)
    failures: list[BaseException] = []

    def start() -> None:
        barrier.wait()
        try:
            store.open_log(log_url).close()
        except BaseException as exc:  # reported below, in the test's thread
            failures.append(exc)

    starters = [threading.Thread(target=start) for _ in range(3)]
    for thread in starters:
        thread.start()
    for thread in starters:
        thread.join(timeout=60)
    assert failures == []
    with store.open_log(log_url) as opened, opened.engine.connect() as conn:
        assert migrating.current_revision(conn) == migrating.head_revision()


def test_the_store_never_creates_tables_itself() -> None:
    sources = (REPO / "store").glob("*.py")
    offenders = [p.name for p in sources if CREATE_ALL.search(p.read_text(encoding="utf-8"))]
    assert offenders == []


@pytest.mark.postgres
def test_a_role_that_may_not_create_tables_is_told_so(postgres_database: str) -> None:
    """PostgreSQL 15 gives no role CREATE on `public`: the controller's first start with
    a role made for it failed with "is it one?" and the whole CREATE TABLE it tried."""
    role = f"r_{uuid.uuid4().hex[:10]}"
    namespace = f"s_{uuid.uuid4().hex[:10]}"
    with admin_connection(postgres_database) as admin:
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
        admin.execute(f'CREATE SCHEMA "{namespace}"')
        admin.execute(f'GRANT USAGE ON SCHEMA "{namespace}" TO "{role}"')
    try:
        url = (
            f"postgresql+psycopg://{role}@{PG_HOST}:{PG_PORT}/{postgres_database}"
            f"?options=-csearch_path%3D{namespace}"
        )
        with pytest.raises(store.SchemaError) as refused:
            store.open_log(url)
        said = str(refused.value)
        assert "permission denied" in said and "SQLSTATE 42501" in said
        assert "right to create tables" in said
        assert "CREATE TABLE" not in said and "is it one" not in said
    finally:
        with admin_connection(postgres_database) as admin:
            admin.execute(f'DROP SCHEMA "{namespace}" CASCADE')
            admin.execute(f'DROP OWNED BY "{role}"')
            admin.execute(f'DROP ROLE "{role}"')
