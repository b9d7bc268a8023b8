"""The session kernel: one mutation line, transactions, documents, commit listeners,
waiter registries, and the port the task layer plugs into (``TaskLayer``)."""

from core.session.documents import DocDefinition, DocHandle, ForkPolicy, define_doc
from core.session.session import (
    CommitEvent,
    DocumentEvent,
    Session,
    ensure_outside_commit,
    in_commit,
)
from core.session.transaction import TaskLayer, TaskSpec, Tx
from core.session.waiters import WaiterRegistry

__all__ = [
    "CommitEvent",
    "DocDefinition",
    "DocHandle",
    "DocumentEvent",
    "ForkPolicy",
    "Session",
    "TaskLayer",
    "TaskSpec",
    "Tx",
    "WaiterRegistry",
    "define_doc",
    "ensure_outside_commit",
    "in_commit",
]
