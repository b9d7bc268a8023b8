"""The built Worker served over HTTP from Pyodide (run by ``tests/browser/test_worker_host.py``).

Booted by ``runner.mjs`` from the bundle as :mod:`worker_bundle` is (only the bundle's
``src`` and ``python_modules`` on the path), with the same Durable Object namespace
stand-in; Node listens on ``options["port"]`` and hands every request to the entry's
front door (``entry.Default.fetch``), so a browser talks to the Worker as deployed: the
inspector's files from the bundle, the API through the front door to the object, the
watch's SSE streamed through the SDK's ASGI bridge. Serves until the process is ended.
"""

from __future__ import annotations

import asyncio
from typing import Any

from worker_bundle import Namespace, _js  # type: ignore[import-not-found]


async def main(options: Any) -> dict[str, Any]:
    opts: dict[str, Any] = options.to_py() if hasattr(options, "to_py") else dict(options)
    import entry  # type: ignore[import-not-found]
    from perdure_http_bridge import serve  # type: ignore[import-not-found]
    from pyodide.ffi import create_proxy  # type: ignore[import-not-found]

    namespace = Namespace(opts["scratch"], entry.PerdureActor)
    env = _js(
        {
            "ACTORS": namespace,
            "PERDURE_API_TOKEN": opts["token"],
            "PERDURE_MODEL": "gpt-browser",
            "PERDURE_MODEL_BASE_URL": opts["openai_base_url"],
            "PERDURE_MODEL_API_KEY": "sk-browser",
        }
    )
    namespace.env = env
    door = entry.Default(_js({}), env)

    async def fetch(request: Any) -> Any:
        response = await door.fetch(request)
        return getattr(response, "js_object", response)  # the SDK's wrapper, unwrapped

    handler = create_proxy(fetch)
    port = await serve(handler, int(opts["port"]))
    print(f"LISTENING {port}", flush=True)
    await asyncio.Future()  # serves until the process is ended (the test terminates it)
    return {"ok": True}
