"""Storage conformance kit: the cases every Storage adapter must pass.

Runner-independent on purpose (no pytest import): each case is a plain async function
taking a freshly opened, empty storage and using plain ``assert``. A runner
parametrizes :func:`storage_cases` over its adapters; see ``tests/core/storage`` for the
pytest bridge. Storages that commit in two phases also run
:mod:`core.testing.two_phase_conformance`.

The cases live in sibling modules by subject (:mod:`.commits`, :mod:`.scans`,
:mod:`.documents`, :mod:`.invariants`); each keeps its ``CASES`` in definition order and
:func:`storage_cases` joins them in that module order.
"""

from __future__ import annotations

from core.testing.storage_conformance import commits, documents, invariants, scans
from core.testing.storage_conformance.kit import StorageCase

__all__ = ["StorageCase", "storage_cases"]


def storage_cases() -> list[StorageCase]:
    """Every conformance case, in a stable order."""
    return [*commits.CASES, *scans.CASES, *documents.CASES, *invariants.CASES]
