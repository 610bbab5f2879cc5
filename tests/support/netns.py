"""Separate hosts on one machine: network namespaces joined to a hub namespace by veth pairs, so a test
can run processes that share no loopback and no socket with each other, and cut one off the network.

Topology (every address and interface lives inside namespaces made here; the root namespace, where the
test runs, gets nothing):

    hub namespace: bridge br0 10.200.0.1/24, one port per host  <- the Redis host
    host namespace i: eth0 10.200.0.(10+i)/24, its veth peer is port i on br0

`cut(host)` sets the host's bridge port down: a cable pulled at the switch. The host's processes keep
running and their TCP connections stay open, unanswered, until `restore(host)`. Everything is deleted on
exit (deleting a namespace deletes its veths and bridge), also when the test fails.

Needs root and `ip netns` (iproute2); `unavailable()` says why not, for a `pytest.skip`.
"""

import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

SUBNET = "10.200.0"
HUB_ADDRESS = f"{SUBNET}.1"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def unavailable() -> str | None:
    """Why this machine cannot make namespaces (not root, no `ip`, `ip netns add` refused); None if it can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 (`ip`) is not installed"
    probe = f"mos-probe-{secrets.token_hex(3)}"
    try:
        _ip("netns", "add", probe)
    except subprocess.CalledProcessError as error:
        return f"`ip netns add` failed: {error.stderr.decode(errors='replace').strip()}"
    _ip("netns", "del", probe)
    return None


@dataclass(frozen=True)
class Host:
    """One host: its namespace, its address on the hub's bridge, and its port there."""

    namespace: str
    address: str
    port: str

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` run inside this host's namespace (`ip netns exec` execs it: the pid is the program's)."""
        return ["ip", "netns", "exec", self.namespace, *argv]


class Network:
    """A hub (namespace with the bridge) and named hosts attached to it."""

    def __init__(self, hub: str, hosts: dict[str, Host]) -> None:
        self.hub = Host(hub, HUB_ADDRESS, "br0")
        self.hosts = hosts

    def cut(self, name: str) -> None:
        """Pull the host's cable: its bridge port goes down; its processes are left running."""
        _ip("-n", self.hub.namespace, "link", "set", self.hosts[name].port, "down")

    def restore(self, name: str) -> None:
        _ip("-n", self.hub.namespace, "link", "set", self.hosts[name].port, "up")


def _namespaces() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], check=True, capture_output=True, text=True, timeout=30)
    return {line.split()[0] for line in listed.stdout.splitlines() if line.strip()}


@contextmanager
def network(names: Sequence[str]) -> Iterator[Network]:
    """A hub and one host per name; every namespace made is deleted on exit, even after a failure.
    Stop the processes started in them first: a namespace outlives its name while a process is in it."""
    tag = secrets.token_hex(3)  # names unique per run: other tests may hold namespaces of their own
    made: list[str] = []

    def namespace(suffix: str) -> str:
        name = f"mos-{tag}-{suffix}"
        _ip("netns", "add", name)
        made.append(name)
        _ip("-n", name, "link", "set", "lo", "up")
        return name

    try:
        hub = namespace("hub")
        _ip("-n", hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", hub, "addr", "add", f"{HUB_ADDRESS}/24", "dev", "br0")
        _ip("-n", hub, "link", "set", "br0", "up")
        hosts: dict[str, Host] = {}
        for i, name in enumerate(names):
            ns = namespace(name)
            host = Host(ns, f"{SUBNET}.{10 + i}", f"port{i}")
            _ip("-n", hub, "link", "add", host.port, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("-n", hub, "link", "set", host.port, "master", "br0")
            _ip("-n", hub, "link", "set", host.port, "up")
            _ip("-n", ns, "addr", "add", f"{host.address}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            hosts[name] = host
        yield Network(hub, hosts)
    finally:
        for name in reversed(made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
        left = _namespaces() & set(made)
        if left and sys.exc_info()[0] is None:  # a failure of the test itself is the one to report
            raise RuntimeError(f"network namespaces not deleted: {sorted(left)}")
