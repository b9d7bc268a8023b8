"""Test kits shipped with perdure. Importable anywhere: no pytest dependency."""

from core.testing.clock import VirtualClock
from core.testing.env_conformance import EnvCase, EnvFactory, env_cases
from core.testing.storage_conformance import StorageCase, storage_cases
from core.testing.two_phase_conformance import TwoPhaseCase, two_phase_cases
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
    "TwoPhaseCase",
    "VirtualClock",
    "env_cases",
    "storage_cases",
    "two_phase_cases",
]
