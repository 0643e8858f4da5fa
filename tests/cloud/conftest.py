"""The accounts' tests use the clusters' one-site world: observing an account lists the
cloudspaces of its clusters' sites."""

from __future__ import annotations

from tests.clusters.conftest import JWT, site

__all__ = ["JWT", "site"]
