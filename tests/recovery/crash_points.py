"""The crash matrix's named fault points: where a conversation turn commits or reaches
outside the process, and which hosts have each point.

A point is recognised without touching core: a *commit point* is a predicate over the
write set a commit hands the storage port (``when="before"``: the process dies with the
commit not written; ``"after"``: written, nothing after it ran); an *effect point* is a
named place in the scenario's tools, model, env or host plumbing (see
:mod:`tests.recovery.crash_scenario`) where the wrapper kills the process. ``nth``
picks the n-th matching occurrence (1-based).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from core.harness.compaction import COMPACTION
from core.harness.reminders import REMINDER
from core.harness.runs import GENERATION, TOOL
from core.jsonvalue import JsonValue
from core.records import ConversationRecord, Entry, SubmissionRecord, Task, Terminal, Waiting
from core.storage.port import Write

__all__ = ["ALL_HOSTS", "POINTS", "CrashPoint", "point_named"]

Host = Literal["local", "do", "lambda"]
ALL_HOSTS: tuple[Host, ...] = ("local", "do", "lambda")
Match = Callable[[Sequence[Write]], bool]


@dataclass(frozen=True)
class CrashPoint:
    """``match`` set: a commit point; else an effect point the scenario names ``name``."""

    name: str
    what: str
    match: Match | None = None
    when: Literal["before", "after"] = "after"
    nth: int = 1
    hosts: tuple[Host, ...] = ALL_HOSTS
    quick: tuple[Host, ...] = ()  # hosts whose default run takes it (a representative subset)


def _tasks(writes: Sequence[Write]) -> list[Task]:
    return [w for w in writes if isinstance(w, Task)]


def _get(value: JsonValue, key: str) -> JsonValue:
    return value.get(key) if isinstance(value, dict) else None


def _phase(task: Task) -> JsonValue:
    return _get(getattr(task.state, "checkpoint", None), "phase")


def _call_id(task: Task) -> JsonValue:
    # A tool task's input names the call, not the tool: the scenario's call ids do.
    return _get(task.input, "call_id")


def _entries(writes: Sequence[Write], kind: str) -> list[Entry]:
    return [w for w in writes if isinstance(w, Entry) and w.kind == kind]


def admission(request_id: str) -> Match:
    def match(writes: Sequence[Write]) -> bool:
        return any(
            isinstance(w, SubmissionRecord) and w.request_id == request_id and w.status != "done"
            for w in writes
        ) and not any(isinstance(w, SubmissionRecord) and w.status == "done" for w in writes)

    return match


def generation_phase(phase: str) -> Match:
    """A generation task's checkpoint moving to ``phase`` (``request``: a request pinned)."""

    def match(writes: Sequence[Write]) -> bool:
        return any(t.kind == GENERATION and t.live and _phase(t) == phase for t in _tasks(writes))

    return match


def streamed(writes: Sequence[Write]) -> bool:
    """Partial model output committed to ``live`` while the request streams: a commit of
    documents only (no task, entry or submission written)."""
    return bool(writes) and not any(
        isinstance(w, Task | Entry | SubmissionRecord | ConversationRecord) for w in writes
    )


def _kept_in_memory(task: Task, call_id: str) -> bool:
    """Whether ``task`` is a generation whose round checkpoint started ``call_id`` at its
    intent with its task kept in memory (noted in ``unstored``, never written)."""
    cp = getattr(task.state, "checkpoint", None)
    if task.kind != GENERATION or _get(cp, "phase") != "tools":
        return False
    calls, tasks, unstored = _get(cp, "calls"), _get(cp, "tasks"), _get(cp, "unstored")
    if not (isinstance(calls, list) and isinstance(tasks, list) and isinstance(unstored, dict)):
        return False
    return any(c == call_id and str(t) in unstored for c, t in zip(calls, tasks, strict=False))


def tool_round(writes: Sequence[Write]) -> bool:
    """The assistant entry with the generation waiting on its calls (and their tool tasks,
    unless the round keeps them in memory)."""
    return bool(_entries(writes, "assistant")) and any(
        t.kind == TOOL or (t.kind == GENERATION and _phase(t) == "tools") for t in _tasks(writes)
    )


def intent(call_id: str) -> Match:
    """The call's intent: its tool task at ``execute``, or the round commit that started
    it with its task kept in memory."""

    def match(writes: Sequence[Write]) -> bool:
        return any(
            (t.kind == TOOL and _call_id(t) == call_id and _phase(t) == "execute" and t.live)
            or _kept_in_memory(t, call_id)
            for t in _tasks(writes)
        )

    return match


def result(call_id: str) -> Match:
    """The call's result entry (with its task's end, unless kept in memory)."""

    def match(writes: Sequence[Write]) -> bool:
        return any(_get(e.data, "call_id") == call_id for e in _entries(writes, "tool_result"))

    return match


def approval(*, decided: bool) -> Match:
    """The ``ask_t`` call parked for approval: its question (``decided=False``) or the
    person's decision (``True``; the decision's commit may reserve the task at once, so
    it is ``running`` there), committed before the tool runs."""

    def match(writes: Sequence[Write]) -> bool:
        for t in _tasks(writes):
            record = _get(getattr(t.state, "checkpoint", None), "approval")
            if (
                t.kind == TOOL
                and _call_id(t) == "call_ask"
                and _phase(t) == "approval"
                and isinstance(record, dict)
                and ("decision" in record) == decided
                and (decided or isinstance(t.state, Waiting))
            ):
                return True
        return False

    return match


def handover(writes: Sequence[Write]) -> bool:
    """The run handed on after a tool round: its generation goes on to its next model
    round (the same task, its checkpoint at a later ``round``, prepared or to prepare)."""
    return any(
        t.kind == GENERATION
        and t.live
        and _phase(t) in ("prepare", "request")
        and isinstance(_get(getattr(t.state, "checkpoint", None), "round"), int)
        for t in _tasks(writes)
    )


def answer(request_id_prefix: str) -> Match:
    def match(writes: Sequence[Write]) -> bool:
        return any(
            isinstance(w, SubmissionRecord)
            and w.status == "done"
            and (w.request_id or "").startswith(request_id_prefix)
            for w in writes
        )

    return match


def compaction_started(writes: Sequence[Write]) -> bool:
    return any(t.kind == COMPACTION and _phase(t) == "select" and t.live for t in _tasks(writes))


def compaction_queued(writes: Sequence[Write]) -> bool:
    """The summary written and queued (a write submission) to land at the next boundary."""
    return any(
        isinstance(w, SubmissionRecord)
        and w.status == "queued"
        and (w.request_id or "").startswith("compaction:")
        for w in writes
    )


def compaction_landed(writes: Sequence[Write]) -> bool:
    return bool(_entries(writes, "compaction"))


def reminder_created(writes: Sequence[Write]) -> bool:
    return any(
        t.kind == REMINDER and isinstance(t.state, Waiting) and t.live for t in _tasks(writes)
    )


def reminder_fired(writes: Sequence[Write]) -> bool:
    return any(
        isinstance(w, SubmissionRecord) and (w.request_id or "").startswith("reminder:")
        for w in writes
    )


def occurrence(writes: Sequence[Write]) -> bool:
    """The commit that admits a schedule's occurrence and moves the schedule on."""
    return any(
        isinstance(w, SubmissionRecord) and (w.request_id or "").startswith("schedule:")
        for w in writes
    )


def owned_conversation(writes: Sequence[Write]) -> bool:
    return any(isinstance(w, ConversationRecord) and w.owner is not None for w in writes)


def forked(writes: Sequence[Write]) -> bool:
    return any(isinstance(w, ConversationRecord) and w.parent is not None for w in writes)


def abort_marked(writes: Sequence[Write]) -> bool:
    return any(t.abort_requested and t.live for t in _tasks(writes))


def abort_ended(writes: Sequence[Write]) -> bool:
    return any(
        isinstance(t.state, Terminal) and t.state.outcome.kind == "aborted" for t in _tasks(writes)
    )


_C = CrashPoint
POINTS: tuple[CrashPoint, ...] = (
    _C("admission.before", "the first input's admission, not written", admission("r1"), "before"),
    _C("admission.after", "the first input placed, its run started", admission("r1")),
    # A run's first request is pinned in memory when its pin would write nothing else
    # (no prompt change, no compaction): the first ``request`` checkpoint committed is
    # then a later round's, pinned by its hand-over (the scenario's third round).
    _C("generation.prepare", "a request pinned by a commit, not yet sent",
       generation_phase("request")),
    _C("model.request", "inside the first model request (external effect), nothing streamed "
       "yet; its pin in memory, the stored phase still prepare", quick=("local",)),
    _C("generation.stream", "partial output committed while the model streams", streamed),
    _C("generation.tool_round", "assistant entry + waiting on its calls", tool_round),
    _C("tool.intent.safe", "intent of the safe tool committed", intent("call_safe")),
    _C("tool.intent.unsafe", "intent of the unsafe tool committed", intent("call_unsafe")),
    _C("tool.intent.recoverable", "intent of the recoverable tool", intent("call_rec")),
    _C("tool.effect.safe", "the safe tool's effect started, not finished"),
    _C("tool.effect.unsafe", "the unsafe tool's effect started, not finished", quick=("local",)),
    _C("tool.effect.recoverable.running", "the sandbox runs the recoverable op", quick=("local",)),
    _C("tool.effect.recoverable.done", "the sandbox finished the op, result not committed"),
    _C("tool.result.safe", "the safe tool's result entry", result("call_safe")),
    _C("tool.result.unsafe", "the unsafe tool's result entry", result("call_unsafe")),
    _C("tool.result.recoverable", "the recoverable tool's result", result("call_rec")),
    _C("handover", "the generation goes on to its next round", handover, quick=("do",)),
    _C("subagent.created", "the sub-agent's conversation created", owned_conversation),
    _C("subagent.answer", "the sub-agent's input answered", answer("subagent:")),
    _C("answer", "the first input answered", answer("r1")),
    _C("compaction.start", "the compaction task created", compaction_started),
    _C("compaction.queued", "the summary written, waiting to land", compaction_queued),
    _C("compaction.landed", "the compaction entry landed", compaction_landed, quick=("local",)),
    _C("reminder.created", "the reminder's timer task created", reminder_created),
    _C("reminder.fired", "the reminder submitted its message", reminder_fired),
    _C("reminder.answer", "the reminder's message answered", answer("reminder:")),
    _C("fork", "the fork's conversation created", forked),
    _C("fork.answer", "the fork's input answered", answer("f1")),
    _C("abort.marked", "the abort mark committed", abort_marked, quick=("local",)),
    _C("abort.ended", "an aborted task's outcome committed", abort_ended),
    _C("approval.asked", "the call's question committed: parked, no intent",
       approval(decided=False)),
    _C("approval.decided.before", "the approval not written", approval(decided=True), "before"),
    _C("approval.decided", "the approval committed, the tool not yet run",
       approval(decided=True), quick=("local",)),
    _C("schedule.due", "the occurrence due, its commit not written", occurrence, "before"),
    _C("schedule.fired", "the occurrence admitted and the schedule moved on", occurrence,
       quick=("do",)),
    # Durable Object: the commit landed, the isolate dies before the alarm is re-armed.
    _C("do.commit_before_rearm", "tool round committed, alarm not re-armed", tool_round,
       hosts=("do",), quick=("do",)),
    _C("do.answer_before_rearm", "answer committed, alarm not re-armed", answer("r1"),
       hosts=("do",)),
    # Lambda: the DynamoDB transaction landed, the local SQLite apply did not run.
    _C("lambda.durable_not_applied", "tool round durable in DynamoDB, not applied locally",
       tool_round, hosts=("lambda",), quick=("lambda",)),
    _C("lambda.durable_not_applied.answer", "answer durable, not applied", answer("r1"),
       hosts=("lambda",)),
    _C("lambda.snapshot_upload", "killed while a snapshot is being uploaded to S3",
       hosts=("lambda",)),
    _C("lambda.mailbox_drain", "a mailed input submitted, the mail not yet removed",
       admission("mail-1"), hosts=("lambda",), quick=("lambda",)),
    _C("lambda.lease_expiry", "the lease runs out mid-request; a new holder takes over",
       hosts=("lambda",), quick=("lambda",)),
)  # fmt: skip


def point_named(name: str) -> CrashPoint:
    for point in POINTS:
        if point.name == name:
            return point
    raise KeyError(name)
