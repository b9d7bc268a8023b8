"""Op admission, detached execution, waiting, streaming and crash recovery.

The life of a mutating op:

1. **Admission** (serialised by one lock, so concurrent duplicates cannot both insert): the
   row is inserted as ``running`` *before* anything is executed. If the key exists, the
   request's fingerprint must match (else 422 ``op_conflict``: the IETF Idempotency-Key
   draft's status for a key reused with another payload) and the caller joins the
   existing op instead of starting another.
2. **Execution** runs in its own asyncio task, detached from the HTTP request: a client that
   disconnects or times out does not stop it. Every path through the task writes a terminal
   status (``succeeded``, ``failed``, ``timed_out``, ``cancelled``, or ``lost`` when the server
   shuts down under it). A refusal discovered while executing but before any side effect (a
   symlink escape) deletes the row instead, so the request can be fixed and resent.
3. **Waiting**: the POST waits up to ``wait_ms``; ``GET /v1/ops/{id}`` long-polls; SSE follows
   the output log by byte offset.
4. **Recovery**: on start, rows left ``running`` by a dead server are settled: a command's
   orphaned process group is killed and the op is ``lost``; a file mutation whose target
   already has the recorded post-hash is ``succeeded`` (the rename happened), else ``lost``.

Size: over 600 lines because :class:`OpManager` is one class with one job, an op's life
from admission to its terminal status, and the four stages above share its lock, its
table of live ops and its log; split, each would reach into the others' state.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from core.errors import InvalidJson
from core.jsonvalue import scrub_json
from remote_env.protocol import (
    BashArgs,
    BashRequest,
    EditOutput,
    EditRequest,
    ErrorBody,
    FindRequest,
    GrepRequest,
    LsRequest,
    OpKind,
    OpRecord,
    OpRequest,
    OutputChunk,
    ReadRequest,
    WriteOutput,
    WriteRequest,
    admit,
    fingerprint,
)
from remote_env.server import files, search
from remote_env.server.budget import SearchBudget
from remote_env.server.confine import Jail
from remote_env.server.errors import Rejected, ToolFailure
from remote_env.server.executor import CommandRun, ProcessIdentity, kill_orphan_group
from remote_env.server.oplog import OpLog, OpRow
from remote_env.server.paths import lexical_relative
from remote_env.server.patterns import PatternError, compile_line_pattern
from remote_env.server.settings import ServerSettings
from remote_env.server.workspaces import Workspaces

__all__ = ["OpManager", "StreamEvent"]

_STREAM_CHUNK = 64 * 1024
# Searches run on their own threads, so a few long ones cannot hold up reads and writes
# (which use asyncio's default pool); each is bounded by the search time limit.
_SEARCH_THREADS = 4
_LOST_MESSAGE = "the sandbox server restarted while this op ran; whether it took effect is unknown"
_SHUTDOWN_MESSAGE = "the sandbox server shut down while this op ran; it was killed"


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One SSE event: ``output`` (with the offset after it), ``result`` or ``error``."""

    event: Literal["output", "result", "error"]
    data: BaseModel
    id: str | None = None


@dataclass(eq=False)
class _Live:
    """In-memory state of an op executing in this process."""

    workspace: str
    op_id: str
    kind: OpKind
    fingerprint: str
    attempt: int
    created_at: float
    done: asyncio.Event = field(default_factory=asyncio.Event)
    record: OpRecord | None = None
    rejection: Rejected | None = None
    log_size: int = 0
    command: CommandRun | None = None
    cancel_mode: Literal["abort", "kill"] | None = None
    task: asyncio.Task[None] | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def changed(self) -> asyncio.Event:
        """An event set at the next change; take it *before* inspecting state."""
        return self._changed

    def pulse(self) -> None:
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    def running_record(self, *, replayed: bool) -> OpRecord:
        return OpRecord(
            op_id=self.op_id,
            kind=self.kind,
            status="running",
            attempt=self.attempt,
            replayed=replayed,
            created_at=self.created_at,
            output_bytes=self.log_size,
        )


async def _wait_for(event: asyncio.Event, timeout_s: float) -> bool:
    if event.is_set():
        return True
    if timeout_s <= 0:
        return False
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout_s)
    return event.is_set()


def _utf8_complete_prefix(data: bytes) -> int:
    """Length of ``data`` without a trailing, incomplete UTF-8 sequence."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:
            continue  # continuation byte: keep looking for the lead byte
        need = (
            2
            if byte >> 5 == 0b110
            else 3
            if byte >> 4 == 0b1110
            else 4
            if byte >> 3 == 0b11110
            else 1
        )
        return len(data) - back if need > back else len(data)
    return len(data)


class OpManager:
    """Owns the op log and every op executing in this server process."""

    def __init__(
        self,
        settings: ServerSettings,
        workspaces: Workspaces,
        oplog: OpLog,
        *,
        jail: Jail,
        bash_refusal: str | None = None,
    ) -> None:
        self._jail = jail
        #: Why ``bash`` ops are refused on this host (no working bwrap), if they are.
        self._bash_refusal = bash_refusal
        self._settings = settings
        self._workspaces = workspaces
        self._log = oplog
        self._live: dict[tuple[str, str], _Live] = {}
        self._admission = asyncio.Lock()
        self._logs_dir = settings.state_path / "logs"
        self._logs_dir.mkdir(parents=True, exist_ok=True)
        self._searches = ThreadPoolExecutor(_SEARCH_THREADS, thread_name_prefix="search")
        self._stopping = threading.Event()  # tells running searches the server is stopping

    # ---------------------------------------------------------------- helpers

    def log_path(self, workspace: str, op_id: str) -> Path:
        """Output log of an op (named by hash: op ids may be ``..``)."""
        digest = hashlib.sha256(f"{workspace}\x00{op_id}".encode()).hexdigest()
        return self._logs_dir / f"{digest[:40]}.log"

    def _record_from_row(self, row: OpRow, *, replayed: bool) -> OpRecord:
        status = row.status
        error = row.error
        if status == "running" and (row.workspace, row.op_id) not in self._live:
            # Only reachable if recovery could not settle the row: nobody is running it.
            status, error = "lost", {"code": "lost", "message": _LOST_MESSAGE}
        return OpRecord.model_validate(
            {
                "op_id": row.op_id,
                "kind": row.kind,
                "status": status,
                "attempt": row.attempt,
                "replayed": replayed,
                "result": row.result,
                "error": error,
                "created_at": row.created_at,
                "finished_at": row.finished_at,
                "output_bytes": row.output_bytes,
            }
        )

    def _precheck(self, workspace: str, request: OpRequest) -> None:
        """Refusals that need no I/O, before anything is fingerprinted or recorded."""
        try:
            admit(request)
        except InvalidJson as exc:
            raise Rejected(422, "invalid", f"invalid request: {exc}") from None
        root = self._workspaces.path_of(workspace)
        if isinstance(request, BashRequest) and self._bash_refusal is not None:
            raise Rejected(501, "unavailable", self._bash_refusal)
        if isinstance(request, BashRequest):
            if request.args.cwd is not None:
                lexical_relative(request.args.cwd, root)
        else:
            lexical_relative(request.args.path, root)

    # ---------------------------------------------------------------- submit

    async def submit(self, workspace: str, request: OpRequest) -> OpRecord:
        """Run (or join) an op and answer within ``wait_ms``.

        Raises:
            Rejected: 4xx refusals (nothing executed).
        """
        self._precheck(workspace, request)
        if not isinstance(request, WriteRequest | EditRequest | BashRequest):
            return await self._run_read_only(workspace, request)
        key = (workspace, request.op_id)
        digest = fingerprint(request.kind, request.args)
        fresh = False
        row: OpRow | None = None
        async with self._admission:
            live = self._live.get(key)
            if live is None:
                row = await self._log.get(*key)
                if row is None:
                    live = await self._admit(workspace, request, digest)
                    fresh = True
        if not fresh:
            if live is not None:
                known, current = live.fingerprint, live.attempt
            else:
                assert row is not None
                known, current = row.request_sha256, row.attempt
            if known != digest:
                raise Rejected(
                    422,  # a key reused with another payload (IETF Idempotency-Key draft)
                    "op_conflict",
                    f"op id {request.op_id} was already used for a different request",
                )
            if request.attempt > current:
                if live is not None:
                    live.attempt = request.attempt
                await self._log.note_attempt(workspace, request.op_id, request.attempt)
        wait_s = min(request.wait_ms / 1000, self._settings.max_wait_s)
        if live is None:
            assert row is not None
            record = self._record_from_row(row, replayed=True)
            return record.model_copy(update={"attempt": max(row.attempt, request.attempt)})
        await _wait_for(live.done, wait_s)
        return self._answer(live, replayed=not fresh)

    def _answer(self, live: _Live, *, replayed: bool) -> OpRecord:
        if live.rejection is not None:
            raise live.rejection
        if live.record is not None:
            return live.record.model_copy(update={"replayed": replayed, "attempt": live.attempt})
        return live.running_record(replayed=replayed)

    async def _admit(
        self, workspace: str, request: WriteRequest | EditRequest | BashRequest, digest: str
    ) -> _Live:
        now = time.time()
        target = None if isinstance(request, BashRequest) else request.args.path
        await self._log.insert(
            OpRow(
                workspace=workspace,
                op_id=request.op_id,
                kind=request.kind,
                request_sha256=digest,
                attempt=request.attempt,
                status="running",
                created_at=now,
                target=target,
            )
        )
        live = _Live(
            workspace=workspace,
            op_id=request.op_id,
            kind=request.kind,
            fingerprint=digest,
            attempt=request.attempt,
            created_at=now,
        )
        self._live[(workspace, request.op_id)] = live
        live.task = asyncio.create_task(self._execute(live, request))
        return live

    async def _run_read_only(
        self, workspace: str, request: ReadRequest | LsRequest | FindRequest | GrepRequest
    ) -> OpRecord:
        now = time.time()
        try:
            if isinstance(request, FindRequest | GrepRequest):
                call = self._search_call(workspace, request)
                loop = asyncio.get_running_loop()
                result = await loop.run_in_executor(self._searches, call)
            else:
                result = await asyncio.to_thread(self._read_only_call, workspace, request)
        except ToolFailure as exc:
            return OpRecord.model_validate(
                {
                    "op_id": None,  # never recorded: there is nothing to look up later
                    "kind": request.kind,
                    "status": "failed",
                    "error": _servable(exc.body().model_dump()),
                    "created_at": now,
                    "finished_at": time.time(),
                }
            )
        return OpRecord.model_validate(
            {
                "op_id": None,
                "kind": request.kind,
                "status": "succeeded",
                "result": _servable(result.model_dump()),
                "created_at": now,
                "finished_at": time.time(),
            }
        )

    def _read_only_call(self, workspace: str, request: OpRequest) -> BaseModel:
        settings = self._settings
        with self._workspaces.open(workspace) as conf:
            if isinstance(request, ReadRequest):
                return files.read_file(conf, request.args, max_read_bytes=settings.max_read_bytes)
            if isinstance(request, LsRequest):
                return files.list_dir(conf, request.args)
        raise AssertionError(f"not a read or ls: {request.kind}")

    def _search_call(
        self, workspace: str, request: FindRequest | GrepRequest
    ) -> Callable[[], BaseModel]:
        """The search as a call for a worker thread, its patterns compiled there too (RE2
        takes up to about 0.1 s to refuse a pattern too large to compile).

        The call raises :class:`Rejected` (422) for a pattern or glob that does not
        compile, before anything is read.
        """
        # The time limit counts from the request's arrival, waiting for a thread included.
        budget = SearchBudget.start(
            timeout_s=self._settings.search_timeout_s,
            max_scan_bytes=self._settings.max_scan_bytes,
            shutdown=self._stopping,
        )

        def call() -> BaseModel:
            if isinstance(request, GrepRequest):
                args = request.args
                with _refused_if_invalid():
                    pattern = compile_line_pattern(
                        args.pattern, literal=args.literal, ignore_case=args.ignore_case
                    )
                    glob = None if args.glob is None else search.compile_glob_arg(args.glob)
                with self._workspaces.open(workspace) as conf:
                    return search.grep_files(conf, args, pattern, glob, budget)
            with _refused_if_invalid():
                find_glob = search.compile_glob_arg(request.args.pattern)
            with self._workspaces.open(workspace) as conf:
                return search.find_paths(conf, request.args, find_glob, budget)

        return call

    # ---------------------------------------------------------------- execution

    async def _execute(self, live: _Live, request: OpRequest) -> None:
        try:
            if isinstance(request, BashRequest):
                status, result, error = await self._run_command(live, request.args)
            else:
                status, result, error = await self._mutate_file(live, request)
        except Rejected as exc:
            await self._forget(live, exc)
        except asyncio.CancelledError:
            if live.command is not None:
                live.command.kill()
            await self._settle(
                live, "lost", None, ErrorBody(code="lost", message=_SHUTDOWN_MESSAGE)
            )
            raise
        except Exception as exc:  # every path must settle the op, or it stays "running"
            await self._settle(
                live, "failed", None, ErrorBody(code="internal", message=f"internal error: {exc!r}")
            )
        else:
            await self._settle(live, status, result, error)

    async def _settle(
        self,
        live: _Live,
        status: str,
        result: dict[str, Any] | None,
        error: ErrorBody | None,
    ) -> None:
        finished = time.time()
        result = None if result is None else _servable(result)
        error_json = None if error is None else _servable(error.model_dump())
        record = OpRecord.model_validate(
            {
                "op_id": live.op_id,
                "kind": live.kind,
                "status": status,
                "attempt": live.attempt,
                "result": result,
                "error": error_json,
                "created_at": live.created_at,
                "finished_at": finished,
                "output_bytes": live.log_size,
            }
        )
        try:
            await self._log.finish(
                live.workspace,
                live.op_id,
                status=status,
                result=result,
                error=error_json,
                output_bytes=live.log_size,
                finished_at=finished,
                expires_at=finished + self._settings.retention_s,
            )
        finally:
            # Even if the log write failed, callers waiting in this process get the outcome;
            # the row stays "running" and a restart reports it lost, which is still true.
            live.record = record
            self._release(live)

    async def _forget(self, live: _Live, rejection: Rejected) -> None:
        try:
            await self._log.delete(live.workspace, live.op_id)
            with contextlib.suppress(FileNotFoundError):
                self.log_path(live.workspace, live.op_id).unlink()
        finally:
            live.rejection = rejection
            self._release(live)

    def _release(self, live: _Live) -> None:
        self._live.pop((live.workspace, live.op_id), None)
        live.done.set()
        live.pulse()

    def _resolve_cwd(self, workspace: str, cwd: str | None) -> str:
        with self._workspaces.open(workspace) as conf:
            fd = conf.open_dir(cwd or ".")
            try:
                # The kernel's name for the directory we actually opened (beneath the root).
                return os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                return os.path.join(conf.root_path, lexical_relative(cwd or ".", conf.root_path))
            finally:
                os.close(fd)

    async def _run_command(
        self, live: _Live, args: BashArgs
    ) -> tuple[str, dict[str, Any] | None, ErrorBody | None]:
        settings = self._settings
        timeout_s = (
            settings.default_timeout_s if args.timeout_ms is None else args.timeout_ms / 1000
        )
        timeout_s = min(timeout_s, settings.max_timeout_s)
        try:
            cwd = await asyncio.to_thread(self._resolve_cwd, live.workspace, args.cwd)
        except ToolFailure as exc:
            return "failed", None, exc.body()

        def on_output(size: int) -> None:
            live.log_size = size
            live.pulse()

        run = CommandRun(
            log_path=self.log_path(live.workspace, live.op_id),
            max_output_bytes=settings.max_output_bytes,
            on_output=on_output,
            jail=self._jail,
            key=f"{live.workspace}\x00{live.op_id}",
        )
        try:
            identity = await run.start(
                args.command,
                cwd=cwd,
                env=args.env,
                home=self._workspaces.path_of(live.workspace),
                user=self._workspaces.user,
            )
        except ToolFailure as exc:
            return "failed", None, exc.body()
        live.command = run
        if live.cancel_mode is not None:
            run.kill(record_as_cancelled=live.cancel_mode == "abort")
        try:
            await self._log.set_process(
                live.workspace,
                live.op_id,
                pid=identity.pid,
                pgid=identity.pgid,
                ticks=identity.start_ticks,
                boot=identity.boot_id,
            )
        except BaseException:
            run.kill(record_as_cancelled=False)  # unrecorded: it must never run
            raise
        run.release()  # recorded: a crash from now on finds the group in the op log
        outcome = await run.wait(timeout_s)
        live.log_size = run.log_size
        result = outcome.output.model_dump()
        if outcome.timed_out:
            seconds = f"{timeout_s:g}"
            return (
                "timed_out",
                result,
                ErrorBody(code="timeout", message=f"Command timed out after {seconds} seconds"),
            )
        if outcome.cancelled:
            return "cancelled", result, ErrorBody(code="cancelled", message="Command cancelled")
        return "succeeded", result, None

    async def _mutate_file(
        self, live: _Live, request: OpRequest
    ) -> tuple[str, dict[str, Any] | None, ErrorBody | None]:
        loop = asyncio.get_running_loop()

        def before_commit(pre: str | None, post: str, result: WriteOutput | EditOutput) -> None:
            # Runs in the worker thread; the hashes must be durable before the rename.
            future = asyncio.run_coroutine_threadsafe(
                self._log.set_hashes(
                    live.workspace,
                    live.op_id,
                    pre=pre,
                    post=post,
                    pending_result=result.model_dump(),
                ),
                loop,
            )
            future.result()

        def call() -> BaseModel:
            owner = self._workspaces.owner
            with self._workspaces.open(live.workspace) as conf:
                if isinstance(request, WriteRequest):
                    return files.write_file(
                        conf, request.args, owner=owner, before_commit=before_commit
                    )
                if isinstance(request, EditRequest):
                    return files.edit_file(
                        conf, request.args, owner=owner, before_commit=before_commit
                    )
            raise AssertionError(f"not a file mutation: {request.kind}")

        try:
            result = await asyncio.to_thread(call)
        except ToolFailure as exc:
            return "failed", None, exc.body()
        return "succeeded", result.model_dump(), None

    # ---------------------------------------------------------------- queries

    async def get(self, workspace: str, op_id: str, *, wait_s: float = 0.0) -> OpRecord | None:
        """The op's record, waiting up to ``wait_s`` for it to finish; ``None`` if unknown."""
        row: OpRow | None = None
        # Under the admission lock an op is either registered as live or settled in the log,
        # never half-admitted.
        async with self._admission:
            live = self._live.get((workspace, op_id))
            if live is None:
                row = await self._log.get(workspace, op_id)
        if live is not None:
            await _wait_for(live.done, min(wait_s, self._settings.max_wait_s))
            if live.rejection is not None:
                return None  # refused before any effect: as if it never arrived
            return self._answer(live, replayed=True)
        return None if row is None else self._record_from_row(row, replayed=True)

    async def cancel(
        self, workspace: str, op_id: str, mode: Literal["abort", "kill"]
    ) -> OpRecord | None:
        """Kill a running command's process group; finished ops keep their outcome."""
        live = self._live.get((workspace, op_id))
        if live is not None:
            live.cancel_mode = mode
            if live.command is not None:
                live.command.kill(record_as_cancelled=mode == "abort")
        return await self.get(workspace, op_id, wait_s=5.0)

    async def exists(self, workspace: str, op_id: str) -> bool:
        """Whether the op is known (for answering 404 before a stream starts)."""
        async with self._admission:
            if (workspace, op_id) in self._live:
                return True
            return await self._log.get(workspace, op_id) is not None

    async def events(self, workspace: str, op_id: str, offset: int) -> AsyncIterator[StreamEvent]:
        """Output from byte ``offset`` as it is produced, then the final record."""
        path = self.log_path(workspace, op_id)
        while True:
            live = self._live.get((workspace, op_id))
            changed = live.changed() if live is not None else None
            final: OpRecord | None = None
            if live is None:
                final = await self.get(workspace, op_id)
                if final is None:
                    yield StreamEvent(
                        "error", ErrorBody(code="op_not_found", message=f"unknown op {op_id}")
                    )
                    return
                size = _file_size(path)
            else:
                size = live.log_size
            if offset < size:
                data = _read_at(path, offset, min(_STREAM_CHUNK, size - offset))
                cut = len(data) if final is not None else _utf8_complete_prefix(data)
                if cut > 0:
                    text = data[:cut].decode("utf-8", "replace")
                    yield StreamEvent(
                        "output", OutputChunk(offset=offset, text=text), str(offset + cut)
                    )
                    offset += cut
                    continue
            if final is not None:
                yield StreamEvent("result", final, str(offset))
                return
            assert changed is not None
            # Re-check at least every few seconds in case a wake-up was missed.
            await _wait_for(changed, 5.0)

    # ---------------------------------------------------------------- lifecycle

    async def recover(self) -> None:
        """Settle ops left ``running`` by a previous server process (call before serving)."""
        for row in await self._log.running():
            status = "lost"
            result: dict[str, Any] | None = None
            error: dict[str, Any] | None = {"code": "lost", "message": _LOST_MESSAGE}
            if row.kind == "bash" and row.pgid is not None:
                identity = ProcessIdentity(
                    pid=row.pid or row.pgid,
                    pgid=row.pgid,
                    start_ticks=row.proc_start_ticks,
                    boot_id=row.boot_id or "",
                )
                await asyncio.to_thread(kill_orphan_group, identity)
            elif row.post_sha256 is not None and row.target is not None:
                current = await asyncio.to_thread(self._current_hash, row.workspace, row.target)
                if current == row.post_sha256 and row.pending_result is not None:
                    status, result, error = "succeeded", row.pending_result, None
            now = time.time()
            await self._log.finish(
                row.workspace,
                row.op_id,
                status=status,
                result=result,
                error=error,
                output_bytes=_file_size(self.log_path(row.workspace, row.op_id)),
                finished_at=now,
                expires_at=now + self._settings.retention_s,
            )

    def _current_hash(self, workspace: str, target: str) -> str | None:
        with self._workspaces.open(workspace) as conf:
            return files.file_sha256(conf, target)

    async def sweep(self) -> int:
        """Delete ops past their retention, with their logs; return how many."""
        keys = await self._log.expire(time.time())
        for workspace, op_id in keys:
            with contextlib.suppress(FileNotFoundError):
                self.log_path(workspace, op_id).unlink()
        return len(keys)

    async def shutdown(self) -> None:
        """Stop searches; kill running commands and settle their ops as ``lost``."""
        self._stopping.set()
        self._searches.shutdown(wait=False, cancel_futures=True)
        tasks = [live.task for live in self._live.values() if live.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@contextlib.contextmanager
def _refused_if_invalid() -> Iterator[None]:
    """A pattern or glob that does not compile: 422, nothing searched."""
    try:
        yield
    except (PatternError, ToolFailure) as exc:
        raise Rejected(422, "invalid", str(exc)) from None


def _servable(value: dict[str, Any]) -> dict[str, Any]:
    # File names are decoded with surrogateescape: a name that is not UTF-8 would make the
    # answer unserializable (a 500 for every listing of that directory). Shown lossily.
    scrubbed = scrub_json(value)
    assert isinstance(scrubbed, dict)
    return scrubbed


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _read_at(path: Path, offset: int, size: int) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return b""
    try:
        return os.pread(fd, size, offset)
    finally:
        os.close(fd)
