"""The checkout example: four payments under a fail_fast wait, compensation, a restart.

A checkout task charges four cards in parallel, each in a child payment task, and waits
``fail_fast``. A declined card fails its payment; the scheduler marks the other payments
for abort; their abort handlers run (before the checkout's) and refund what they charged.
The bank stands for the outside world: it survives restarts and honours idempotency
keys, which is what makes rerunning a payment after a crash safe.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.records import Aborted, Completed, Failed, Task, Terminal, Waiting
from core.session import Tx
from core.storage import TaskQuery
from core.tasks import TaskRuntime, define_task
from tests.core.support import World, until


@dataclass
class Bank:
    charges: dict[str, int] = field(default_factory=dict)
    refunds: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    declined: set[str] = field(default_factory=set)
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    decline: asyncio.Event = field(default_factory=asyncio.Event)

    async def charge(self, key: str, card: str, amount: int) -> bool:
        """Take the money at once (idempotent on the key), confirm after a while."""
        self.calls.append(key)
        if card in self.declined:
            await self.decline.wait()
            return False
        self.charges.setdefault(key, amount)
        await self.gate.wait()
        return True

    def refund(self, key: str) -> None:
        if key in self.charges:
            self.refunds.append(key)


def definitions(bank: Bank) -> list[Any]:
    async def charge(task: Task, rt: TaskRuntime) -> None:
        card = str(task.input["card"])  # type: ignore[index,call-overload]
        if await bank.charge(f"payment-{task.id}", card, 25):
            await rt.complete({"card": card})
        else:
            await rt.fail("card declined", {"card": card})

    async def refund(task: Task, rt: TaskRuntime) -> None:
        bank.refund(f"payment-{task.id}")
        await rt.abort("refunded")

    async def start(task: Task, rt: TaskRuntime) -> None:
        async def spawn(tx: Tx, current: Task) -> Waiting:
            ids = [
                (await tx.create_task("shop.payment", {"card": c}, owner=current.id)).id
                for c in task.input["cards"]  # type: ignore[index,union-attr,call-overload]
            ]
            return Waiting({"phase": "join", "payments": ids}, tuple(ids), "fail_fast")

        await rt.commit(spawn)

    async def join(task: Task, rt: TaskRuntime) -> None:
        outcomes = await rt.outcomes(task.checkpoint["payments"])  # type: ignore[arg-type,index]
        if all(isinstance(o, Completed) for o in outcomes.values()):
            await rt.complete("paid")
        else:
            await rt.fail("a card was declined")

    return [
        define_task("shop.payment", phases={"charge": charge}, abort=refund),
        define_task("shop.checkout", phases={"start": start, "join": join}),
    ]


async def test_a_declined_card_fails_the_checkout_and_refunds_the_others_across_a_restart(
    tmp_path: Path,
) -> None:
    bank = Bank(declined={"card-3"})
    world = World(tmp_path, "sqlite")
    engine = await world.open(*definitions(bank))
    checkout = await engine.create_task(
        "shop.checkout", {"cards": ["card-1", "card-2", "card-3", "card-4"]}
    )
    await until(lambda: len(bank.calls) == 4)  # all four payments are at the bank
    await world.crash(engine)  # ...when the process dies

    engine = await world.open(*definitions(bank))
    bank.decline.set()  # the bank now declines card-3; the others are still unconfirmed
    done = await engine.wait_for_task(checkout.id)
    assert isinstance(done.state, Terminal) and isinstance(done.state.outcome, Failed)
    payments = (await engine.session.storage.scan_tasks(TaskQuery(kind="shop.payment"))).items
    by_card = {p.input["card"]: p for p in payments}  # type: ignore[index,call-overload]
    assert isinstance(by_card.pop("card-3").outcome, Failed)
    # The other three were charged (once each, although they ran again after the restart),
    # then aborted by the fail_fast wait and refunded by their abort handlers.
    assert all(p.outcome == Aborted("refunded") for p in by_card.values())
    assert sorted(bank.refunds) == sorted(f"payment-{p.id}" for p in by_card.values())
    assert len(bank.charges) == 3
    assert len(bank.calls) == 8  # four calls before the crash, four after
    await engine.close()


async def test_the_checkout_succeeds_when_every_card_is_accepted(tmp_path: Path) -> None:
    bank = Bank()
    bank.gate.set()
    bank.decline.set()
    world = World(tmp_path)
    engine = await world.open(*definitions(bank))
    checkout = await engine.create_task("shop.checkout", {"cards": ["a", "b", "c", "d"]})
    done = await engine.wait_for_task(checkout.id)
    assert done.state == Terminal(Completed("paid"))
    assert bank.refunds == [] and len(bank.charges) == 4
    await engine.close()
