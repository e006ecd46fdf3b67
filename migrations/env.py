"""Alembic's entry point for the event log's schema.

`store.migrating.upgrade` runs it on every open with a connection already inside a
transaction (passed in `config.attributes["connection"]`), so migrating is atomic and
serialised there. Run without one (to write a new revision), it connects to the URL in
the `AI_INFERENCE_DB` environment variable:

    AI_INFERENCE_DB=sqlite:///dev.sqlite python -c 'from alembic import command;
    from store import migrating; c = migrating.alembic_config();
    command.upgrade(c, "head"); command.revision(c, "why", autogenerate=True)'

`store.schema.metadata` is the target, so autogenerate compares against the recorder's
tables (and the test suite asserts the two agree).
"""

from __future__ import annotations

import os

from alembic import context
from sqlalchemy.engine import Connection

from store import connecting, schema

config = context.config


def _migrate(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=schema.metadata,
        # SQLite alters tables by copying them; harmless on PostgreSQL.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _run() -> None:
    given = config.attributes.get("connection")
    if given is not None:
        _migrate(given)
        return
    url = os.environ.get("AI_INFERENCE_DB")
    if not url:
        raise SystemExit("set AI_INFERENCE_DB to the event log's database URL")
    engine = connecting.create_engine(url)
    try:
        with engine.connect() as connection:
            connection.execution_options(**{connecting.WRITE: True})
            with connection.begin():
                _migrate(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (SQL script) mode is not supported: migrate a database")
_run()
