"""Bringing a database's schema to this code's head, programmatically, on every open.

The schema exists only in the Alembic scripts of `migrations/`; nothing calls
`metadata.create_all`. The folder is found by path, relative to this package: in a source
checkout it is the repository's `migrations/`, in an installed wheel it is shipped as
`adapters/_bundled/migrations` beside this package (a path lookup, not an import of
`adapters`, which `store` must not know).

Two controllers may start at once: on PostgreSQL the whole upgrade runs in one
transaction under an advisory lock (its DDL is transactional), on SQLite under
`BEGIN IMMEDIATE`; the second starter waits and then finds the schema at head.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from store import schema
from store.connecting import WRITE, described
from store.errors import SchemaError, StoreUnavailable

if TYPE_CHECKING:
    from alembic.config import Config

# Alembic is imported by the functions that migrate, not here: a reader (the audit CLI)
# checks the revision with one SELECT against `schema.HEAD` and never loads Alembic,
# which costs a noticeable part of its start-up.

__all__ = [
    "alembic_config",
    "check_current",
    "current_revision",
    "head_revision",
    "migrations_folder",
    "upgrade",
]

_PACKAGE = Path(__file__).resolve().parent
# Relative to the folder holding this package: a source checkout, then an installed wheel.
_CANDIDATES = (Path("migrations"), Path("adapters", "_bundled", "migrations"))

# pg_advisory_xact_lock key shared by every process migrating this database ("aiinfmig").
_LOCK_KEY = 0x6169_696E_666D_6967
_PG_INSUFFICIENT_PRIVILEGE = "42501"  # PostgreSQL 15 gives no one CREATE on public


def migrations_folder() -> Path:
    """The Alembic script folder of this installation (source checkout or wheel)."""
    candidates = [_PACKAGE.parent / relative for relative in _CANDIDATES]
    for folder in candidates:
        if (folder / "env.py").is_file():
            return folder
    tried = ", ".join(str(c) for c in candidates)
    raise SchemaError(f"no migrations folder found (tried {tried})")


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic config for the shipped scripts; with `connection`, env.py migrates that."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_folder()))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise SchemaError("the migrations folder has no revisions")
    return head


def current_revision(connection: Connection) -> str | None:
    """The revision the database records (None: never migrated). Reads only, by SQL."""
    if not sa.inspect(connection).has_table("alembic_version"):
        return None
    found = connection.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
    return None if found is None else str(found)


def check_current(engine: Engine) -> str:
    """The schema's revision, if it is this release's head; else SchemaError. Reads only."""
    try:
        with engine.connect() as conn:
            current = current_revision(conn)
    except sa.exc.OperationalError as exc:
        raise StoreUnavailable(f"cannot read the event log: {exc}") from exc
    except sa.exc.DatabaseError as exc:  # no SELECT on alembic_version; not a database
        raise SchemaError(f"cannot read the event log's schema revision: {exc}") from exc
    if current == schema.HEAD:
        return current
    if current is None:
        raise SchemaError("no event log here (no schema): nothing was recorded yet")
    if current in _known_revisions():
        raise SchemaError(
            f"the event log's schema is at revision {current}, this release reads "
            f"{schema.HEAD}: run `ai-inference migrate` (or start the controller) to upgrade it"
        )
    raise SchemaError(_unknown_revision(current))


def _known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    return {rev.revision for rev in ScriptDirectory.from_config(alembic_config()).walk_revisions()}


def _unknown_revision(current: str) -> str:
    return (
        f"the event log's schema is at revision {current}, unknown to this release "
        f"(head {schema.HEAD}): it was written by a newer release, or it is not an "
        f"ai-inference event log"
    )


def upgrade(engine: Engine) -> None:
    """Run `alembic upgrade head` on `engine`'s database, atomically and once at a time."""
    from alembic import command
    from alembic.util.exc import CommandError

    try:
        with engine.connect() as conn:
            conn.execution_options(**{WRITE: True})
            with conn.begin():
                if conn.dialect.name == "postgresql":
                    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
                command.upgrade(alembic_config(conn), "head")
    except CommandError as exc:
        # Typically a database migrated by a newer release than this one: said as the
        # readers say it, not as Alembic does ("Can't locate revision ...").
        with engine.connect() as conn:
            current = current_revision(conn)
        if current is not None and current not in _known_revisions():
            raise SchemaError(
                f"cannot migrate the event log: {_unknown_revision(current)}"
            ) from exc
        raise SchemaError(f"cannot migrate the event log: {exc}") from exc
    except sa.exc.OperationalError as exc:
        raise StoreUnavailable(f"cannot migrate the event log: {described(exc)}") from exc
    except sa.exc.DatabaseError as exc:
        # Not a passing outage: a file that is no database, a table of another
        # application where ours would go, a role that may not create tables. Retrying
        # cannot help. What the database said, not the CREATE TABLE it refused.
        if getattr(getattr(exc, "orig", None), "sqlstate", None) == _PG_INSUFFICIENT_PRIVILEGE:
            raise SchemaError(
                f"cannot migrate the event log: {described(exc)}: its role needs the right "
                "to create tables in the log's schema"
            ) from exc
        raise SchemaError(f"cannot migrate the event log (is it one?): {described(exc)}") from exc
