"""A consistency checker for crash, fault and schedule tests (runner independent).

Reads a storage through the public :class:`~core.storage.port.Storage` port (and, for
SQLite, through its :class:`~core.storage.sqlite.database.SqlDatabase` facade) and lists
every broken promise it finds. Nothing here imports a test framework::

    problems = await check_consistency(storage, settled=True, db=sqlite_db)
    assert not problems, problems

Two levels:

* **always** — must hold after every commit, whatever is running: at most one result
  entry per tool call and none without a call; at most one user entry per input
  submission; a submission's record agrees with the entries it names and with the
  ``live`` and ``inbox`` documents; the owner of a terminal task has no live ordinary
  work below it (invariant 11); SQLite's ``integrity_check`` and our own cross-table
  checks (id ownership, counters, chunk parts, revisions).
* **settled** (``settled=True``: the harness was idle and nothing is left to run) — also:
  every submission is ``done`` (with its answer) or ``unanswered`` (with a reason); every
  task is terminal except background timers still waiting for their time; every tool
  call of an executed tool round has exactly one result entry; no conversation has a run,
  generation progress, tool slots or a compaction note in ``live``, nor queued items in
  its ``inbox``.

:class:`SettlementLog` watches commits (``session.subscribe``) across restarts and
reports a submission settled twice or rewritten after it settled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from core.harness.builtin_documents import INBOX, LIVE
from core.harness.messages import AssistantMessage, message_from_json
from core.harness.runs import GENERATION, TOOL
from core.jsonvalue import JsonValue
from core.records import Completed, ConversationRecord, Entry, SubmissionRecord, Task, Waiting
from core.session.session import CommitEvent, Session
from core.storage.paging import scan_all
from core.storage.port import ConversationQuery, EntryQuery, Storage, SubmissionQuery, TaskQuery
from core.storage.sqlite.database import SqlDatabase

__all__ = ["SettlementLog", "StoredWorld", "check_consistency", "check_sqlite", "load_world"]


_SETTLED = ("done", "unanswered")
_TABLES = {
    "conversations": "conversation",
    "entries": "entry",
    "tasks": "task",
    "submissions": "submission",
    "documents": "document",
}


@dataclass
class StoredWorld:
    """Everything committed in one storage, read back through the port."""

    conversations: dict[int, ConversationRecord] = field(default_factory=dict)
    entries: dict[int, Entry] = field(default_factory=dict)  # own entries only (no ancestry)
    tasks: dict[int, Task] = field(default_factory=dict)
    submissions: dict[int, SubmissionRecord] = field(default_factory=dict)
    live: dict[int, JsonValue] = field(default_factory=dict)
    inbox: dict[int, JsonValue] = field(default_factory=dict)

    def own_entries(self, conversation_id: int) -> list[Entry]:
        return [e for e in self.entries.values() if e.conversation_id == conversation_id]


async def load_world(storage: Storage) -> StoredWorld:
    world = StoredWorld()
    async for conv in scan_all(storage.scan_conversations, ConversationQuery(limit=500)):
        world.conversations[conv.id] = conv
    for conv_id in world.conversations:
        async for entry in scan_all(
            storage.scan_entries, EntryQuery(conv_id, order="asc", limit=500)
        ):
            if entry.conversation_id == conv_id:
                world.entries[entry.id] = entry
        for kind, target in ((LIVE.kind, world.live), (INBOX.kind, world.inbox)):
            record = await storage.find_document(kind, "conversation", conv_id)
            state = await storage.document(record.id) if record is not None else None
            target[conv_id] = state.value if state is not None else None
    async for task in scan_all(storage.scan_tasks, TaskQuery(limit=500)):
        world.tasks[task.id] = task
    async for sub in scan_all(storage.scan_submissions, SubmissionQuery(limit=500)):
        world.submissions[sub.id] = sub
    return world


def _assistant(entry: Entry) -> AssistantMessage | None:
    if entry.kind != "assistant" or entry.message is None:
        return None
    message = message_from_json(entry.message)
    return message if isinstance(message, AssistantMessage) else None


def _executed_round(entry: Entry) -> bool:
    message = _assistant(entry)
    return message is not None and message.stop_reason not in ("aborted", "error")


def _get(value: JsonValue, key: str) -> JsonValue:
    return value.get(key) if isinstance(value, dict) else None


def _check_tool_results(world: StoredWorld, settled: bool, problems: list[str]) -> None:
    """Pair every tool_result entry with the call it answers: by the generation that wrote
    the assistant entry (unavailable tools) or by the tool task naming that entry."""
    results: dict[tuple[int, str], list[int]] = {}
    for entry in world.entries.values():
        if entry.kind != "tool_result":
            continue
        call_id = _get(entry.data, "call_id")
        writer = world.tasks.get(entry.by_task_id) if entry.by_task_id is not None else None
        assistant: JsonValue = None
        if writer is not None and writer.kind == TOOL:
            assistant = _get(writer.input, "assistant")
        elif writer is None and isinstance(call_id, str):
            # A tool task kept in memory (never written): its result names the call of
            # the newest assistant entry before it that made that call.
            callers = [
                e.id
                for e in world.own_entries(entry.conversation_id)
                if e.id < entry.id and _makes_call(e, call_id)
            ]
            assistant = max(callers) if callers else None
        elif writer is not None and writer.kind == GENERATION:
            # An unavailable tool's result, written with the tool round's assistant entry
            # (the newest executed one of that generation; a kept partial is not).
            rounds = [
                e.id
                for e in world.own_entries(entry.conversation_id)
                if e.by_task_id == writer.id and e.id < entry.id and _executed_round(e)
            ]
            assistant = max(rounds) if rounds else None
        if not isinstance(call_id, str) or not isinstance(assistant, int):
            problems.append(f"tool_result entry {entry.id} names no call")
            continue
        results.setdefault((assistant, call_id), []).append(entry.id)
    calls: set[tuple[int, str]] = set()
    for entry in world.entries.values():
        message = _assistant(entry)
        if message is None or message.stop_reason in ("aborted", "error"):
            continue  # never executed: context leaves such calls out
        for call in message.tool_calls:
            key = (entry.id, call.id)
            calls.add(key)
            found = results.get(key, [])
            if len(found) > 1:
                problems.append(f"call {call.id} of entry {entry.id} has results {found}")
            elif settled and not found and _executed(world, entry, call.id):
                problems.append(f"call {call.id} of entry {entry.id} has no result entry")
    for key, found in results.items():
        if key not in calls:
            problems.append(f"result entries {found} answer no call ({key[1]} of entry {key[0]})")


def _makes_call(entry: Entry, call_id: str) -> bool:
    message = _assistant(entry)
    return message is not None and any(c.id == call_id for c in message.tool_calls)


def _executed(world: StoredWorld, entry: Entry, call_id: str) -> bool:
    """Whether a tool task was created for the call (a sequential round cut short by an
    abort leaves later calls without a task, and the context synthesizes their result):
    a stored one, or one kept in memory — a run that completed started every call of
    its rounds, so a generation that completed vouches for its calls."""
    if any(
        t.kind == TOOL
        and _get(t.input, "assistant") == entry.id
        and _get(t.input, "call_id") == call_id
        for t in world.tasks.values()
    ):
        return True
    writer = world.tasks.get(entry.by_task_id) if entry.by_task_id is not None else None
    return writer is not None and isinstance(writer.outcome, Completed)


def _check_submissions(world: StoredWorld, settled: bool, problems: list[str]) -> None:
    placed_by: dict[int, list[int]] = {}
    for entry in world.entries.values():
        sub_id = _get(entry.data, "submission") if entry.kind == "user" else None
        if isinstance(sub_id, int):
            placed_by.setdefault(sub_id, []).append(entry.id)
    queued_in: dict[int, int] = {}
    for conv_id, inbox in world.inbox.items():
        items = _get(inbox, "items")
        for item in items if isinstance(items, list) else []:
            item_id = _get(item, "id")
            if isinstance(item_id, int):
                if item_id in queued_in:
                    problems.append(f"submission {item_id} is queued twice")
                queued_in[item_id] = conv_id
    running: dict[int, int] = {}
    for conv_id, live in world.live.items():
        inputs = _get(_get(live, "run"), "inputs")
        for item in inputs if isinstance(inputs, list) else []:
            item_id = _get(item, "id")
            if isinstance(item_id, int):
                if item_id in running:
                    problems.append(f"submission {item_id} is in two runs")
                running[item_id] = conv_id
    for sub in world.submissions.values():
        where = f"submission {sub.id} ({sub.type}, {sub.status})"
        users = placed_by.get(sub.id, [])
        if len(users) > 1:
            problems.append(f"{where} was placed {len(users)} times: entries {users}")
        if sub.status == "queued" and sub.id not in queued_in:
            problems.append(f"{where} is in no inbox")
        if sub.status != "queued" and sub.id in queued_in:
            problems.append(f"{where} is still in an inbox")
        if sub.status == "placed" and running.get(sub.id) != sub.conversation_id:
            problems.append(f"{where} belongs to no run")
        if sub.status in _SETTLED and sub.id in running:
            problems.append(f"{where} is settled but still in a run")
        if sub.type == "input" and sub.status in ("placed", "done") and not users:
            problems.append(f"{where} has no user entry")
        if sub.type == "input" and sub.status in ("queued",) and users:
            problems.append(f"{where} is queued but has user entries {users}")
        if sub.status == "done":
            target = sub.answer if sub.type == "input" else sub.entry
            answer = world.entries.get(target) if target is not None else None
            if answer is None:
                problems.append(f"{where} names no stored answer entry ({target})")
            elif sub.type == "input" and answer.kind != "assistant":
                problems.append(f"{where} is answered by a {answer.kind} entry")
            elif answer.conversation_id != sub.conversation_id:
                problems.append(f"{where} is answered in another conversation")
        if sub.status == "unanswered" and not sub.reason:
            problems.append(f"{where} has no reason")
        if settled and sub.status not in _SETTLED:
            problems.append(f"{where} is not settled")


def _timer(task: Task) -> bool:
    state = task.state
    return task.background and isinstance(state, Waiting) and not state.on and bool(state.until)


def _check_tasks(world: StoredWorld, settled: bool, problems: list[str]) -> None:
    for task in world.tasks.values():
        owner = world.tasks.get(task.owner) if task.owner is not None else None
        if task.owner is not None and owner is None:
            problems.append(f"task {task.id} has a missing owner {task.owner}")
        if owner is not None and not owner.live and task.live and not task.background:
            problems.append(
                f"task {task.id} ({task.status}) outlives its terminal owner {owner.id}"
            )
        if settled and task.live and not _timer(task):
            problems.append(f"task {task.id} ({task.kind}) is {task.status} when settled")


def _check_live(world: StoredWorld, settled: bool, problems: list[str]) -> None:
    for conv_id, live in world.live.items():
        run = _get(live, "run")
        generation = _get(run, "generation")
        if isinstance(generation, int):
            task = world.tasks.get(generation)
            if task is None or not task.live:
                problems.append(
                    f"conversation {conv_id} runs on a finished generation {generation}"
                )
        note = _get(_get(live, "compaction"), "task")
        if isinstance(note, int) and settled:
            task = world.tasks.get(note)
            if task is None or not task.live:
                problems.append(f"conversation {conv_id} notes a finished compaction {note}")
        if settled:
            leftovers = sorted(
                k for k in ("run", "generation", "tools") if _get(live, k) is not None
            )
            if leftovers:
                problems.append(f"conversation {conv_id} live keeps {leftovers} when settled")
            if _get(world.inbox.get(conv_id), "items"):
                problems.append(f"conversation {conv_id} has queued inbox items when settled")


async def check_sqlite(db: SqlDatabase) -> list[str]:
    """``PRAGMA integrity_check`` plus cross-table checks of our own schema."""
    problems: list[str] = []
    rows = await db.fetch("PRAGMA integrity_check")
    if [tuple(r) for r in rows] != [("ok",)]:
        problems.append(f"integrity_check: {[r[0] for r in rows][:5]}")
    meta = await db.fetch("SELECT next_id, next_seq FROM meta")
    next_id, next_seq = (int(meta[0][0]), int(meta[0][1])) if meta else (0, 0)
    for table, kind in _TABLES.items():
        wrong = await db.fetch(
            f"SELECT t.id FROM {table} t LEFT JOIN record_ids r ON r.id = t.id"
            " WHERE r.type IS NOT ? LIMIT 5",
            (kind,),
        )
        if wrong:
            problems.append(f"{table} ids {[r[0] for r in wrong]} are not owned as {kind}")
        top = await db.fetch(f"SELECT max(id) FROM {table}")
        if top and top[0][0] is not None and int(top[0][0]) >= next_id:
            problems.append(f"{table} id {top[0][0]} is not below meta.next_id {next_id}")
    for table in ("conversations", "entries", "tasks", "submissions", "revisions"):
        key = "document_id || ':' || seq" if table == "revisions" else "CAST(id AS TEXT)"
        bad = await db.fetch(
            f"SELECT {key}, parts FROM {table} t WHERE parts != (SELECT count(*) FROM"
            f" record_parts p WHERE p.tbl = ? AND p.key = {key}) OR (parts = 0) != ("
            f"{'content' if table == 'revisions' else 'record'} IS NOT NULL) LIMIT 5",
            (table,),
        )
        if bad:
            problems.append(f"{table} rows {[r[0] for r in bad]} disagree with their parts")
    orphans = await db.fetch(
        "SELECT DISTINCT document_id FROM revisions WHERE document_id NOT IN"
        " (SELECT id FROM documents) LIMIT 5"
    )
    if orphans:
        problems.append(f"revisions of unknown documents {[r[0] for r in orphans]}")
    late = await db.fetch("SELECT max(seq) FROM revisions")
    if late and late[0][0] is not None and int(late[0][0]) >= next_seq:
        problems.append(f"revision seq {late[0][0]} is not below meta.next_seq {next_seq}")
    baseless = await db.fetch(
        "SELECT id FROM documents d WHERE retired_at IS NULL AND NOT EXISTS"
        " (SELECT 1 FROM revisions r WHERE r.document_id = d.id AND r.base = 1) LIMIT 5"
    )
    if baseless:
        problems.append(f"current documents without a base revision {[r[0] for r in baseless]}")
    return problems


async def check_consistency(
    storage: Storage, *, settled: bool = False, db: SqlDatabase | None = None
) -> list[str]:
    """Every problem found in ``storage`` (empty when consistent); see the module doc."""
    world = await load_world(storage)
    problems: list[str] = []
    _check_tool_results(world, settled, problems)
    _check_submissions(world, settled, problems)
    _check_tasks(world, settled, problems)
    _check_live(world, settled, problems)
    if db is not None:
        problems += await check_sqlite(db)
    return problems


class SettlementLog:
    """Sees every committed submission write (attach it to each session a test opens, e.g.
    ``session.subscribe(log.on_commit)``) and records violations of "settled exactly
    once": a settled submission written again, or a second placement."""

    def __init__(self) -> None:
        self.settled: dict[int, SubmissionRecord] = {}
        self.problems: list[str] = []
        self.submissions: dict[int, SubmissionRecord] = {}

    def on_commit(self, event: CommitEvent) -> None:
        for sub in event.submissions:
            before = self.settled.get(sub.id)
            if before is not None:
                self.problems.append(
                    f"submission {sub.id} rewritten after it settled {before.status}"
                    f" (seq {event.seq}: {sub.status})"
                )
            if sub.status in _SETTLED:
                self.settled[sub.id] = sub
            self.submissions[sub.id] = sub

    def attach(self, session: Session) -> Callable[[], None]:
        """Watch ``session``'s commits; returns the unsubscribe function."""
        return session.subscribe(self.on_commit)
