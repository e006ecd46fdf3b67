"""The store suite's PostgreSQL fixtures, for the leadership tests' shared log."""

from tests.store.conftest import (  # noqa: F401 - fixtures, used by name
    postgres_database,
    postgres_url,
)
