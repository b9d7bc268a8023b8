"""The built-in conversation documents.

* ``agent``  — the conversation's agent, by name only: ``model``, ``thinking``, ``tools``
  (a list of names, or unset for every tool), ``extensions`` (names, or unset for all),
  ``instructions``, ``cwd``. Rewindable, so a fork sees it as it was at the fork point.
* ``live``   — what is happening now: the current ``run`` (its input submissions and
  generation task), the generation's progress (partial message, retry and poll times)
  and one slot per tool call (status and streamed output); ``compaction`` notes the
  compaction in flight (``task``, ``reason``, ``state``: ``summarizing`` or ``queued``
  with the summary's ``submission``) until its summary lands or ends stale, and
  ``stale_compaction`` explains the latest one that ended stale. Committed with adaptive
  throttling while a response streams; a fresh fork starts with an empty one.
* ``inbox``  — submissions that arrived while the conversation was busy, in order.
* ``usage``  — the token and cost ledger: totals, per model and per tool, and
  ``compactions``: how many summaries ``landed``, how many ended ``stale`` and what
  the stale ones spent (``stale_usage``).
"""

from __future__ import annotations

from typing import Any

from core.session.documents import DocDefinition, define_doc

__all__ = ["AGENT", "BUILTIN_DOCUMENTS", "INBOX", "LIVE", "USAGE"]

AGENT: DocDefinition[Any] = define_doc(
    "agent", scope="conversation", history="rewindable", fork="as_of", initial=lambda: {}
)
LIVE: DocDefinition[Any] = define_doc(
    "live", scope="conversation", fork="initial", initial=lambda: {}
)
INBOX: DocDefinition[Any] = define_doc(
    "inbox", scope="conversation", fork="initial", initial=lambda: {"items": []}
)
USAGE: DocDefinition[Any] = define_doc(
    "usage",
    scope="conversation",
    fork="initial",
    initial=lambda: {"total": {}, "models": {}, "tools": {}},
    # The ledger is small and every change touches it: store it whole each time.
    checkpoint_when=lambda value, ops, deltas: True,
)

BUILTIN_DOCUMENTS: dict[str, DocDefinition[Any]] = {d.kind: d for d in (AGENT, LIVE, INBOX, USAGE)}
