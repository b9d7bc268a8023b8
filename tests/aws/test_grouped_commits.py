"""The Lambda handler groups an invocation's commits into few fenced transactions
(issue 36): what DynamoDB holds when each tool starts, and what a lost lease at a flush
leaves — no answer, no unsafe tool, nothing written.

DynamoDB is read independently of the holder: the head's seq when a tool starts, and
later the log up to that seq replayed into a fresh SQLite file (log records are never
rewritten, and nothing here is collected by a snapshot)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any, cast

import pytest

from core.faux import FauxModel
from core.harness.runs import GENERATION, TOOL
from core.jsonvalue import JsonObject
from core.storage import TaskQuery
from core.storage.sqlite import SqliteStorage
from core.testing import VirtualClock
from runtimes.actor.api import ApiConfig
from runtimes.actor.sqlite import Sqlite3Database
from runtimes.actor.testing import KIT_TOKEN, KitTools, kit_config
from runtimes.aws import AwsResources
from runtimes.aws.handler import ActorFunction, FunctionSettings
from runtimes.aws.keys import ActorKeys
from runtimes.aws.lease import Lease
from runtimes.aws.log import read_log
from tests.aws.aws_target import create_alarms
from tests.aws.lambda_support import answer, context, url_event
from tests.aws.support import container, head, items
from tests.bench.edge_aws import TOOLS, count_calls, scripted_model

ACTOR = "g1"


def _function(aws: AwsResources, tmp: Path, tools: KitTools, model: FauxModel) -> ActorFunction:
    clock = VirtualClock()
    return ActorFunction(
        FunctionSettings(
            resources=aws,
            actor=dataclasses.replace(kit_config(tools), models=model),
            api=ApiConfig(KIT_TOKEN),
            workdir=container(tmp),
            alarms=create_alarms(clock.now),
            clock=clock,
        )
    )


async def _submit(fn: ActorFunction, content: str, request_id: str) -> tuple[int, Any]:
    body = {"type": "input", "content": content, "request_id": request_id}
    event = url_event("POST", f"/v1/actors/{ACTOR}/submissions", body)
    return answer(await fn.invoke(event, context()))


async def _durable_tool_tasks(aws: AwsResources, seq: int, path: Path) -> dict[str, Any]:
    """The intents DynamoDB held at ``seq``, by call id: the tool tasks' checkpoints, and
    for a round that keeps its tasks in memory, the intent its generation's checkpoint
    notes (the policy) with the arguments of its stored assistant entry."""
    storage = await SqliteStorage.open(Sqlite3Database.open(path))
    try:
        for write_set in await read_log(aws, ActorKeys(ACTOR, aws.prefix), 1, seq):
            await storage.apply_write_set(write_set)
        tasks = (await storage.scan_tasks(TaskQuery(kind=TOOL))).items
        intents = {str(cast(JsonObject, t.input)["call_id"]): t.checkpoint for t in tasks}
        for gen in (await storage.scan_tasks(TaskQuery(kind=GENERATION))).items:
            cp = cast(JsonObject, gen.checkpoint or {})
            unstored = cast(JsonObject, cp.get("unstored") or {})
            entry = await storage.entry(cast(int, cp["assistant"])) if unstored else None
            calls = (
                cast(list[JsonObject], cast(JsonObject, entry.message)["content"]) if entry else []
            )
            for call_id, task_id in zip(
                cast(list[str], cp.get("calls") or []),
                cast(list[int], cp.get("tasks") or []),
                strict=False,
            ):
                if str(task_id) in unstored:
                    [call] = [c for c in calls if c.get("id") == call_id]
                    intents[call_id] = {
                        "phase": "execute",
                        "arguments": call["arguments"],
                        "replay": unstored[str(task_id)],
                        "attempt": 1,
                    }
    finally:
        await storage.close()
    return intents


async def test_an_unsafe_tools_intent_is_durable_when_it_starts_and_a_safe_round_waits(
    aws: AwsResources, tmp_path: Path
) -> None:
    seq_at_start: dict[str, int] = {}

    def started(name: str) -> None:
        seq_at_start[name] = int(head(aws, ACTOR)["seq"])

    fn = _function(aws, tmp_path, KitTools(started=started), scripted_model())
    assert (await _submit(fn, "safe", "r-safe"))[0] == 202  # a new actor: one invocation
    assert (await _submit(fn, "unsafe", "r-unsafe"))[0] == 202

    # The safe tool ran before anything of its invocation was durable: the actor's
    # first commits went out together when the invocation let the actor go.
    assert seq_at_start["kit_search"] == 0
    # The unsafe one started only once its intent was durable (invariant 4).
    durable = await _durable_tool_tasks(aws, seq_at_start["kit_book"], tmp_path / "at-book")
    intent = durable["c_unsafe"]
    assert intent is not None, durable
    assert (intent["phase"], intent["replay"], intent["arguments"]) == (
        "execute",
        "unsafe",
        {"what": "seat"},
    ), intent


def _take_over(aws: AwsResources) -> None:
    """Another invocation takes the actor's lease over (as after this one's lease ran
    out while it was paused): a higher epoch, another owner."""
    aws.dynamodb.update_item(
        TableName=aws.table,
        Key=ActorKeys(ACTOR, aws.prefix).head(),
        UpdateExpression="SET #o = :o, #e = #e + :one",
        ExpressionAttributeNames={"#o": "owner", "#e": "epoch"},
        ExpressionAttributeValues={":o": {"S": "thief"}, ":one": {"N": "1"}},
    )


def _release(aws: AwsResources) -> None:
    aws.dynamodb.update_item(
        TableName=aws.table,
        Key=ActorKeys(ACTOR, aws.prefix).head(),
        UpdateExpression="REMOVE #o SET #x = :zero",
        ExpressionAttributeNames={"#o": "owner", "#x": "expires_at"},
        ExpressionAttributeValues={":zero": {"N": "0"}},
    )


@pytest.mark.parametrize("tool", ["safe", "unsafe"])
async def test_a_lease_lost_before_a_flush_answers_nothing_and_writes_nothing(
    aws: AwsResources, tmp_path: Path, tool: str
) -> None:
    stolen = False

    def steal() -> None:
        nonlocal stolen
        if stolen:  # only the first invocation loses its lease
            return
        stolen = True
        _take_over(aws)

    tools = KitTools()
    fn = _function(aws, tmp_path, tools, scripted_model(steal))
    assert (await _submit(fn, "hello", "r-0"))[0] == 202  # the actor exists
    before = items(aws, ACTOR)
    stored = {i["sk"]["S"] for i in before if i["sk"]["S"] != "head"}
    seq = head(aws, ACTOR)["seq"]

    # The lease is taken over while the model answers: the invocation's next flush —
    # the final one (safe), or the one before the unsafe tool — is fenced off.
    status, out = await _submit(fn, tool, "r-1")
    assert status == 503 and out["error"]["code"] == "storage_failed", out  # not a 202
    assert tools.runs["kit_search"] == (1 if tool == "safe" else 0)  # safe may run
    assert tools.runs["kit_book"] == 0  # its intent never became durable: never ran
    after = head(aws, ACTOR)
    assert (after["owner"], after["seq"]) == ("thief", seq)  # nothing written
    assert {i["sk"]["S"] for i in items(aws, ACTOR) if i["sk"]["S"] != "head"} == stored

    # Once the other holder lets go, the same request is accepted as new (the first
    # acceptance never became durable) and answered once.
    _release(aws)
    status, again = await _submit(fn, tool, "r-1")
    assert status == 202, again
    path = f"/v1/actors/{ACTOR}/submissions/{again['id']}"
    status, state = answer(await fn.invoke(url_event("GET", path), context()))
    assert status == 200 and state["status"] == "done", state
    assert tools.runs[TOOLS[tool]] == (2 if tool == "safe" else 1)


class _WatchedDeletes:
    """A DynamoDB client noting the head's seq whenever an item is deleted."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seq_at_delete: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def delete_item(self, **kwargs: Any) -> Any:
        out = self.inner.get_item(
            TableName=kwargs["TableName"], Key=ActorKeys(ACTOR).head(), ConsistentRead=True
        )
        self.seq_at_delete.append(int(out["Item"]["seq"]["N"]))
        return self.inner.delete_item(**kwargs)


async def test_a_mailed_submission_leaves_the_mailbox_only_once_its_admission_is_durable(
    aws: AwsResources, tmp_path: Path
) -> None:
    watched = _WatchedDeletes(aws.dynamodb)
    resources = dataclasses.replace(aws, dynamodb=watched)
    fn = _function(resources, tmp_path, KitTools(), scripted_model())
    assert (await _submit(fn, "hello", "r-0"))[0] == 202
    holder = Lease(aws, ACTOR, "someone-else", VirtualClock().now)
    await holder.acquire()
    status, mailed = await _submit(fn, "mailed", "r-mail")  # held: mailed
    assert status == 202 and mailed["status"] == "mailed", mailed
    await holder.release()

    status, _ = await _submit(fn, "next", "r-2")  # this invocation drains the mailbox
    assert status == 202
    (seq,) = watched.seq_at_delete
    # What DynamoDB held as the mail was deleted already had the mailed submission.
    storage = await SqliteStorage.open(Sqlite3Database.open(tmp_path / "at-delete"))
    try:
        for write_set in await read_log(aws, ActorKeys(ACTOR, aws.prefix), 1, seq):
            await storage.apply_write_set(write_set)
        assert await storage.submission_by_request(1, "r-mail") is not None
    finally:
        await storage.close()


async def test_tools_that_start_together_share_the_flush_before_them(
    aws: AwsResources, tmp_path: Path
) -> None:
    calls: Counter[str] = Counter()
    count_calls(calls, aws.dynamodb, "dynamodb")
    tools = KitTools()
    fn = ActorFunction(
        FunctionSettings(
            resources=aws,
            actor=kit_config(tools),  # "tools": one safe, one unsafe, one recoverable call
            api=ApiConfig(KIT_TOKEN),
            workdir=container(tmp_path),
            clock=VirtualClock(),
        )
    )
    assert (await _submit(fn, "hello", "r-0"))[0] == 202
    calls.clear()
    assert (await _submit(fn, "tools", "r-1"))[0] == 202
    assert tools.runs == {"kit_search": 1, "kit_book": 1, "kit_hold": 1}, tools.runs
    # The two intents that are not safe go out in one flush, the rest as the invocation
    # lets the actor go.
    assert calls["~transactions"] == 2, calls
