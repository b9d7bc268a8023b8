"""``perdure chat`` against the AWS host's front door: a line typed while another
invocation holds the actor is mailed (``id`` null), and the chat says so instead of
failing on the missing id."""

from __future__ import annotations

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
            assert "(mailed: the actor is busy elsewhere; it is taken next)" in out.getvalue()
            assert not chat.awaiting
            assert [m.body["content"] for m in await Mailbox(aws).pending("chat-m")] == ["hello"]
    finally:
        await holder.close()
