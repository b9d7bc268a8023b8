"""Test kits shipped with perdure. Importable anywhere: no pytest dependency."""

from core.testing.clock import VirtualClock
from core.testing.storage_conformance import StorageCase, storage_cases
from core.testing.wrappers import (
    CommitFault,
    DelegatingStorage,
    FaultyStorage,
    ReopeningStorage,
    StorageCrashed,
)

__all__ = [
    "CommitFault",
    "DelegatingStorage",
    "FaultyStorage",
    "ReopeningStorage",
    "StorageCase",
    "StorageCrashed",
    "VirtualClock",
    "storage_cases",
]
