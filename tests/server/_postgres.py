"""The tests' throwaway PostgreSQL: ``kubesvc._postgres`` (the demo starts one too)."""

from kubesvc._postgres import (
    PASSWORD,
    PASSWORD_USER,
    SUPERUSER,
    TEST_SETTINGS,
    NoPostgres,
    TempPostgres,
    find_binaries,
    temp_postgres,
)

__all__ = [
    "PASSWORD",
    "PASSWORD_USER",
    "SUPERUSER",
    "TEST_SETTINGS",
    "NoPostgres",
    "TempPostgres",
    "find_binaries",
    "temp_postgres",
]
