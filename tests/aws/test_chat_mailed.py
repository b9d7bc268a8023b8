"""``perdure chat`` against the AWS host's front door: a line typed while another
invocation holds the actor is mailed (``id`` null), and the chat says so instead of
failing on the missing id."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

from rich.console import Console

from core.testing import VirtualClock
from runtimes.actor.testing import KIT_TOKEN, kit_config
from runtimes.aws import AwsResources
from runtimes.aws.mailbox import Mailbox
from runtimes.cli.chat import Chat, ChatOptions, Screen
from runtimes.client import ActorClient
from tests.aws.aws_target import AwsTarget, LeaseClock, create_alarms


async def test_a_mailed_line_is_told_not_crashed_on(aws: AwsResources, tmp_path: Path) -> None:
    lease = LeaseClock()
    target = AwsTarget(aws, create_alarms(lease.now), tmp_path, lease)
    transport = target.front_door(kit_config(), VirtualClock())
    out = io.StringIO()
    screen = Screen(Console(file=out, width=200, color_system=None, soft_wrap=True))
    holder = target.host(kit_config(), VirtualClock())
    await holder.start()
    try:
        async with (
            ActorClient("http://lambda", KIT_TOKEN, transport=transport) as client,
            holder.use("chat-m", create=True) as harness,
        ):
            await harness.root(agent=dict(kit_config().default_agent))
            chat = Chat(
                ChatOptions(url="http://lambda", token=KIT_TOKEN, actor="chat-m"), client, screen
            )
            await chat._submit("hello")
            assert "(mailed: accepted; the actor takes it up next)" in out.getvalue()
            assert not chat.awaiting
            assert [m.body["content"] for m in await Mailbox(aws).pending("chat-m")] == ["hello"]
    finally:
        await holder.close()


async def test_the_chat_follows_an_actor_on_lambda_by_the_long_poll(
    aws: AwsResources, tmp_path: Path
) -> None:
    """Lambda cannot stream: the watch route says so at once (``501``), and the chat's
    watch falls back to the long poll and shows the conversation all the same."""
    lease = LeaseClock()
    target = AwsTarget(aws, create_alarms(lease.now), tmp_path, lease)
    transport = target.front_door(kit_config(), VirtualClock())
    out = io.StringIO()
    screen = Screen(Console(file=out, width=200, color_system=None, soft_wrap=True))
    async with ActorClient(
        "http://lambda", KIT_TOKEN, transport=transport, poll_wait_s=0.5
    ) as client:
        await client.ask("chat-w", "hello", timeout=30)
        # The stream is refused at once (it would be held until the deadline otherwise).
        path = "/v1/actors/chat-w/conversations/1/watch"
        refused = await asyncio.wait_for(client.http.get(path), 10)
        assert refused.status_code == 501, refused.text
        assert "/conversations/1/deltas" in refused.json()["error"]["message"]
        chat = Chat(
            ChatOptions(url="http://lambda", token=KIT_TOKEN, actor="chat-w"), client, screen
        )
        watching = asyncio.ensure_future(chat.watch())
        try:
            for _ in range(600):
                if "agent> echo: hello" in out.getvalue():
                    break
                await asyncio.sleep(0.05)
            assert "agent> echo: hello" in out.getvalue(), out.getvalue()
            assert client.streams is False and "connection lost" not in out.getvalue()
        finally:
            # Mangum's cycle swallows a cancellation that lands inside an invocation (it
            # catches BaseException), and the watch then polls again: cancel until done.
            for _ in range(200):
                watching.cancel()
                await asyncio.wait([watching], timeout=0.1)
                if watching.done():
                    break
            assert watching.done()
