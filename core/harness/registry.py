"""Tools, extensions and the registry that agents resolve their names against.

Conversations store *names* (of a model, tools, extensions), never code. An extension
bundles tools, system prompt sections, hooks, tool wrappers and custom task
definitions; ``registry.install(ext)`` adds it or replaces the installed one with the
same name *in place* (same position): calls already running finish on the code they
started with, the next call resolves the new one. Every install is validated before it
is published, so a bad extension never becomes visible.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

from pydantic import BaseModel

from core.errors import RegistryError
from core.jsonvalue import JsonObject, JsonValue, dumps, loads
from core.readonly import readonly
from core.session.documents import DocDefinition
from core.tasks.definition import TaskDefinition

if TYPE_CHECKING:
    from core.harness.messages import Message, ToolCall
    from core.harness.tools import ToolContext, ToolResult

__all__ = [
    "RESERVED_TASKS",
    "ApprovalRule",
    "Block",
    "Extension",
    "Hooks",
    "Registry",
    "ReplayPolicy",
    "ResolvedAgent",
    "Section",
    "SectionContext",
    "ToolDefinition",
    "ToolSource",
    "define_extension",
    "define_tool",
    "section",
]

ReplayPolicy: TypeAlias = Literal["safe", "unsafe", "recoverable"]
ExecutionMode: TypeAlias = Literal["parallel", "sequential"]
ToolExecute: TypeAlias = Callable[[Any, "ToolContext"], Awaitable["ToolResult | str"]]
ApprovalRule: TypeAlias = Literal["never", "always"] | Callable[[Any], bool]
"""Whether a tool's call waits for a person's decision: ``never``, ``always``, or a
predicate over the call's validated arguments (true: ask)."""

RESERVED_TASKS = frozenset({"perdure.generation", "perdure.tool", "perdure.compaction"})
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SECTION_KEY = re.compile(r"^[a-z][a-z0-9_-]*$")


@readonly(eq=False, slots=False)
class ToolDefinition:
    """A tool. ``parameters`` is the pydantic model its arguments are validated against
    (its JSON schema is what the model sees).

    ``replay`` says what happens when a crash interrupts a call after its intent was
    committed: ``safe`` reruns it, ``unsafe`` (default) reports it to the model as
    interrupted, ``recoverable`` asks the execution environment for the recorded result
    of the call's op id (the tool must route its side effect through one env op keyed by
    ``ctx.op``). ``execution_mode="sequential"`` makes a tool round containing this tool
    run its calls one at a time. ``input_schema``, when set, is the JSON schema the model
    sees instead of the parameters model's (a tool whose schema comes from elsewhere, an
    MCP server's, validates with a permissive model and leaves the rest to its server).

    ``approval`` says whether a call waits for a person's decision before it runs
    (``never``, ``always``, or a predicate over the validated arguments), and
    ``approval_expires_s`` after how many seconds an undecided call is denied (``None``:
    it waits as long as it takes); see :mod:`core.harness.approvals`.
    """

    name: str
    description: str
    parameters: type[BaseModel]
    execute: ToolExecute
    replay: ReplayPolicy = "unsafe"
    execution_mode: ExecutionMode = "parallel"
    max_output_bytes: int | None = None
    max_output_lines: int | None = None
    approval: ApprovalRule = "never"
    approval_expires_s: float | None = None
    input_schema: JsonObject | None = None

    def schema(self) -> JsonObject:
        """The JSON schema of the parameters (built once per model class: pydantic's
        schema generation costs more than a whole commit), or ``input_schema``."""
        if self.input_schema is not None:
            copied: JsonObject = loads(dumps(self.input_schema))
            return copied
        return _schema(self.parameters)


@functools.cache
def _schema_cached(parameters: type[BaseModel]) -> str:
    return dumps(parameters.model_json_schema())


def _schema(parameters: type[BaseModel]) -> JsonObject:
    value: JsonObject = loads(_schema_cached(parameters))
    return value


def define_tool(
    name: str,
    *,
    description: str,
    parameters: type[BaseModel],
    execute: ToolExecute,
    replay: ReplayPolicy = "unsafe",
    execution_mode: ExecutionMode = "parallel",
    max_output_bytes: int | None = None,
    max_output_lines: int | None = None,
    approval: ApprovalRule = "never",
    approval_expires_s: float | None = None,
    input_schema: JsonObject | None = None,
) -> ToolDefinition:
    if not isinstance(name, str) or not _TOOL_NAME.match(name):
        raise RegistryError(f"tool names match {_TOOL_NAME.pattern}, got {name!r}")
    if replay not in ("safe", "unsafe", "recoverable"):
        raise RegistryError(f"unknown replay policy {replay!r}")
    if execution_mode not in ("parallel", "sequential"):
        raise RegistryError(f"unknown execution mode {execution_mode!r}")
    if not (isinstance(parameters, type) and issubclass(parameters, BaseModel)):
        raise RegistryError(f"tool {name!r}: parameters must be a pydantic model class")
    if approval not in ("never", "always") and not callable(approval):
        raise RegistryError(f"tool {name!r}: approval is 'never', 'always' or a predicate")
    if approval_expires_s is not None and not (
        isinstance(approval_expires_s, int | float) and 0 < approval_expires_s <= 366 * 86400
    ):
        raise RegistryError(f"tool {name!r}: approval_expires_s is seconds, up to 366 days")
    return ToolDefinition(
        name,
        description,
        parameters,
        execute,
        replay,
        execution_mode,
        max_output_bytes,
        max_output_lines,
        approval,
        approval_expires_s,
        input_schema,
    )


@readonly
class SectionContext:
    """What a system prompt section can look at while it renders."""

    conversation_id: int
    agent: ResolvedAgent
    documents: Callable[[Any], Awaitable[JsonValue]]
    """``await documents(definition)``: a conversation document's committed value."""


@readonly(eq=False, slots=False)
class Section:
    """A keyed piece of the system prompt; ``render`` returns ``None`` to omit it."""

    key: str
    render: Callable[[SectionContext], Awaitable[str | None] | str | None]
    tag: str | None = None


def section(
    key: str,
    render: Callable[[SectionContext], Awaitable[str | None] | str | None],
    *,
    tag: str | None = None,
) -> Section:
    return Section(key, render, tag)


@readonly
class Block:
    """Returned by a ``before_tool`` hook to refuse a call; ``reason`` reaches the model."""

    reason: str


@readonly(eq=False, slots=False)
class Hooks:
    """Extension points around the built-in tasks. Every hook is optional and async.

    * ``before_request(messages, ctx)`` → a replacement message list for this request
      only, or ``None``;
    * ``before_tool(call, ctx)`` → ``None`` (allow), a :class:`Block`, or replacement
      arguments (a dict). The first block wins; a hook that raises blocks the call;
    * ``after_tool(call, result, ctx)`` → a replacement result or ``None``;
    * ``after_tools(results, ctx)`` → observes a finished tool round;
    * ``on_abort(call, result, ctx)`` → a replacement for an aborted call's result.

    Hooks may run again after a crash; a hook that decides something the world must not
    see twice (asking a human) stores its decision with ``ctx.memo``.
    """

    before_request: Callable[[list[Message], Any], Awaitable[list[Message] | None]] | None = None
    before_tool: Callable[[ToolCall, ToolContext], Awaitable[Block | JsonObject | None]] | None = (
        None
    )
    after_tool: (
        Callable[[ToolCall, ToolResult, ToolContext], Awaitable[ToolResult | None]] | None
    ) = None
    after_tools: Callable[[list[ToolResult], Any], Awaitable[None]] | None = None
    on_abort: Callable[[ToolCall, ToolResult, ToolContext], Awaitable[ToolResult | None]] | None = (
        None
    )


ToolWrapper: TypeAlias = Callable[[ToolDefinition], ToolDefinition]


class ToolSource(Protocol):
    """Tools listed from outside the process, per conversation (an MCP server's); their
    listings live in the conversation's ``tool_sources`` document
    (``core/harness/tool_sources.py``).

    Contract:

    * ``name`` is unique among the installed sources and names the listing in the
      ``tool_sources`` document.
    * ``tools(listing)`` builds the tool definitions from a committed listing (``None``
      when the conversation never listed this source). Pure and without I/O: it runs
      whenever an agent is resolved against a changed listing, on every host, also while
      recovering a tool call. Names must satisfy ``define_tool``'s pattern and should
      not collide with other tools (a source's tools replace same-named ones).
    * ``due(listing, now)``: whether the listing must be fetched again before the next
      model request (never listed, older than the source's TTL, marked changed).
      Pure; ``now`` is epoch milliseconds from the harness clock.
    * ``fetch(listing, now)`` lists the tools (network I/O; never called inside a
      commit) and returns the new listing, a JSON value. It may raise: the harness
      reports the error and the request goes on with the listing it had.
    """

    @property
    def name(self) -> str: ...

    def tools(self, listing: JsonValue) -> Mapping[str, ToolDefinition]: ...

    def due(self, listing: JsonValue, now: int) -> bool: ...

    async def fetch(self, listing: JsonValue, now: int) -> JsonValue: ...


@readonly(eq=False, slots=False)
class Extension:
    name: str
    tools: tuple[ToolDefinition, ...] = ()
    sections: tuple[Section, ...] = ()
    hooks: Hooks | None = None
    wraps: Mapping[str, ToolWrapper] = field(default_factory=dict)
    tasks: tuple[TaskDefinition, ...] = ()
    documents: tuple[DocDefinition[Any], ...] = ()
    """Document kinds the extension's code uses: registering them tells forks how to
    copy them (their ``fork`` policy)."""
    sources: tuple[ToolSource, ...] = ()
    """Tool sources (``core/harness/tool_sources.py``): tools listed per conversation,
    such as an MCP server's. The agent's ``tools`` filter does not apply to them: an
    agent selects them by selecting the extension."""


def define_extension(
    name: str,
    *,
    tools: Sequence[ToolDefinition] = (),
    sections: Sequence[Section] = (),
    hooks: Hooks | None = None,
    wraps: Mapping[str, ToolWrapper] | None = None,
    tasks: Sequence[TaskDefinition] = (),
    documents: Sequence[DocDefinition[Any]] = (),
    sources: Sequence[ToolSource] = (),
) -> Extension:
    ext = Extension(
        name,
        tuple(tools),
        tuple(sections),
        hooks,
        dict(wraps or {}),
        tuple(tasks),
        tuple(documents),
        tuple(sources),
    )
    _validate_extension(ext)
    return ext


def _validate_extension(ext: Extension) -> None:
    if not isinstance(ext.name, str) or not ext.name:
        raise RegistryError("an extension name is a non-empty string")
    names = [t.name for t in ext.tools]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise RegistryError(f"extension {ext.name!r} defines tool(s) {dupes} twice")
    keys = [s.key for s in ext.sections]
    for key in keys:
        if not _SECTION_KEY.match(key):
            raise RegistryError(f"section keys match {_SECTION_KEY.pattern}, got {key!r}")
        if key == "instructions":
            raise RegistryError("the section key 'instructions' is reserved for the agent's own")
        if keys.count(key) > 1:
            raise RegistryError(f"extension {ext.name!r} defines section {key!r} twice")
    tasks = [t.name for t in ext.tasks]
    for task in tasks:
        if task in RESERVED_TASKS:
            raise RegistryError(f"task name {task!r} is reserved for a built-in task")
        if tasks.count(task) > 1:
            raise RegistryError(f"extension {ext.name!r} defines task {task!r} twice")
    sources = [s.name for s in ext.sources]
    dupes = sorted({n for n in sources if sources.count(n) > 1})
    if dupes:
        raise RegistryError(f"extension {ext.name!r} defines tool source(s) {dupes} twice")


@readonly(slots=False)
class ResolvedAgent:
    """An agent document resolved against one registry snapshot."""

    model: str | None
    thinking: str
    instructions: str | None
    cwd: str | None
    tools: Mapping[str, ToolDefinition]
    sections: tuple[Section, ...]
    hooks: tuple[Hooks, ...]
    extensions: tuple[str, ...]
    sources: tuple[ToolSource, ...] = ()
    """The selected extensions' tool sources; their tools are not in ``tools`` until
    the harness adds them from the conversation's listings."""


class Registry:
    """Installed extensions, in install order (a replacement keeps its position)."""

    def __init__(self, extensions: Sequence[Extension] = ()) -> None:
        self._extensions: tuple[Extension, ...] = ()
        self._listeners: list[Callable[[], None]] = []
        for ext in extensions:
            self.install(ext)

    @property
    def extensions(self) -> tuple[Extension, ...]:
        """An immutable snapshot: later installs do not change it."""
        return self._extensions

    def install(self, extension: Extension) -> None:
        _validate_extension(extension)
        current = list(self._extensions)
        for i, ext in enumerate(current):
            if ext.name == extension.name:
                current[i] = extension
                break
        else:
            current.append(extension)
        owners: dict[str, str] = {}
        for ext in current:
            for task in ext.tasks:
                if task.name in owners:
                    raise RegistryError(
                        f"task {task.name!r} is defined by both {owners[task.name]!r} "
                        f"and {ext.name!r}"
                    )
                owners[task.name] = ext.name
        self._extensions = tuple(current)
        self._changed()

    def uninstall(self, name: str) -> None:
        remaining = tuple(e for e in self._extensions if e.name != name)
        if len(remaining) != len(self._extensions):
            self._extensions = remaining
            self._changed()

    def task(self, name: str) -> TaskDefinition | None:
        for ext in self._extensions:
            for task in ext.tasks:
                if task.name == name:
                    return task
        return None

    def document(self, kind: str) -> DocDefinition[Any] | None:
        """The document definition an installed extension registered for ``kind``."""
        for ext in reversed(self._extensions):
            for doc in ext.documents:
                if doc.kind == kind:
                    return doc
        return None

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def tool_names(self) -> set[str]:
        return {t.name for e in self._extensions for t in e.tools}

    def resolve(self, agent: Mapping[str, JsonValue]) -> ResolvedAgent:
        """Resolve an ``agent`` document: extensions selected by name (all when unset,
        missing ones skipped), later extensions' tools replacing earlier ones of the same
        name, wrappers applied to the winners, then the agent's tool filter."""
        selected_names = agent.get("extensions")
        if isinstance(selected_names, list):
            by_name = {e.name: e for e in self._extensions}
            selected = [by_name[n] for n in selected_names if isinstance(n, str) and n in by_name]
        else:
            selected = list(self._extensions)
        tools: dict[str, ToolDefinition] = {}
        sections: dict[str, Section] = {}
        hooks: list[Hooks] = []
        sources: dict[str, ToolSource] = {}
        for ext in selected:
            for source in ext.sources:
                sources[source.name] = source
            for tool in ext.tools:
                tools[tool.name] = tool
            for sec in ext.sections:
                sections[sec.key] = sec
            if ext.hooks is not None:
                hooks.append(ext.hooks)
        for ext in selected:
            for name, wrap in ext.wraps.items():
                if name in tools:
                    tools[name] = wrap(tools[name])
        allowed = agent.get("tools")
        if isinstance(allowed, list):
            tools = {n: tools[n] for n in allowed if isinstance(n, str) and n in tools}
        model = agent.get("model")
        thinking = agent.get("thinking")
        instructions = agent.get("instructions")
        cwd = agent.get("cwd")
        return ResolvedAgent(
            model=model if isinstance(model, str) else None,
            thinking=thinking if isinstance(thinking, str) else "off",
            instructions=instructions if isinstance(instructions, str) else None,
            cwd=cwd if isinstance(cwd, str) else None,
            tools=tools,
            sections=tuple(sections.values()),
            hooks=tuple(hooks),
            extensions=tuple(e.name for e in selected),
            sources=tuple(sources.values()),
        )

    def _changed(self) -> None:
        for listener in list(self._listeners):
            listener()
