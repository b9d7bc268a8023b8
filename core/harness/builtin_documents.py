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
  throttling while a response streams; a fresh fork starts with an empty one. It also
  keeps the conversation's token and cost ledger (``usage``: totals, per model and per
  tool, and ``compactions``: how many summaries ``landed``, how many ended ``stale`` and
  what the stale ones spent, ``stale_usage``), which views present as a ``usage``
  document of its own (see :mod:`core.harness.usage_ledger`).
* ``inbox``  — submissions that arrived while the conversation was busy, in order.
"""

from __future__ import annotations

from typing import Any

from core.session.documents import DocDefinition, define_doc

__all__ = ["AGENT", "BUILTIN_DOCUMENTS", "INBOX", "LIVE"]

AGENT: DocDefinition[Any] = define_doc(
    "agent", scope="conversation", history="rewindable", fork="as_of", initial=lambda: {}
)
LIVE: DocDefinition[Any] = define_doc(
    "live", scope="conversation", fork="initial", initial=lambda: {}
)
INBOX: DocDefinition[Any] = define_doc(
    "inbox", scope="conversation", fork="initial", initial=lambda: {"items": []}
)
BUILTIN_DOCUMENTS: dict[str, DocDefinition[Any]] = {d.kind: d for d in (AGENT, LIVE, INBOX)}
