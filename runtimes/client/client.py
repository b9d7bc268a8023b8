""":class:`ActorClient`: the actor HTTP API (docs/design.md § The HTTP API) as typed async
calls, the same against every host.

Submissions: :meth:`~ActorClient.submit` answers the host's ``202`` as
:class:`~runtimes.client.models.Accepted`; :meth:`~ActorClient.wait` polls it until it
settles — by id, or by request id while its id is not known (AWS mails a submission that
meets an actor held by another invocation: ``id`` null, ``status`` ``mailed``) — with the
host's long poll, so a wait costs one request per ``poll_wait_s``. Listings are async
iterators over the host's pages (the cursors stay opaque). Every error status raises
:class:`~runtimes.client.errors.RequestRefused` (4xx) or
:class:`~runtimes.client.errors.ServerError` (5xx) with the host's code and message.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing, asynccontextmanager
from typing import Any, Literal

import httpx

from runtimes.actor.ids import check_actor_id
from runtimes.client.errors import (
    AGAIN,
    ApiError,
    HostUnreachable,
    RequestRefused,
    ServerError,
)
from runtimes.client.models import (
    Aborted,
    Accepted,
    AgentState,
    ApprovalDecision,
    Approvals,
    CompactionStarted,
    ConversationSummary,
    ConversationView,
    Forked,
    MintedToken,
    PendingApproval,
    ReminderSet,
    SubmissionState,
    SubmissionSummary,
    TimerCancelled,
    Timers,
)
from runtimes.client.watch import Via, Watch

__all__ = ["ActorClient"]

WhenBusy = Literal["follow_up", "steer", "reject"]
Order = Literal["asc", "desc"]
_MAILED_PAUSE_S = (0.05, 1.0)  # a mailed submission's poll answers at once: back off


def _given(**fields: Any) -> dict[str, Any]:
    """A request body of the fields given: ``None`` means left out (the host's default)."""
    return {name: value for name, value in fields.items() if value is not None}


class ActorClient:
    """A client of the host at ``url`` (``http://127.0.0.1:8787``, a Worker's or a
    Function URL's address) with a ``token``: the host's API token or a scoped one
    (``mint_token``). ``transport``: any ``httpx.AsyncBaseTransport`` — e.g.
    :class:`~runtimes.client.StreamingASGITransport` to call an app in-process.

    ``poll_wait_s``: how long one long poll (``wait``, the watch's ``poll``) may be held
    by the host (hosts cap it: 60 s locally, the invocation's time left on Lambda);
    ``timeout``: for everything else; ``page_size``: items per listing request.
    Use it as an async context manager, or call :meth:`aclose`."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 30.0,
        poll_wait_s: float = 20.0,
        stream_read_s: float = 60.0,
        page_size: int = 100,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.poll_wait_s = poll_wait_s
        self.stream_read_s = stream_read_s  # the host pings a quiet stream every 15 s
        self.page_size = page_size
        self.streams: bool | None = None
        """Whether the host serves the watch as a stream: ``None`` until a watch found out."""
        self.http = httpx.AsyncClient(
            base_url=self.url,
            headers={"authorization": f"Bearer {token}"},
            timeout=timeout,
            transport=transport,
        )

    async def __aenter__(self) -> ActorClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    # ------------------------------------------------------------------ plumbing

    @asynccontextmanager
    async def guard(self) -> AsyncIterator[None]:
        """Transport failures as :class:`HostUnreachable` (with the host's address)."""
        try:
            yield
        except httpx.TimeoutException as error:
            raise HostUnreachable(f"no answer from {self.url} in time ({error!r})") from error
        except httpx.TransportError as error:
            raise HostUnreachable(f"cannot reach {self.url}: {error}") from error

    def error_of(self, response: httpx.Response) -> ApiError:
        """The error a non-2xx answer stands for, with the host's code and message."""
        status = response.status_code
        try:
            error = response.json()["error"]
            code, message = str(error["code"]), str(error["message"])
        except (ValueError, KeyError, TypeError):
            code, message = "http_error", response.text[:200] or response.reason_phrase
        retry = response.headers.get("retry-after")
        try:
            retry_after = float(retry) if retry is not None else None
        except ValueError:
            retry_after = None
        kind = RequestRefused if status < 500 else ServerError
        return kind(status, code, message, retry_after=retry_after)

    async def request_json(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        wait: float = 0,
    ) -> Any:
        """One request; its JSON answer, or the error it stands for. ``wait``: seconds
        the host may hold it (a long poll), added to the read timeout."""
        timeout = httpx.Timeout(self.timeout, read=self.timeout + wait)
        async with self.guard():
            response = await self.http.request(
                method, path, json=json, params=params, timeout=timeout
            )
        if not response.is_success:
            raise self.error_of(response)
        return response.json()

    async def get_json(
        self, path: str, params: Mapping[str, Any] | None = None, *, wait: float = 0
    ) -> Any:
        return await self.request_json("GET", path, params=params, wait=wait)

    async def pause(self, error: ApiError) -> None:
        """Wait as a ``423``/``503`` asks (``Retry-After``, else a second)."""
        await asyncio.sleep(min(error.retry_after or 1.0, 5.0))

    @staticmethod
    def _actor(actor: str) -> str:
        # Checked here, not only by the host: an id is a path segment of every URL.
        return f"/v1/actors/{check_actor_id(actor)}"

    # ------------------------------------------------------------------ submissions

    async def submit(
        self,
        actor: str,
        content: str,
        *,
        conversation_id: int | None = None,
        request_id: str | None = None,
        when_busy: WhenBusy = "follow_up",
    ) -> Accepted:
        """Submit user input. ``request_id`` makes it idempotent: sent again with the
        same content it answers the original submission. ``when_busy``: ``follow_up``
        queues it behind the current run, ``steer`` places it into the current run,
        ``reject`` refuses it ``409 conversation_busy``."""
        body: dict[str, Any] = {"type": "input", "content": content, "when_busy": when_busy}
        return await self._submit(actor, body, conversation_id, request_id)

    async def steer(
        self,
        actor: str,
        content: str,
        *,
        conversation_id: int | None = None,
        request_id: str | None = None,
    ) -> Accepted:
        """Input that joins the current run after its tool round (or starts one)."""
        return await self.submit(
            actor,
            content,
            conversation_id=conversation_id,
            request_id=request_id,
            when_busy="steer",
        )

    async def write(
        self,
        actor: str,
        kind: str,
        *,
        message: Mapping[str, Any] | None = None,
        data: Any = None,
        conversation_id: int | None = None,
        request_id: str | None = None,
    ) -> Accepted:
        """Append an application entry (``kind``; ``message`` joins the context) without
        asking for an answer."""
        entry = _given(kind=kind, message=None if message is None else dict(message), data=data)
        return await self._submit(
            actor, {"type": "write", "content": entry}, conversation_id, request_id
        )

    async def _submit(
        self, actor: str, body: dict[str, Any], conversation_id: int | None, request_id: str | None
    ) -> Accepted:
        body |= _given(conversation_id=conversation_id, request_id=request_id)
        answer = await self.request_json("POST", f"{self._actor(actor)}/submissions", json=body)
        return Accepted.model_validate(answer)

    async def submission(
        self, actor: str, submission_id: int, *, wait: float = 0
    ) -> SubmissionState:
        """A submission's state; ``wait``: hold until it settles or that many seconds."""
        path = f"{self._actor(actor)}/submissions/{submission_id}"
        return SubmissionState.model_validate(await self.get_json(path, {"wait": wait}, wait=wait))

    async def submission_by_request(
        self, actor: str, request_id: str, *, conversation_id: int = 1, wait: float = 0
    ) -> SubmissionState:
        """The submission admitted (or mailed) under ``request_id``: how a client that has
        no id polls, on every host."""
        path = f"{self._actor(actor)}/conversations/{conversation_id}/submissions/by-request"
        params = {"request_id": request_id, "wait": wait}
        return SubmissionState.model_validate(await self.get_json(path, params, wait=wait))

    async def wait(
        self,
        actor: str,
        submission: Accepted | SubmissionState | int,
        *,
        timeout: float | None = None,
    ) -> SubmissionState:
        """Poll ``submission`` until it is ``done`` or ``unanswered``; its settled state
        (``answer``, or ``reason``). By id when known, else by request id (a ``mailed``
        submission), switching to the id once the host admitted it. An answer that asks to
        come back (:data:`~runtimes.client.errors.AGAIN`: the actor held elsewhere, the
        host restarting) is waited out. ``TimeoutError`` after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        sid: int | None
        request_id: str | None
        if isinstance(submission, int):
            sid, request_id, cid = submission, None, 1
        else:
            sid, request_id, cid = submission.id, submission.request_id, submission.conversation_id
        if sid is None and request_id is None:
            raise ValueError("a submission without an id needs its request id to be polled")
        pause = _MAILED_PAUSE_S[0]
        while True:
            left = self.poll_wait_s if deadline is None else deadline - loop.time()
            if left <= 0:
                raise TimeoutError(
                    f"submission {sid or request_id!r} did not settle in {timeout} s"
                )
            hold = min(self.poll_wait_s, left)
            try:
                if sid is not None:
                    state = await self.submission(actor, sid, wait=hold)
                else:
                    assert request_id is not None
                    state = await self.submission_by_request(
                        actor, request_id, conversation_id=cid, wait=hold
                    )
            except ApiError as error:
                if error.status not in AGAIN:
                    raise
                await self.pause(error)
                continue
            if state.settled:
                return state
            if state.id is not None:
                sid = state.id
            elif state.status == "mailed":  # answered at once, not held: back off
                await asyncio.sleep(pause)
                pause = min(pause * 2, _MAILED_PAUSE_S[1])

    async def ask(
        self,
        actor: str,
        content: str,
        *,
        conversation_id: int | None = None,
        request_id: str | None = None,
        timeout: float | None = None,
    ) -> SubmissionState:
        """Submit ``content`` and wait for it to settle."""
        accepted = await self.submit(
            actor, content, conversation_id=conversation_id, request_id=request_id
        )
        return await self.wait(actor, accepted, timeout=timeout)

    # ------------------------------------------------------------------ views

    async def view(self, actor: str, conversation_id: int = 1) -> ConversationView:
        """The committed view: active entries and current documents."""
        path = f"{self._actor(actor)}/conversations/{conversation_id}/view"
        return ConversationView.model_validate(await self.get_json(path))

    def watch(self, actor: str, conversation_id: int = 1, *, via: Via = "auto") -> Watch:
        """The conversation's watch: its view, then a frame per commit that changes it
        (see :class:`~runtimes.client.watch.Watch`). ``via``: ``sse``, ``poll`` or
        ``auto`` (the stream where the host serves one, else the long poll)."""
        check_actor_id(actor)
        return Watch(
            self, actor, conversation_id, "poll" if self.streams is False and via == "auto" else via
        )

    async def tasks(self, actor: str) -> dict[str, Any]:
        """The live task graph, as ``GET .../tasks`` answers it."""
        graph: dict[str, Any] = await self.get_json(f"{self._actor(actor)}/tasks")
        return graph

    async def timers(self, actor: str) -> Timers:
        return Timers.model_validate(await self.get_json(f"{self._actor(actor)}/timers"))

    async def approvals(self, actor: str) -> list[PendingApproval]:
        """The tool calls waiting for a decision across the actor's conversations."""
        answer = Approvals.model_validate(await self.get_json(f"{self._actor(actor)}/approvals"))
        return answer.approvals

    async def decide(
        self,
        actor: str,
        approval_id: int,
        decision: Literal["approve", "deny"],
        *,
        note: str | None = None,
        request_id: str | None = None,
    ) -> ApprovalDecision:
        """Approve or deny a pending call. The same decision again answers the recorded
        one; another raises :class:`ApiError` ``409 approval_decided``."""
        body = _given(decision=decision, note=note, request_id=request_id)
        path = f"{self._actor(actor)}/approvals/{approval_id}"
        return ApprovalDecision.model_validate(await self.request_json("POST", path, json=body))

    # ------------------------------------------------------------------ listings

    async def actors(self) -> AsyncIterator[str]:
        """The host's actor ids, ascending (hosts without an index answer ``501``)."""
        after: str | None = None
        while True:
            params: dict[str, Any] = {"limit": self.page_size}
            if after is not None:
                params["after"] = after
            page = await self.get_json("/v1/actors", params)
            for actor in page["actors"]:
                yield str(actor["id"])
            after = page.get("next_after")
            if after is None:
                return

    async def _pages(
        self, path: str, key: str, params: dict[str, Any]
    ) -> AsyncGenerator[Any, None]:
        cursor: str | None = None
        while True:
            query = {**params, "limit": self.page_size}
            if cursor is not None:
                query["cursor"] = cursor
            page = await self.get_json(path, query)
            for item in page[key]:
                yield item
            cursor = page.get("next")
            if cursor is None:
                return

    async def conversations(self, actor: str) -> AsyncIterator[ConversationSummary]:
        """The actor's conversations, ascending by id: the root, forks and sub-agents."""
        path = f"{self._actor(actor)}/conversations"
        async with aclosing(self._pages(path, "conversations", {})) as items:
            async for item in items:
                yield ConversationSummary.model_validate(item)

    async def submissions(
        self,
        actor: str,
        conversation_id: int = 1,
        *,
        status: str | None = None,
        order: Order = "asc",
    ) -> AsyncIterator[SubmissionSummary]:
        """The conversation's submissions (``status``: only those)."""
        path = f"{self._actor(actor)}/conversations/{conversation_id}/submissions"
        params: dict[str, Any] = {"order": order}
        if status is not None:
            params["status"] = status
        async with aclosing(self._pages(path, "submissions", params)) as items:
            async for item in items:
                yield SubmissionSummary.model_validate(item)

    async def entries(
        self, actor: str, conversation_id: int = 1, *, order: Order = "asc"
    ) -> AsyncIterator[dict[str, Any]]:
        """The conversation's whole transcript, entries as stored."""
        path = f"{self._actor(actor)}/conversations/{conversation_id}/entries"
        async with aclosing(self._pages(path, "entries", {"order": order})) as items:
            async for item in items:
                yield dict(item)

    # ------------------------------------------------------------------ control

    async def abort(
        self, actor: str, conversation_id: int = 1, *, background: bool = False
    ) -> Aborted:
        """Abort the foreground work (``background``: and background tasks, reminders
        included) and withdraw queued input; answers once the conversation is idle."""
        path = f"{self._actor(actor)}/conversations/{conversation_id}/abort"
        # The host answers once the work has stopped: no read timeout.
        timeout = httpx.Timeout(self.timeout, read=None)
        async with self.guard():
            response = await self.http.post(path, json={"background": background}, timeout=timeout)
        if not response.is_success:
            raise self.error_of(response)
        return Aborted.model_validate(response.json())

    async def remind(
        self,
        actor: str,
        message: str,
        *,
        after: float | None = None,
        at: int | None = None,
        conversation_id: int = 1,
    ) -> ReminderSet:
        """Submit ``message`` later: ``after`` seconds, or ``at`` epoch milliseconds."""
        body = _given(message=message, after=after, at=at)
        path = f"{self._actor(actor)}/conversations/{conversation_id}/reminders"
        return ReminderSet.model_validate(await self.request_json("POST", path, json=body))

    async def cancel_reminder(self, actor: str, task: int) -> TimerCancelled:
        path = f"{self._actor(actor)}/timers/{task}"
        return TimerCancelled.model_validate(await self.request_json("DELETE", path))

    async def compact(
        self, actor: str, conversation_id: int = 1, *, instructions: str | None = None
    ) -> CompactionStarted:
        body = {} if instructions is None else {"instructions": instructions}
        path = f"{self._actor(actor)}/conversations/{conversation_id}/compact"
        return CompactionStarted.model_validate(await self.request_json("POST", path, json=body))

    async def reset(
        self,
        actor: str,
        conversation_id: int = 1,
        *,
        handoff: str | None = None,
        request_id: str | None = None,
    ) -> Accepted:
        """Start a new context range: the model then sees only ``handoff`` and what follows."""
        body = _given(handoff=handoff, request_id=request_id)
        path = f"{self._actor(actor)}/conversations/{conversation_id}/reset"
        return Accepted.model_validate(await self.request_json("POST", path, json=body))

    async def fork(
        self,
        actor: str,
        at_entry: int,
        *,
        conversation_id: int = 1,
        agent: Mapping[str, Any] | None = None,
    ) -> Forked:
        body = _given(at_entry=at_entry, agent=None if agent is None else dict(agent))
        path = f"{self._actor(actor)}/conversations/{conversation_id}/fork"
        return Forked.model_validate(await self.request_json("POST", path, json=body))

    async def configure(self, actor: str, conversation_id: int = 1, **agent: Any) -> AgentState:
        """Change the conversation's agent (``model``, ``tools``, ``instructions``...;
        ``None`` clears a field)."""
        path = f"{self._actor(actor)}/conversations/{conversation_id}/agent"
        return AgentState.model_validate(await self.request_json("PATCH", path, json=agent))

    # ------------------------------------------------------------------ tokens

    async def mint_token(
        self,
        actor: str,
        rights: Literal["read", "submit", "admin"],
        ttl_s: int,
        *,
        conversation_id: int | None = None,
    ) -> MintedToken:
        """A signed, expiring token for ``actor`` alone (optionally one conversation):
        ``read``, ``submit`` or ``admin``. Only the host's API token may mint."""
        body = _given(
            actor=check_actor_id(actor), rights=rights, ttl_s=ttl_s, conversation_id=conversation_id
        )
        return MintedToken.model_validate(await self.request_json("POST", "/v1/tokens", json=body))
