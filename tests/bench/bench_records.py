"""Records: frozen dataclasses vs pydantic models, on what the commit path does.

Run: ``python tests/bench/bench_records.py``. Each row is microseconds per operation
for a task record shaped like the kernel's (nested state, JSON payloads).
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from core.jsonvalue import dumps, json_copy, loads
from core.records import Running, Task, task_from_json


class PRunning(BaseModel):
    model_config = ConfigDict(frozen=True)
    status: Literal["running"] = "running"
    checkpoint: dict[str, Any]


class PTask(BaseModel):
    model_config = ConfigDict(frozen=True)
    id: int
    conversation_id: int
    kind: str
    version: int
    input: Any
    state: PRunning
    owner: int | None = None
    background: bool = False
    abort_requested: bool = False
    started_at: int | None = None
    ended_at: int | None = None
    memos: dict[str, Any] = {}


def main() -> None:
    payload = {"prompt": "x" * 64, "n": 3, "tags": ["a", "b"]}
    checkpoint = {"phase": "request", "attempt": 1, "model": "faux/faux-1"}
    dc = Task(7, 1, "pi.generation", 1, payload, Running(checkpoint), memos={"m": 1})
    pm = PTask(
        id=7,
        conversation_id=1,
        kind="pi.generation",
        version=1,
        input=payload,
        state=PRunning(checkpoint=checkpoint),
        memos={"m": 1},
    )
    as_json = dc.to_json()
    text = dumps(as_json)

    cases = [
        (
            "build",
            lambda: Task(7, 1, "k", 1, payload, Running(checkpoint)),
            lambda: PTask(
                id=7,
                conversation_id=1,
                kind="k",
                version=1,
                input=payload,
                state=PRunning(checkpoint=checkpoint),
            ),
        ),
        (
            "copy with one change",
            lambda: dc.evolve(abort_requested=True),
            lambda: pm.model_copy(update={"abort_requested": True}),
        ),
        ("to JSON text", lambda: dumps(dc.to_json()), lambda: pm.model_dump_json()),
        (
            "from JSON text",
            lambda: task_from_json(loads(text)),
            lambda: PTask.model_validate_json(text),
        ),
        # What one task write costs the session: copy with a new state, check the
        # payloads are JSON (pydantic's Any accepts tuples and NaN, so both need it), encode.
        (
            "commit path",
            lambda: dumps(
                dc.evolve(state=Running(json_copy(checkpoint)), input=json_copy(dc.input)).to_json()  # type: ignore[arg-type]
            ),
            lambda: pm.model_copy(
                update={
                    "state": PRunning(checkpoint=json_copy(checkpoint)),  # type: ignore[arg-type]
                    "input": json_copy(pm.input),
                }
            ).model_dump_json(),
        ),
    ]
    n = 20_000
    print(f"{'operation':<24} {'dataclass µs':>13} {'pydantic µs':>12} {'ratio':>7}")
    for name, fast, slow in cases:
        a = min(timeit.repeat(fast, number=n, repeat=3)) / n * 1e6
        b = min(timeit.repeat(slow, number=n, repeat=3)) / n * 1e6
        print(f"{name:<24} {a:>13.2f} {b:>12.2f} {b / a:>6.1f}x")


if __name__ == "__main__":
    main()
