"""Test kits shipped with perdure. Importable anywhere: no pytest dependency."""

from core.testing.clock import VirtualClock
from core.testing.env_conformance import EnvCase, EnvFactory, env_cases
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
    "EnvCase",
    "EnvFactory",
    "FaultyStorage",
    "ReopeningStorage",
    "StorageCase",
    "StorageCrashed",
    "VirtualClock",
    "env_cases",
    "storage_cases",
]
