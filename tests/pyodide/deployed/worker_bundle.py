"""The built Worker directory booted as deployed (run by ``tests/pyodide/run.py``).

``runner.mjs`` starts this Pyodide with ``sys.path`` = the bundle's ``src`` (the entry
module and the project's sources), its ``python_modules`` (the vendored wheels) and this
directory: nothing of the repository, no wheel loaded by the runner. So everything the
Worker imports here comes from what ``infra/cloudflare/build.py`` put in the bundle, as
in workerd; a module the build left out fails here. Only the JS stand-ins (the Durable
Object state, ``WebSocketPair``) come from the test.

Through the entry module's front door (``entry.Default``), over a namespace stand-in that
routes ``getByName(actor)`` to the entry's ``PerdureActor`` on a durable home per actor:
a submission and its answer (the model: the OpenAI-compatible adapter over ``fetch`` to
a scripted server on 127.0.0.1, configured from the Worker's vars and secrets alone);
a reminder that arms the alarm, an eviction, the alarm on a new instance, and the
reminder's answer; a half configuration refused with ``503 misconfigured`` naming
the variable, logged once, no Durable Object addressed; and the web inspector's page and
files served from the bundle's package data. Over an index namespace stand-in
(``env.ACTOR_INDEX``: the entry's ``PerdureActorIndex`` objects, called as RPC stubs are):
actors created through the front door are listed by ``GET /v1/actors`` from the index
objects alone, paged, none listed for a refused request, a scoped token refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import sys
import time
import traceback
from typing import Any

TOKEN = "bundle-token-0123456789"
ACTOR = "bundle-a"


def _js(value: dict[str, Any]) -> Any:
    from js import Object  # type: ignore[import-not-found]
    from pyodide.ffi import to_js  # type: ignore[import-not-found]

    return to_js(value, dict_converter=Object.fromEntries)


def _request(method: str, path: str, body: Any = None, token: str = TOKEN) -> Any:
    from js import Request  # type: ignore[import-not-found]

    init: dict[str, Any] = {"method": method, "headers": {"authorization": f"Bearer {token}"}}
    if body is not None:
        init["headers"]["content-type"] = "application/json"
        init["body"] = json.dumps(body)
    return Request.new(f"https://perdure.example{path}", _js(init))


class Namespace:
    """``env.ACTORS`` as the front door sees it: ``getByName(actor)`` gives a stub whose
    ``fetch`` reaches the object's live instance, made from the entry's class on the
    actor's durable home (its SQLite file and alarm) when there is none (first use, or
    after :meth:`evict`)."""

    def __init__(self, scratch: str, cls: Any) -> None:
        self.scratch = scratch
        self.cls = cls
        self.env: Any = None
        self.homes: dict[str, Any] = {}
        self.live: dict[str, Any] = {}
        self.addressed: list[str] = []

    def getByName(self, name: str) -> Any:  # the binding's JS name
        self.addressed.append(name)
        return _Stub(self, name)

    def instance(self, name: str) -> Any:
        from perdure_do_standin import DurableObjectHome  # type: ignore[import-not-found]

        if name not in self.homes:
            self.homes[name] = DurableObjectHome.new(f"{self.scratch}/bundle-{name}.sqlite", name)
        if name not in self.live:
            self.live[name] = self.cls(self.homes[name].open(), self.env)
        return self.live[name]

    async def evict(self, name: str) -> None:
        """The isolate is gone: the instance is dropped (its harness closed, as nothing
        of it survives), the home stays."""
        obj = self.live.pop(name)
        with contextlib.suppress(Exception):
            await obj.host.close()

    async def fire_alarm(self, name: str) -> None:
        """workerd's delivery: the alarm is cleared, then ``alarm()`` on the (new)
        instance."""
        self.homes[name].alarm = None
        await self.instance(name).alarm(_js({"retryCount": 0, "isRetry": False}))


class _Stub:
    def __init__(self, namespace: Namespace, name: str) -> None:
        self.namespace = namespace
        self.name = name

    async def fetch(self, request: Any) -> Any:
        return await self.namespace.instance(self.name).fetch(request)


class IndexNamespace:
    """``env.ACTOR_INDEX``: ``getByName(shard)`` gives a stub whose RPC methods (``add``,
    ``names``) reach the index object's live instance, made from the entry's class on
    its own durable home."""

    def __init__(self, scratch: str, cls: Any) -> None:
        self.scratch = scratch
        self.cls = cls
        self.homes: dict[str, Any] = {}
        self.live: dict[str, Any] = {}
        self.calls: list[str] = []

    def getByName(self, name: str) -> Any:  # the binding's JS name
        return _IndexStub(self, name)

    def instance(self, name: str) -> Any:
        from perdure_do_standin import DurableObjectHome  # type: ignore[import-not-found]

        if name not in self.homes:
            self.homes[name] = DurableObjectHome.new(f"{self.scratch}/index-{name}.sqlite", name)
        if name not in self.live:
            self.live[name] = self.cls(self.homes[name].open(), _js({}))
        return self.live[name]


class _IndexStub:
    def __init__(self, namespace: IndexNamespace, name: str) -> None:
        self.namespace = namespace
        self.name = name

    async def add(self, actor: str) -> Any:
        self.namespace.calls.append(f"add {actor}")
        return await self.namespace.instance(self.name).add(actor)

    async def names(self, after: str, limit: int) -> Any:
        self.namespace.calls.append("names")
        return await self.namespace.instance(self.name).names(after, limit)


async def _call(
    door: Any, method: str, path: str, body: Any = None, token: str = TOKEN
) -> tuple[int, Any]:
    response = await door.fetch(_request(method, path, body, token))
    text = await response.text()
    return int(response.status), json.loads(text) if text else None


async def _settled(door: Any, sid: int) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status, state = await _call(door, "GET", f"/v1/actors/{ACTOR}/submissions/{sid}?wait=2")
        assert status == 200, (status, state)
        if state["status"] in ("done", "unanswered"):
            return dict(state)
    raise AssertionError(f"submission {sid} did not settle")


def _imported_from_the_bundle() -> dict[str, str]:
    import entry  # type: ignore[import-not-found]
    import fastapi
    import pydantic
    import pydantic_core
    import workers  # type: ignore[import-not-found]

    import core

    modules = (entry, core, pydantic, pydantic_core, fastapi, workers)
    where = {m.__name__: str(m.__file__) for m in modules}
    assert where["entry"] == "/bundle/src/entry.py", where
    assert where["core"].startswith("/bundle/src/"), where
    for name in ("pydantic", "pydantic_core", "fastapi", "workers"):
        assert where[name].startswith("/bundle/python_modules/"), where
    assert not [p for p in sys.path if p.startswith("/perdure")], sys.path
    return where


async def served_from_the_bundle(options: dict[str, Any]) -> dict[str, Any]:
    where = _imported_from_the_bundle()
    import entry  # type: ignore[import-not-found]

    namespace = Namespace(options["scratch"], entry.PerdureActor)
    env = _js(
        {
            "ACTORS": namespace,
            "PERDURE_API_TOKEN": TOKEN,
            "PERDURE_MODEL": "gpt-bundle",
            "PERDURE_MODEL_BASE_URL": options["openai_base_url"],
            "PERDURE_MODEL_API_KEY": "sk-bundle",
        }
    )
    namespace.env = env
    door = entry.Default(_js({}), env)
    base = f"/v1/actors/{ACTOR}"

    status, accepted = await _call(
        door, "POST", f"{base}/submissions", {"type": "input", "content": "hello"}
    )
    assert status == 202, (status, accepted)
    state = await _settled(door, accepted["id"])
    assert state["status"] == "done", state
    assert state["answer"]["text"] == "Hello from the bundle", state

    status, reminder = await _call(
        door, "POST", f"{base}/conversations/1/reminders", {"message": "ping", "after": 0.3}
    )
    assert status == 201, (status, reminder)
    home = namespace.homes[ACTOR]
    await namespace.live[ACTOR].host.settle()
    assert home.alarm == reminder["at"], (home.alarm, reminder)  # armed for the reminder

    await namespace.evict(ACTOR)  # idle: the isolate goes, the alarm stays
    await asyncio.sleep(max(0.0, (reminder["at"] - time.time() * 1000) / 1000) + 0.05)
    await namespace.fire_alarm(ACTOR)  # a new instance, woken by the alarm alone
    answers: list[str] = []
    deadline = time.monotonic() + 60  # generous: a loaded 2-core machine, a real server
    while time.monotonic() < deadline:
        status, view = await _call(door, "GET", f"{base}/conversations/1/view")
        assert status == 200, (status, view)
        entries = view["entries"]
        users = [str(e["message"]["content"]) for e in entries if e["kind"] == "user"]
        answers = [
            str(part.get("text", ""))
            for e in entries
            if e["kind"] == "assistant"
            for part in e["message"]["content"]
        ]
        if any("ping" in u for u in users) and "pong" in answers:
            break
        await asyncio.sleep(0.02)
    assert "pong" in answers, view
    await namespace.live[ACTOR].host.settle()
    await namespace.evict(ACTOR)
    return {"answer": state["answer"]["text"], "after_reminder": answers[-1], **where}


async def half_configuration_is_refused(options: dict[str, Any]) -> dict[str, Any]:
    """The sandbox secret without its URL: every request answers 503 ``misconfigured``
    naming ``PERDURE_SANDBOX_URL``; the Worker's log says so once; no object is
    addressed."""
    import entry  # type: ignore[import-not-found]

    namespace = Namespace(options["scratch"], entry.PerdureActor)
    env = _js(
        {
            "ACTORS": namespace,
            "PERDURE_API_TOKEN": TOKEN,
            "PERDURE_MODEL": "gpt-bundle",
            "PERDURE_MODEL_BASE_URL": options["openai_base_url"],
            "PERDURE_MODEL_API_KEY": "sk-bundle",
            "PERDURE_SANDBOX_SECRET": "s" * 32,
        }
    )
    door = entry.Default(_js({}), env)
    log = io.StringIO()
    bodies = []
    with contextlib.redirect_stderr(log):
        for _ in range(2):
            status, body = await _call(door, "GET", f"/v1/actors/{ACTOR}/tasks")
            assert status == 503, (status, body)
            bodies.append(body)
    for body in bodies:
        assert body["error"]["code"] == "misconfigured", body
        assert "PERDURE_SANDBOX_URL" in body["error"]["message"], body
    lines = [line for line in log.getvalue().splitlines() if "misconfigured" in line]
    assert len(lines) == 1 and "PERDURE_SANDBOX_URL" in lines[0], log.getvalue()
    assert "s" * 32 not in log.getvalue() + json.dumps(bodies)  # the secret is never shown
    assert namespace.addressed == [], namespace.addressed
    return {"message": bodies[0]["error"]["message"], "log": lines[0]}


async def listed_from_the_index(options: dict[str, Any]) -> dict[str, Any]:
    """Actors created through the front door are listed from the index objects: each
    actor's object adds its actor after its first commit; the listing reads the 16 index
    objects and addresses no actor's object; a refused first request lists nothing."""
    import entry  # type: ignore[import-not-found]

    namespace = Namespace(options["scratch"], entry.PerdureActor)
    index = IndexNamespace(options["scratch"], entry.PerdureActorIndex)
    env = _js(
        {
            "ACTORS": namespace,
            "ACTOR_INDEX": index,
            "PERDURE_API_TOKEN": TOKEN,
            "PERDURE_MODEL": "gpt-bundle",
            "PERDURE_MODEL_BASE_URL": options["openai_base_url"],
            "PERDURE_MODEL_API_KEY": "sk-bundle",
        }
    )
    namespace.env = env
    door = entry.Default(_js({}), env)
    names = [f"listed-{n}" for n in range(5)]
    for name in names:
        status, body = await _call(
            door,
            "POST",
            f"/v1/actors/{name}/submissions",
            {"type": "write", "content": {"kind": "note"}},
        )
        assert status == 202, (status, body)
    # Refused by the actor's object, after it opened: nothing is committed, nothing listed.
    status, body = await _call(
        door,
        "POST",
        "/v1/actors/listed-refused/submissions",
        {"type": "input", "content": "x", "conversation_id": 99},
    )
    assert 400 <= status < 500, (status, body)
    addressed = list(namespace.addressed)
    listed: list[str] = []
    after = ""
    while True:
        status, page = await _call(door, "GET", f"/v1/actors?limit=2{after}")
        assert status == 200, (status, page)
        listed += [a["id"] for a in page["actors"]]
        if page["next_after"] is None:
            break
        after = f"&after={page['next_after']}"
    assert listed == names, listed
    assert namespace.addressed == addressed  # the listing woke no actor's object
    status, body = await _call(door, "GET", "/v1/actors?limit=0")
    assert status == 422 and body["error"]["code"] == "invalid", (status, body)
    from runtimes.actor.tokens import SigningKeys

    scoped = SigningKeys.for_host(TOKEN).mint(names[0], "admin", 600)
    status, body = await _call(door, "GET", "/v1/actors", token=scoped)
    assert status == 403 and body["error"]["code"] == "forbidden", (status, body)
    for name in names:
        with contextlib.suppress(Exception):
            await namespace.evict(name)
    return {"listed": len(listed), "index_objects": len(index.live)}


async def the_inspector_is_served_from_the_bundle(options: dict[str, Any]) -> dict[str, Any]:
    """``/ui`` and its files through the entry's front door, from the package data the
    build copied: the page and its scripts with their CSP, ``/`` sent to it; answered
    without any Durable Object addressed (even before the token is known)."""
    import entry  # type: ignore[import-not-found]

    namespace = Namespace(options["scratch"], entry.PerdureActor)
    env = _js({"ACTORS": namespace})  # nothing configured: the page is still served
    door = entry.Default(_js({}), env)
    sizes = {}
    for path, kind in (
        ("/ui", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/api.js", "text/javascript"),
        ("/ui/inspector.css", "text/css"),
        ("/ui/favicon.svg", "image/svg+xml"),
    ):
        response = await door.fetch(_request("GET", path, token=""))
        body = await response.text()
        assert int(response.status) == 200, (path, response.status, body)
        assert str(response.headers.get("content-type")).startswith(kind), path
        assert "script-src 'self'" in str(response.headers.get("content-security-policy"))
        sizes[path] = len(body)
    page = await (await door.fetch(_request("GET", "/ui", token=""))).text()
    assert '<script type="module" src="/ui/app.js">' in page, page[:300]
    home = await door.fetch(_request("GET", "/", token=""))
    assert int(home.status) == 307 and str(home.headers.get("location")) == "ui"
    missing = await door.fetch(_request("GET", "/ui/nope.js", token=""))
    assert int(missing.status) == 404
    assert namespace.addressed == [], namespace.addressed
    return {"bytes": sizes}


CHECKS = (
    served_from_the_bundle,
    half_configuration_is_refused,
    the_inspector_is_served_from_the_bundle,
    listed_from_the_index,
)


async def main(options: Any) -> dict[str, Any]:
    opts: dict[str, Any] = options.to_py() if hasattr(options, "to_py") else dict(options)
    out: dict[str, Any] = {"ok": True, "checks": {}, "failures": {}}
    for check in CHECKS:
        started = time.perf_counter()
        try:
            result = await check(opts)
        except BaseException:
            out["ok"] = False
            out["failures"][check.__name__] = traceback.format_exc()
            continue
        out["checks"][check.__name__] = {"ms": (time.perf_counter() - started) * 1000, **result}
    return out
