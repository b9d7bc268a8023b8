"""The session kernel: one mutation line, transactions, documents, commit listeners."""

from core.session.documents import DocDefinition, DocHandle, ForkPolicy, define_doc
from core.session.session import (
    CommitEvent,
    DocumentEvent,
    Session,
    ensure_outside_commit,
    in_commit,
)
from core.session.transaction import Tx

__all__ = [
    "CommitEvent",
    "DocDefinition",
    "DocHandle",
    "DocumentEvent",
    "ForkPolicy",
    "Session",
    "Tx",
    "define_doc",
    "ensure_outside_commit",
    "in_commit",
]
