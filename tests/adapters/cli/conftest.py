"""The audit CLI runs against both backends: reuse the store suite's database fixtures."""

from tests.store.conftest import (  # noqa: F401 - fixtures, used by name
    log_url,
    postgres_database,
    postgres_url,
    sqlite_url,
)
