"""The soak's steady load, as its own process on loopback:
``python -m tests.recovery.local.soak_load URL OUT STOP --actors N --workers W [--fresh-every K]``.

Each worker submits inputs to one actor, one at a time (alternately plain text and one
tool round), each with a fresh request id; with ``--fresh-every K`` every K-th goes to a
new actor instead (a new actor's first input: the one the host may journal), and
long-polls it until it settles (by its id, or by its request id when it was answered
``mailed``, with no id yet). A refused connection or a 5xx (the host is being killed and
restarted) is retried with the *same* request id, which is how a client gets
exactly-once through crashes. Every finished input is one JSON line in ``OUT``: request id,
actor, submission id, status, answer text, first send and settle times (epoch seconds).
When the file ``STOP`` appears, workers finish the input they have and stop; the last
line is a summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx

from tests.local.support import TOKEN

_RETRY_S = 0.05


async def _call(client: httpx.AsyncClient, method: str, url: str, **kwargs: Any) -> httpx.Response:
    """One request, retried while the host is down or restarting (and only then)."""
    while True:
        try:
            r = await client.request(method, url, **kwargs)
        except httpx.TransportError:
            await asyncio.sleep(_RETRY_S)
            continue
        if r.status_code >= 500 or r.status_code in (409, 423, 503):
            await asyncio.sleep(_RETRY_S)
            continue
        return r


async def worker(
    n: int,
    base: str,
    actors: int,
    out: Any,
    stop: Path,
    counts: dict[str, int],
    fresh_every: int = 0,
) -> None:
    own = f"soak-{n % actors}"
    headers = {"authorization": f"Bearer {TOKEN}"}
    timeout = httpx.Timeout(15.0, connect=2.0)
    seq = 0
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=timeout) as client:
        while not stop.exists():  # noqa: ASYNC240 - a stat per input, from another process
            seq += 1
            rid = f"load-{n}-{seq}"
            actor = f"fresh-{n}-{seq}" if fresh_every and seq % fresh_every == 0 else own
            content = "tools:1" if seq % 2 else f"hello {rid}"
            sent = time.time()
            body = {"type": "input", "content": content, "request_id": rid}
            r = await _call(client, "POST", f"/v1/actors/{actor}/submissions", json=body)
            if r.status_code != 202:
                counts["refused"] += 1
                out.write(json.dumps({"rid": rid, "refused": r.status_code, "body": r.text}))
                out.write("\n")
                continue
            sid = r.json()["id"]
            counts["accepted"] += 1
            out.write(json.dumps({"rid": rid, "actor": actor, "accepted": sid}) + "\n")
            out.flush()
            # A mailed answer (a new actor's first input, accepted into the host's
            # admission journal) has no id yet: it is polled by its request id.
            poll = (
                f"/v1/actors/{actor}/submissions/{sid}?wait=5"
                if sid is not None
                else f"/v1/actors/{actor}/conversations/1/submissions/by-request"
                f"?request_id={rid}&wait=5"
            )
            while True:
                r = await _call(client, "GET", poll)
                if r.status_code != 200:
                    raise RuntimeError(f"GET {poll}: {r.status_code} {r.text}")
                state = r.json()
                if state["status"] in ("done", "unanswered"):
                    break
                if state["status"] == "mailed":
                    await asyncio.sleep(_RETRY_S)  # not moved yet: the host retries it
            counts["settled"] += 1
            out.write(
                json.dumps(
                    {
                        "rid": rid,
                        "actor": actor,
                        "id": state["id"],
                        "content": content,
                        "status": state["status"],
                        "answer": state.get("answer"),
                        "sent": sent,
                        "settled": time.time(),
                    }
                )
                + "\n"
            )
            out.flush()


async def main(
    url: str, out_path: Path, stop: Path, actors: int, workers: int, fresh_every: int
) -> None:
    counts = {"accepted": 0, "settled": 0, "refused": 0}
    with out_path.open("a") as out:
        await asyncio.gather(
            *(worker(n, url, actors, out, stop, counts, fresh_every) for n in range(workers))
        )
        out.write(json.dumps({"summary": counts}) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("out", type=Path)
    parser.add_argument("stop", type=Path)
    parser.add_argument("--actors", type=int, default=4)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--fresh-every", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(main(args.url, args.out, args.stop, args.actors, args.workers, args.fresh_every))
