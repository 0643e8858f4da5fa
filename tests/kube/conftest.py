"""A cluster with one site and a pool of two machines, in the database only: the same
fixtures as the clusters' tests (tests/clusters/conftest.py)."""

from tests.clusters.conftest import pool, site

__all__ = ["pool", "site"]
