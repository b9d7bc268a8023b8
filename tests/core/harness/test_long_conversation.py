"""A 50,000-message conversation with automatic compaction keeps resident memory flat and
every request inside the model's window (issue 4). Slow: run by ``.ci/run`` with
``pytest -m slow``; ``PERDURE_LONG_MESSAGES`` scales it down for a quick look."""

from __future__ import annotations

import gc
import os
import time
from pathlib import Path

import pytest

from core.faux import FauxModel, FauxState, FauxStep, faux_message
from core.harness import (
    CompactionSettings,
    Harness,
    HarnessSettings,
    ModelRequest,
    Registry,
    SystemMessage,
)
from core.harness.compaction import COMPACTION, SUMMARY_PROMPT, estimate_tokens
from core.harness.models import ModelInfo
from core.storage import TaskQuery
from core.testing.clock import VirtualClock
from runtimes.local.sqlite import open_sqlite_storage

WINDOW = ModelInfo("faux/window-20k", context_window=20_000, max_tokens=2_000)
SETTINGS = HarnessSettings(
    compaction=CompactionSettings(
        reserve_tokens=2_000, keep_recent_tokens=3_000, background_tokens=4_000
    )
)
MESSAGES = int(os.environ.get("PERDURE_LONG_MESSAGES", "50000"))
EARLY = MESSAGES // 10
TEXT = "Tell me about durable agents, message number {n}. " * 4  # ~200 characters


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


@pytest.mark.slow
@pytest.mark.timeout(3600)
async def test_a_50k_message_conversation_keeps_memory_flat(tmp_path: Path) -> None:
    largest = 0
    summaries = 0

    def answer(request: ModelRequest, state: FauxState) -> FauxStep:
        nonlocal largest, summaries
        first = request.messages[0] if request.messages else None
        if isinstance(first, SystemMessage) and first.content == SUMMARY_PROMPT:
            summaries += 1
            return faux_message(f"Summary {summaries}: the user keeps asking about agents.")
        largest = max(largest, sum(estimate_tokens(m) for m in request.messages))
        return faux_message("Durable agents checkpoint every step. " * 5)

    faux = FauxModel(fallback=answer, record_requests=False, models=[WINDOW], token_size=10_000)
    storage = await open_sqlite_storage(tmp_path / "actor.sqlite")
    h = await Harness.open(
        storage, models=faux, registry=Registry(), settings=SETTINGS, clock=VirtualClock()
    )
    root = await h.root(agent={"model": WINDOW.id})
    early_rss = 0.0
    started = time.perf_counter()
    for n in range(MESSAGES // 2):  # each round is a user message and an answer
        record = await (await root.submit(TEXT.format(n=n))).wait()
        assert record.status == "done", record
        if 2 * (n + 1) == EARLY:
            gc.collect()
            early_rss = rss_mb()
    await root.wait_for_idle()
    gc.collect()
    late_rss = rss_mb()
    elapsed = time.perf_counter() - started
    compactions = await h.session.storage.scan_tasks(TaskQuery(kind=COMPACTION, limit=1000))
    await h.close()
    print(
        f"\n{MESSAGES} messages in {elapsed:.1f} s; RSS after {EARLY}: {early_rss:.1f} MB, "
        f"after {MESSAGES}: {late_rss:.1f} MB (growth {late_rss - early_rss:+.1f} MB); "
        f"{summaries} summaries; largest request ≈{largest} tokens of {WINDOW.context_window}"
    )
    assert compactions.items and summaries > 0
    assert largest < WINDOW.context_window
    assert late_rss - early_rss <= 30
