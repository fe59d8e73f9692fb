"""The PostgreSQL fixtures (a real cluster per worker, a fresh database per test) for the store's tests."""

from __future__ import annotations

from tests.postgres import postgres_cluster, postgres_dsn

__all__ = ["postgres_cluster", "postgres_dsn"]
