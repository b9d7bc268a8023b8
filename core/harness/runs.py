"""Runs, the inbox and boundaries: the bookkeeping of who asked what and who answered.

A *run* answers one or more placed inputs: it is recorded in the ``live`` document as
``{"inputs": [submission ids], "generation": task id}`` and ends when a generation
answers (every input ``done`` with that answer) or fails (every input ``unanswered``).
The usage of its model responses before the answer is kept there too (``usage``, by
model) and added to the conversation's usage ledger when the run ends
(:func:`add_run_usage`): the round commit writes ``live`` anyway, and the ledger is in
``live`` too (:mod:`core.harness.usage_ledger`), so the run's end folds it in within the
one ``live`` write.

While a run is going, new submissions queue in the ``inbox`` document. They are placed
at *boundaries*, writes first, then user items, each in id order:

* **post-tools** (after a tool round): writes — compaction summaries included, so a
  long run continues compacted — and ``steer`` items; steers join the current run's
  inputs. A ``reset`` is the one write that waits for the answer: it ends the context
  the running run is working in;
* **final** (after the answer): writes, steers and ``follow_up`` items; the user items
  start the next run.

A generation about to send a request that would not fit also lands queued compaction
summaries first (:func:`land_summaries`): that point is the post-tools boundary the
run has just passed.

A compaction summary's landing (placed or ``stale``) also settles the conversation's
pending compaction note in ``live`` and counts the compaction in the usage ledger
(``compactions``: ``landed``, ``stale`` and the tokens stale ones spent); a stale one
is explained in ``live["stale_compaction"]``, so a watcher sees why a request was spent.

All functions here run inside one transaction and never read a table: the ``live`` and
``inbox`` documents keep what is needed to rewrite a submission's record (id, request
id, entry, creation time), so settling and placing stay legal after the transaction's
first table write.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, cast

from core.harness.builtin_documents import INBOX, LIVE
from core.harness.events import note_event
from core.harness.generation.live import staged_value
from core.harness.messages import Usage, UserMessage, message_to_json
from core.harness.usage_ledger import change_ledger
from core.jsonvalue import JsonObject, JsonValue
from core.records import SubmissionRecord, Task
from core.session.documents import DocHandle
from core.session.transaction import Tx

if TYPE_CHECKING:
    from core.harness.settings import HarnessSettings

__all__ = [
    "GENERATION",
    "REMINDER",
    "SCHEDULE",
    "TOOL",
    "add_run_usage",
    "add_usage",
    "admit_write",
    "count_stale",
    "final_boundary",
    "inbox_items",
    "is_running",
    "land_summaries",
    "new_submission",
    "place_input",
    "place_write",
    "post_tools_boundary",
    "queue_item",
    "queued_summary",
    "range_start",
    "run_inputs",
    "run_usage",
    "settle_run",
    "start_run",
    "withdraw_inputs",
    "withdraw_summary",
]

GENERATION = "perdure.generation"
TOOL = "perdure.tool"
# The kinds of the timed tasks, here rather than in their modules (reminders.py,
# schedules.py) so that the harness names them without importing those on its open path.
REMINDER = "perdure.reminder"
SCHEDULE = "perdure.schedule"
WhenBusy = Literal["follow_up", "steer"]


def _obj(handle: DocHandle) -> JsonObject:
    value = handle.value
    if not isinstance(value, dict):
        value = {}
        handle.value = value
    return value


def _record(sub: SubmissionRecord) -> JsonObject:
    """What the documents keep of a submission: enough to rewrite its record without a
    table read (the read-before-write rule), committed together with the record."""
    out: JsonObject = {"id": sub.id}
    for name in ("request_id", "entry", "created_at"):
        value = getattr(sub, name)
        if value is not None:
            out[name] = value
    return out


def _submission(
    conversation_id: int, kind: Literal["input", "write"], rec: JsonObject, **fields: object
) -> SubmissionRecord:
    return SubmissionRecord(
        id=cast(int, rec["id"]),
        conversation_id=conversation_id,
        type=kind,
        request_id=cast("str | None", rec.get("request_id")),
        entry=cast("int | None", fields.pop("entry", rec.get("entry"))),
        created_at=cast("int | None", rec.get("created_at")),
        **fields,  # type: ignore[arg-type]
    )


def run_inputs(live: DocHandle) -> list[JsonObject]:
    run = _obj(live).get("run")
    inputs = run.get("inputs") if isinstance(run, dict) else None
    return [i for i in inputs if isinstance(i, dict)] if isinstance(inputs, list) else []


def is_running(live: JsonValue) -> bool:
    """Whether a ``live`` document value has a run in progress."""
    return isinstance(live, dict) and "run" in live


def inbox_items(inbox: JsonValue) -> list[JsonValue]:
    """The queued items of an ``inbox`` document value."""
    items = inbox.get("items") if isinstance(inbox, dict) else None
    return items if isinstance(items, list) else []


async def new_submission(
    tx: Tx, conversation_id: int, type: Literal["input", "write"], request_id: str | None
) -> SubmissionRecord:
    """A fresh ``queued`` submission record (not yet staged)."""
    return SubmissionRecord(
        id=await tx.mint_id(),
        conversation_id=conversation_id,
        type=type,
        status="queued",
        request_id=request_id,
        created_at=tx.now(),
    )


async def admit_write(
    tx: Tx, sub: SubmissionRecord, draft: JsonObject, *, at_once: bool = False
) -> SubmissionRecord:
    """Place a write at once when its conversation is idle (or ``at_once``), else queue it
    for the next boundary."""
    live = await tx.doc(LIVE, sub.conversation_id)
    inbox = await tx.doc(INBOX, sub.conversation_id)
    if at_once or not (is_running(live.value) or inbox_items(inbox.value)):
        return await place_write(tx, sub, draft)
    tx.put_submission(sub)
    queue_item(inbox, sub, {"entry": draft})
    return sub


def queue_item(inbox: DocHandle, sub: SubmissionRecord, payload: JsonObject) -> None:
    """Queue a submission in the inbox (``payload``: content and ``when_busy``, or entry)."""
    items = _obj(inbox).setdefault("items", [])
    assert isinstance(items, list)
    items.append({**_record(sub), "type": sub.type, **payload})


async def place_input(tx: Tx, sub: SubmissionRecord, content: str) -> SubmissionRecord:
    """Append the user entry of an input and mark its submission placed."""
    entry = await tx.append_entry(
        sub.conversation_id,
        "user",
        message=message_to_json(UserMessage(content=content)),
        data={"submission": sub.id},
    )
    placed = _submission(
        sub.conversation_id, "input", _record(sub), status="placed", entry=entry.id
    )
    tx.put_submission(placed)
    return placed


async def place_write(tx: Tx, sub: SubmissionRecord, draft: JsonObject) -> SubmissionRecord:
    """Append a write submission's entry and settle it done.

    A write that starts a context range (``head``: an entry id, or ``"self"`` for a reset)
    whose start lies before the current range's start is ``stale`` — a newer cut has
    overtaken it — and is settled unanswered without an entry.
    """
    head = draft.get("head")
    if isinstance(head, int):
        start = await range_start(tx, sub.conversation_id)
        if start is not None and head < start:
            stale = _submission(
                sub.conversation_id, "write", _record(sub), status="unanswered", reason="stale"
            )
            tx.put_submission(stale)
            await _summary_landed(tx, sub, head, stale_since=start)
            return stale
        await _summary_landed(tx, sub, head)
    entry = await tx.append_entry(
        sub.conversation_id,
        str(draft.get("kind") or "custom"),
        message=draft.get("message"),
        data=draft.get("data"),
        head="self" if head == "self" else head if isinstance(head, int) else None,
    )
    done = _submission(sub.conversation_id, "write", _record(sub), status="done", entry=entry.id)
    tx.put_submission(done)
    return done


async def _summary_landed(
    tx: Tx, sub: SubmissionRecord, head: int, *, stale_since: int | None = None
) -> None:
    """If ``sub`` carries the conversation's pending compaction summary, clear the note
    (the next compaction may start) and count the landing, or the stale end."""
    live = await tx.doc(LIVE, sub.conversation_id)
    value = _obj(live)
    note = value.get("compaction")
    if not isinstance(note, dict) or note.get("submission") != sub.id:
        return
    del value["compaction"]
    if stale_since is None:

        def landed(ledger: JsonObject) -> None:
            counts = _compaction_counts(ledger)
            counts["landed"] = int(cast(int, counts.get("landed", 0))) + 1

        await change_ledger(tx, sub.conversation_id, landed)
        await note_event(
            tx, sub.conversation_id, "compaction", state="landed", task=note.get("task")
        )
        return
    await count_stale(
        tx,
        sub.conversation_id,
        task=cast(int, note.get("task")),
        first_kept=head,
        range_start=stale_since,
        spent=note.get("usage"),
        submission=sub.id,
    )


def _compaction_counts(ledger: JsonObject) -> JsonObject:
    counts = ledger.get("compactions")
    if not isinstance(counts, dict):
        counts = {}
        ledger["compactions"] = counts
    return counts


async def count_stale(
    tx: Tx,
    conversation_id: int,
    *,
    task: int,
    first_kept: int,
    range_start: int | None,
    spent: JsonValue,
    submission: int | None = None,
) -> None:
    """A compaction ended ``stale`` (a newer cut or a reset overtook it): count it and
    what its summary requests spent in the usage ledger, and explain it in
    ``live["stale_compaction"]`` (a watcher sees the frame)."""

    def stale(ledger: JsonObject) -> None:
        counts = _compaction_counts(ledger)
        counts["stale"] = int(cast(int, counts.get("stale", 0))) + 1
        if isinstance(spent, dict):
            before = counts.get("stale_usage")
            base = Usage.model_validate(before) if isinstance(before, dict) else Usage()
            counts["stale_usage"] = (base + Usage.model_validate(spent)).model_dump()

    await change_ledger(tx, conversation_id, stale)
    await note_event(tx, conversation_id, "compaction", state="stale", task=task)
    live = _obj(await tx.doc(LIVE, conversation_id))
    explained: JsonObject = {
        "task": task,
        "first_kept": first_kept,
        "range_start": range_start,
        "usage": spent,
        "message": (
            f"Compaction task {task} ended stale: its summary kept the context from entry "
            f"{first_kept}, but the context had moved on"
            + (f" to start at entry {range_start}" if range_start is not None else "")
            + " (a newer compaction or a reset overtook it)."
        ),
    }
    if submission is not None:
        explained["submission"] = submission
    live["stale_compaction"] = explained


def withdraw_summary(live: DocHandle, submission_id: int) -> None:
    """A queued compaction summary was withdrawn: its pending note ends with it."""
    value = _obj(live)
    note = value.get("compaction")
    if isinstance(note, dict) and note.get("submission") == submission_id:
        del value["compaction"]


async def range_start(tx: Tx, conversation_id: int) -> int | None:
    """Where the conversation's active context range starts, counting head markers this
    transaction has staged."""
    starts = [
        e.head for e in tx.entries if e.conversation_id == conversation_id and e.head is not None
    ]
    marker = await tx.session.storage.latest_head(conversation_id)
    if marker is not None and marker.head is not None:
        starts.append(marker.head)
    return max(starts) if starts else None


async def start_run(tx: Tx, conversation_id: int, inputs: list[SubmissionRecord]) -> Task:
    """Start a run for placed inputs: a generation task and the ``live`` run record."""
    task = await tx.create_task(GENERATION, {}, conversation_id=conversation_id)
    live = await tx.doc(LIVE, conversation_id)
    value = _obj(live)
    value["run"] = {"inputs": [_record(s) for s in inputs], "generation": task.id}
    value["generation"] = {"task": task.id}
    value.pop("tools", None)
    return task


async def settle_run(
    tx: Tx,
    conversation_id: int,
    live: DocHandle,
    *,
    answer: int | None = None,
    reason: str | None = None,
    detail: JsonValue = None,
) -> None:
    """Settle every input of the current run — ``done`` with ``answer``, or ``unanswered``
    with ``reason`` —, add its usage to the ledger (in ``live`` too) and clear the run from
    ``live``."""
    run = _obj(live).get("run")
    pending = run.get("usage") if isinstance(run, dict) else None
    if isinstance(pending, dict):
        for model, used in pending.items():
            if isinstance(used, dict):
                await add_usage(tx, conversation_id, Usage.model_validate(used), model=model)
    for rec in run_inputs(live):
        if answer is not None:
            sub = _submission(conversation_id, "input", rec, status="done", answer=answer)
        else:
            sub = _submission(
                conversation_id,
                "input",
                rec,
                status="unanswered",
                reason=reason or "aborted",
                detail=detail,
            )
        tx.put_submission(sub)
    value = _obj(live)
    for key in ("run", "generation", "tools"):
        value.pop(key, None)


Writes = Literal["all", "not_reset", "summaries"]


def _takes_write(item: JsonObject, writes: Writes) -> bool:
    """Whether a boundary places a queued write: the final boundary every write; the
    post-tools boundary all but a reset (``head: "self"``), which waits for the answer;
    :func:`land_summaries` only compaction summaries (an entry id as ``head``)."""
    entry = item.get("entry")
    head = entry.get("head") if isinstance(entry, dict) else None
    if writes == "summaries":
        return isinstance(head, int) and not isinstance(head, bool)
    return writes == "all" or head != "self"


def _take(
    inbox: DocHandle,
    settings: HarnessSettings,
    modes: tuple[WhenBusy, ...],
    writes: Writes,
) -> list[JsonObject]:
    """Remove and return the items a boundary places: the writes it takes, and user items
    of the given modes (one, or all, per the settings), keeping the rest queued in order."""
    items = _obj(inbox).get("items")
    queued: list[JsonObject] = (
        [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []
    )
    taken: list[JsonObject] = []
    kept: list[JsonObject] = []
    took_steer = took_follow_up = False
    for item in queued:
        if item.get("type") == "write":
            (taken if _takes_write(item, writes) else kept).append(item)
            continue
        mode = item.get("when_busy")
        if (
            mode == "steer"
            and "steer" in modes
            and (settings.steering_mode == "all" or not took_steer)
        ):
            took_steer = True
            taken.append(item)
            continue
        if (
            mode == "follow_up"
            and "follow_up" in modes
            and (settings.follow_up_mode == "all" or not took_follow_up)
        ):
            took_follow_up = True
            taken.append(item)
            continue
        kept.append(item)
    if taken:  # an untouched inbox is not rewritten (no change, no revision)
        _obj(inbox)["items"] = cast(JsonValue, kept)
    # Writes first, then user items, each in id (= arrival) order.
    return sorted(taken, key=lambda i: (i.get("type") != "write", cast(int, i["id"])))


async def _place(tx: Tx, conversation_id: int, items: list[JsonObject]) -> list[SubmissionRecord]:
    placed: list[SubmissionRecord] = []
    for item in items:
        if item.get("type") == "write":
            sub = _submission(conversation_id, "write", item, status="queued")
            draft = item.get("entry")
            await place_write(tx, sub, draft if isinstance(draft, dict) else {})
        else:
            sub = _submission(conversation_id, "input", item, status="queued")
            placed.append(await place_input(tx, sub, str(item.get("content") or "")))
    return placed


async def withdraw_inputs(tx: Tx, conversation_id: int) -> list[int]:
    """Settle every queued *input* of the conversation ``unanswered/aborted`` and remove it
    from the inbox (queued writes stay, to be placed at the next boundary)."""
    inbox = await tx.doc(INBOX, conversation_id)
    items = _obj(inbox).get("items")
    queued = [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []
    withdrawn = [i for i in queued if i.get("type") == "input"]
    for item in withdrawn:
        tx.put_submission(
            _submission(conversation_id, "input", item, status="unanswered", reason="aborted")
        )
    _obj(inbox)["items"] = cast(JsonValue, [i for i in queued if i.get("type") != "input"])
    return [cast(int, i["id"]) for i in withdrawn]


async def post_tools_boundary(tx: Tx, conversation_id: int, settings: HarnessSettings) -> None:
    """Place queued writes (all but a reset) and steers; the steers join the current run.
    A compaction summary placed here starts the context the run continues in."""
    if not inbox_items(await staged_value(tx, INBOX, conversation_id)):
        return  # nothing queued (most boundaries): the inbox is not even opened
    inbox = await tx.doc(INBOX, conversation_id)
    placed = await _place(tx, conversation_id, _take(inbox, settings, ("steer",), "not_reset"))
    if placed:
        live = await tx.doc(LIVE, conversation_id)
        run = _obj(live).get("run")
        if isinstance(run, dict):
            run["inputs"] = [*run_inputs(live), *(_record(s) for s in placed)]


async def final_boundary(tx: Tx, conversation_id: int, settings: HarnessSettings) -> Task | None:
    """Place queued writes and user items after an answer; user items start the next run."""
    if not inbox_items(await staged_value(tx, INBOX, conversation_id)):
        return None
    inbox = await tx.doc(INBOX, conversation_id)
    placed = await _place(
        tx, conversation_id, _take(inbox, settings, ("steer", "follow_up"), "all")
    )
    if not placed:
        return None
    return await start_run(tx, conversation_id, placed)


async def land_summaries(tx: Tx, conversation_id: int, settings: HarnessSettings) -> bool:
    """Place queued compaction summaries now (nothing else); whether one was placed."""
    inbox = await tx.doc(INBOX, conversation_id)
    taken = _take(inbox, settings, (), "summaries")
    await _place(tx, conversation_id, taken)
    return bool(taken)


def queued_summary(inbox: JsonValue) -> bool:
    """Whether an ``inbox`` document value holds a compaction summary waiting to land."""
    return any(
        isinstance(i, dict) and i.get("type") == "write" and _takes_write(i, "summaries")
        for i in inbox_items(inbox)
    )


_USAGE_KEYS = tuple(Usage.model_fields)


def _usage_shaped(value: JsonValue) -> bool:
    """Whether ``value`` is a dumped :class:`Usage` exactly: its fields in order, ints and
    a float cost."""
    if type(value) is not dict or tuple(value) != _USAGE_KEYS:
        return False
    *counts, cost = value.values()
    return all(type(n) is int for n in counts) and type(cost) is float


def add_run_usage(live: DocHandle, usage: Usage, *, model: str) -> bool:
    """Add a model response's usage to the current run's in ``live`` (``run.usage``, by
    model), for :func:`settle_run` to add to the ledger; ``False`` (nothing added) when
    ``live`` has no run. A reader of the ledger adds :func:`run_usage`."""
    run = _obj(live).get("run")
    if not isinstance(run, dict):
        return False
    if usage.total_tokens or usage.cost:
        pending = run.setdefault("usage", {})
        if isinstance(pending, dict):
            _bump(pending, model, usage)
    return True


def run_usage(live: JsonValue) -> Usage:
    """The usage of the current run's responses so far (``live``'s ``run.usage``): not in
    the usage ledger until the run ends."""
    run = live.get("run") if isinstance(live, dict) else None
    pending = run.get("usage") if isinstance(run, dict) else None
    total = Usage()
    for used in pending.values() if isinstance(pending, dict) else ():
        if isinstance(used, dict):
            total = total + Usage.model_validate(used)
    return total


async def add_usage(
    tx: Tx, conversation_id: int, usage: Usage, *, model: str | None, tool: str | None = None
) -> None:
    """Add one response's usage to the conversation's ledger (total, per model, per tool),
    which ``live`` keeps."""
    if usage.total_tokens == 0 and usage.cost == 0:
        return

    def add(ledger: JsonObject) -> None:
        _bump(ledger, "total", usage)
        for kind, name in (("models", model), ("tools", tool)):
            if name:
                bucket = ledger.setdefault(kind, {})
                if isinstance(bucket, dict):
                    _bump(bucket, name, usage)

    await change_ledger(tx, conversation_id, add)


def _bump(bucket: JsonObject, key: str, usage: Usage) -> None:
    """Add ``usage`` to ``bucket[key]``."""
    current: Any = bucket.get(key)
    if _usage_shaped(current):
        # What the ledger always holds (written here): summed without revalidating.
        added: dict[str, Any] = usage.model_dump()
        bucket[key] = {k: current[k] + v for k, v in added.items()}
        return
    base = Usage.model_validate(current) if isinstance(current, dict) else Usage()
    bucket[key] = (base + usage).model_dump()
