"""The sandbox on a host of its own: a network namespace joined to this one by a veth pair.

:func:`separate_host` builds one: a fresh namespace (``pdsbx-<hex>``) holding only ``lo``
and one end of a veth pair, a private ``/30`` (``10.213.x.y``) with the sandbox at ``.2``
and the actor's side at ``.1``, and no default route on either side for it — the two
hosts reach each other and nothing else. The sandbox server runs inside it
(``ip netns exec``), so every request of the actor crosses a real link that the test can
break:

* :meth:`SandboxHost.partition` / :meth:`heal` — the sandbox's link down and up again
  (packets vanish: a black hole, not a refusal);
* :meth:`SandboxHost.degrade` — random packet loss (nftables ``numgen``) in both directions
  plus added latency (``tc netem`` where the kernel has it, otherwise a ``tbf`` rate limit
  that queues every answer);
* :meth:`SandboxHost.reset_connections` — every open connection to the server killed with a
  TCP reset (``ss -K``), and new ones refused with ``reject with tcp reset`` for a while;
* :meth:`SandboxHost.server` (a :class:`~tests.remote_env.support.ServerProcess`) — kill and
  restart the sandbox itself.

Every rule lives inside the namespace or on the pair's own devices, so nothing the test
does touches the machine's other interfaces or firewall, and everything goes when the
namespace is deleted.

Needs root (``CAP_NET_ADMIN``, ``CAP_SYS_ADMIN``) and iproute2, nftables; without them the
tests skip with the reason — unless ``PERDURE_REQUIRE_NETNS=1`` (set by ``.ci/run``), which
turns the skip into a failure so CI can never silently not run them.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.remote_env.support import SECRET, ServerProcess

__all__ = ["SandboxHost", "netns_problem", "separate_host"]

PORT = 8765
_NET = ipaddress.ip_network("10.213.0.0/16")


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=30)


def netns_problem() -> str | None:
    """Why separate-host tests cannot run here (``None``: they can)."""
    if os.geteuid() != 0:
        return "needs root (CAP_NET_ADMIN) to create network namespaces and veth pairs"
    for tool in ("ip", "nft", "tc", "ss"):
        if shutil.which(tool) is None:
            return f"needs {tool} (Debian: apt-get install iproute2 nftables)"
    probe = f"pdprobe-{secrets.token_hex(3)}"
    made = _run("ip", "netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    _run("ip", "netns", "del", probe, check=False)
    return None


def require_netns() -> None:
    """Skip (or, under ``PERDURE_REQUIRE_NETNS=1``, fail) when namespaces are unavailable."""
    problem = netns_problem()
    if problem is None:
        return
    if os.environ.get("PERDURE_REQUIRE_NETNS") == "1":
        pytest.fail(f"PERDURE_REQUIRE_NETNS=1 but: {problem}")
    pytest.skip(problem)


def _free_subnet() -> ipaddress.IPv4Network:
    used = _run("ip", "-o", "-4", "addr", "show").stdout
    for _ in range(100):
        base = _NET.network_address + 4 * secrets.randbelow(_NET.num_addresses // 4)
        subnet = ipaddress.ip_network(f"{base}/30")
        if f"{base + 1}/" not in used and f"{base + 2}/" not in used:
            return subnet  # type: ignore[return-value]
    raise RuntimeError("no free /30 in 10.213.0.0/16")


@dataclass
class SandboxHost:
    """A network namespace with the sandbox server in it (see the module docstring)."""

    name: str
    host_dev: str
    sandbox_dev: str
    actor_address: str
    sandbox_address: str
    server: ServerProcess
    netem: bool = False
    faults: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{self.sandbox_address}:{PORT}"

    def inside(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a command inside the sandbox's namespace."""
        return _run("ip", "netns", "exec", self.name, *argv, check=check)

    def routes(self) -> str:
        return self.inside("ip", "-4", "route", "show").stdout

    # ------------------------------------------------------------------ faults

    def partition(self) -> None:
        """Take the sandbox's end of the link down: packets in both directions vanish."""
        self.inside("ip", "link", "set", self.sandbox_dev, "down")
        self.faults.append("partition")

    def heal(self) -> None:
        """Bring the link back and lift every other fault."""
        self.inside("ip", "link", "set", self.sandbox_dev, "up")
        self.inside("nft", "flush", "ruleset")
        for where, dev in ((self.inside, self.sandbox_dev), (_run, self.host_dev)):
            where("tc", "qdisc", "del", "dev", dev, "root", check=False)

    def degrade(self, *, loss_percent: int, delay_ms: int) -> None:
        """Drop ``loss_percent`` of the packets each way and slow the link down."""
        self._nft(
            "table inet fault {\n"
            "  chain input { type filter hook input priority 0;"
            f" tcp dport {PORT} numgen random mod 100 < {loss_percent} counter drop; }}\n"
            "  chain output { type filter hook output priority 0;"
            f" tcp sport {PORT} numgen random mod 100 < {loss_percent} counter drop; }}\n"
            "}\n"
        )
        for where, dev in ((self.inside, self.sandbox_dev), (_run, self.host_dev)):
            netem = where(
                "tc",
                "qdisc",
                "add",
                "dev",
                dev,
                "root",
                "netem",
                "delay",
                f"{delay_ms}ms",
                check=False,
            )
            self.netem = netem.returncode == 0
            if not self.netem:
                # No sch_netem in this kernel: a token bucket as slow as a bad uplink makes
                # every answer wait in the queue instead.
                where(
                    "tc",
                    "qdisc",
                    "add",
                    "dev",
                    dev,
                    "root",
                    "tbf",
                    "rate",
                    "256kbit",
                    "burst",
                    "1540",
                    "latency",
                    f"{max(delay_ms, 50) * 10}ms",
                )
        self.faults.append(f"loss {loss_percent}% + {'netem delay' if self.netem else 'tbf'}")

    def dropped_packets(self) -> int:
        """Packets the loss rules dropped so far (proof the fault was in effect)."""
        listing = self.inside("nft", "list", "table", "inet", "fault", check=False).stdout
        total = 0
        words = listing.split()
        for i, word in enumerate(words[:-1]):
            if word == "packets":
                total += int(words[i + 1])
        return total

    def reset_connections(self, *, refuse: bool = True) -> int:
        """Kill every open connection to the server with a TCP reset; with ``refuse``, also
        answer new ones with a reset until :meth:`heal`. Returns how many were killed."""
        if refuse:
            self._nft(
                "table inet fault {\n"
                "  chain input { type filter hook input priority 0;"
                f" tcp dport {PORT} counter reject with tcp reset; }}\n"
                "}\n"
            )
        before = self.inside("ss", "-Htn", "state", "established", f"sport = :{PORT}").stdout
        self.inside("ss", "-K", "-tn", "state", "established", f"sport = :{PORT}", check=False)
        self.faults.append("reset")
        return len([line for line in before.splitlines() if line.strip()])

    def _nft(self, ruleset: str) -> None:
        self.inside("nft", "flush", "ruleset")
        subprocess.run(
            ["ip", "netns", "exec", self.name, "nft", "-f", "-"],
            input=ruleset,
            text=True,
            check=True,
            capture_output=True,
            timeout=30,
        )


@contextlib.contextmanager
def separate_host(tmp: Path, *server_args: str) -> Iterator[SandboxHost]:
    """A sandbox server on its own network host under ``tmp`` (see :class:`SandboxHost`)."""
    require_netns()
    tag = secrets.token_hex(3)
    name, host_dev, sandbox_dev = f"pdsbx-{tag}", f"pda{tag}", f"pds{tag}"
    subnet = _free_subnet()
    actor_ip, sandbox_ip = str(subnet.network_address + 1), str(subnet.network_address + 2)
    root = tmp / "root"
    root.mkdir(exist_ok=True)
    secret_file = tmp / "secret"
    secret_file.write_bytes(SECRET)
    _run("ip", "netns", "add", name)
    try:
        _run("ip", "link", "add", host_dev, "type", "veth", "peer", "name", sandbox_dev)
        _run("ip", "link", "set", sandbox_dev, "netns", name)
        _run("ip", "addr", "add", f"{actor_ip}/30", "dev", host_dev)
        _run("ip", "link", "set", host_dev, "up")
        for argv in (
            ("ip", "addr", "add", f"{sandbox_ip}/30", "dev", sandbox_dev),
            ("ip", "link", "set", sandbox_dev, "up"),
            ("ip", "link", "set", "lo", "up"),
        ):
            _run("ip", "netns", "exec", name, *argv)
        server = ServerProcess(
            root=root,
            port=PORT,
            secret_file=secret_file,
            extra=list(server_args),
            host=sandbox_ip,
            launcher=["ip", "netns", "exec", name],
        )
        host = SandboxHost(name, host_dev, sandbox_dev, actor_ip, sandbox_ip, server)
        server.start()
        try:
            yield host
        finally:
            server.stop()
    finally:
        _run("ip", "link", "del", host_dev, check=False)
        _run("ip", "netns", "del", name, check=False)
