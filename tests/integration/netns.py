"""Several "machines" on one host for the multi-node tests: each node is a
network namespace of its own, joined to the others by a veth pair whose
far end is a port of a bridge that lives in one more namespace (the
"switch"). Nothing is made in the root namespace: the addresses
(a /24 of a documentation range of RFC 5737, or a link-local one: the
first that the root namespace does not use) exist only inside the
namespaces made here, no namespace has a default route, and
the root namespace has no link to any of them, so nothing started on a
node can reach anything off this machine (or in its root namespace).

Names: every namespace of one run is `kgn<PID>x<HEX>-<node>` (PID the
pytest process's), so a run's namespaces are told from another's, and
sweep() removes those of earlier runs whose process is gone (a run
killed before its finalizer), never a live run's.

A node's processes are started by `ip netns exec NS unshare --uts`, with
the node's name as hostname (kgym worker registers its host name, so the
nodes look like machines of their own). Net.close() kills every process
it started and then any process still inside its namespaces, and deletes
them (the veths go with them). Needs root and iproute2 (`ip`, `tc`).

The test process itself reaches the nodes by entering a node's namespace
for the calling thread (Net.enter: setns(2) on that thread only; threads
it starts inherit it; subprocesses started meanwhile too, except those
started through Node.run, which set their own)."""
from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from typing import Iterator

PREFIX = "kgn"
# documentation ranges (RFC 5737), never routed, then a link-local one; the
# first that this host's root namespace neither holds nor routes is used (a
# VM may itself sit on TEST-NET-1)
SUBNETS = ("198.51.100", "203.0.113", "192.0.2", "169.254.77")
CLONE_NEWNET = 0x40000000
_NAME = re.compile(rf"^{PREFIX}(\d+)x[0-9a-f]+-")


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and p.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
    return p


def tc(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(["tc", *args], capture_output=True, text=True, timeout=30)
    if check and p.returncode:
        raise RuntimeError(f"tc {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
    return p


def free_subnet() -> str:
    """The first of SUBNETS that the root namespace has no address or
    route in (the namespaces are sealed anyway; this keeps a reader of
    either side from mistaking one for the other)."""
    used = ip("-o", "addr").stdout + ip("route", "show", "table", "all").stdout
    for s in SUBNETS:
        if not re.search(rf"(^|\s){re.escape(s)}\.", used, re.M):
            return s
    raise RuntimeError(f"every candidate subnet {SUBNETS} is in use on this host")


def unavailable() -> str | None:
    """Why namespaces cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for exe in ("ip", "tc", "unshare"):
        if not shutil.which(exe):
            return f"{exe} is not installed (iproute2 / util-linux; scripts/install-deps)"
    return None


def namespaces() -> list[str]:
    p = ip("netns", "list", check=False)
    return [ln.split()[0] for ln in p.stdout.splitlines() if ln.strip()]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _kill_inside(ns: str) -> None:
    """SIGKILLs every process inside namespace ns."""
    p = ip("netns", "pids", ns, check=False)
    for tok in p.stdout.split():
        with contextlib.suppress(ValueError, OSError):
            os.kill(int(tok), signal.SIGKILL)


def _delete(ns: str) -> None:
    _kill_inside(ns)
    for _ in range(50):
        if ip("netns", "del", ns, check=False).returncode == 0 or ns not in namespaces():
            return
        time.sleep(0.1)
    raise RuntimeError(f"could not delete network namespace {ns}")


def sweep(tmp: str = "/tmp") -> list[str]:
    """Deletes the namespaces (and their processes) left by earlier runs
    whose pytest process is gone, and their directories under tmp named
    after the run's tag (Net.scratch); returns what it removed."""
    gone = []
    for ns in namespaces():
        m = _NAME.match(ns)
        if m and not _pid_alive(int(m.group(1))):
            _delete(ns)
            gone.append(ns)
    for d in os.listdir(tmp):
        m = _NAME.match(d)
        if m and not _pid_alive(int(m.group(1))):
            shutil.rmtree(os.path.join(tmp, d), ignore_errors=True)
            gone.append(os.path.join(tmp, d))
    return gone


def netem_missing(ns: str, dev: str) -> str | None:
    """Why `tc ... netem` cannot be used on dev in ns (None: it can). A
    kernel built without sch_netem answers "Specified qdisc kind is
    unknown"."""
    p = tc("-n", ns, "qdisc", "add", "dev", dev, "root", "netem", "delay", "1ms", check=False)
    if p.returncode:
        return f"tc netem unavailable ({p.stderr.strip() or p.returncode}): the kernel " \
               f"({os.uname().release}) lacks sch_netem"
    tc("-n", ns, "qdisc", "del", "dev", dev, "root", check=False)
    return None


class Node:
    """One machine: namespace ns, interface eth0 with addr, plugged into
    the switch's port `port`."""

    def __init__(self, net: "Net", name: str, index: int) -> None:
        self.net, self.name = net, name
        self.ns = f"{net.tag}-{name}"
        self.addr = f"{net.subnet}.{10 + index}"
        self.port = f"p{index}"  # in the switch's namespace

    def cmd(self, argv: list[str]) -> list[str]:
        """argv as run on this node: in its namespace, its own hostname."""
        return ["ip", "netns", "exec", self.ns, "unshare", "--uts", "--", "sh", "-c",
                'hostname "$0" && exec "$@"', self.name, *argv]

    def run(self, argv: list[str], **kw) -> subprocess.Popen:
        """Starts argv on this node; the process is the Popen's pid (every
        step execs the next) and is killed by Net.close()."""
        p = subprocess.Popen(self.cmd(argv), **kw)
        self.net.procs.append(p)
        return p

    def cut(self) -> None:
        """Unplugs the cable at the switch: the node's packets vanish, no
        error reaches either side (TCP times out), as when a machine is
        lost to the network."""
        ip("-n", self.net.switch, "link", "set", self.port, "down")

    def plug(self) -> None:
        ip("-n", self.net.switch, "link", "set", self.port, "up")

    def shape(self, *qdisc: str) -> None:
        """A qdisc on the node's own interface (its outgoing packets), e.g.
        ("netem", "delay", "200ms", "loss", "5%") or a slow link with tbf."""
        tc("-n", self.ns, "qdisc", "replace", "dev", "eth0", "root", *qdisc)

    def unshape(self) -> None:
        tc("-n", self.ns, "qdisc", "del", "dev", "eth0", "root", check=False)


class Net:
    """A switch namespace and the nodes added to it. close() undoes all."""

    def __init__(self) -> None:
        self.tag = f"{PREFIX}{os.getpid()}x{uuid.uuid4().hex[:6]}"
        self.switch = f"{self.tag}-sw"
        self.subnet = free_subnet()
        self.nodes: dict[str, Node] = {}
        self.procs: list[subprocess.Popen] = []
        self.made: list[str] = []
        self._mk(self.switch)
        ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        ip("-n", self.switch, "link", "set", "br0", "up")

    def scratch(self, tmp: str = "/tmp") -> str:
        """A new directory under tmp named after this run (TAG-XXXX), which
        sweep() removes once this process is gone."""
        return tempfile.mkdtemp(prefix=f"{self.tag}-", dir=tmp)

    def _mk(self, ns: str) -> None:
        ip("netns", "add", ns)
        self.made.append(ns)
        ip("-n", ns, "link", "set", "lo", "up")

    def add(self, name: str) -> Node:
        n = Node(self, name, len(self.nodes))
        self._mk(n.ns)
        # both ends are made where they live: nothing passes through the
        # root namespace
        ip("-n", n.ns, "link", "add", "eth0", "type", "veth", "peer", "name", n.port,
           "netns", self.switch)
        ip("-n", self.switch, "link", "set", n.port, "master", "br0")
        ip("-n", self.switch, "link", "set", n.port, "up")
        ip("-n", n.ns, "addr", "add", f"{n.addr}/24", "dev", "eth0")
        ip("-n", n.ns, "link", "set", "eth0", "up")
        self.nodes[name] = n
        return n

    @contextlib.contextmanager
    def enter(self, node: Node) -> Iterator[None]:
        """The calling thread (and threads and subprocesses it starts
        meanwhile) in node's namespace; back where it was afterwards."""
        libc = ctypes.CDLL(None, use_errno=True)
        old = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        new = os.open(f"/run/netns/{node.ns}", os.O_RDONLY)
        try:
            if libc.setns(new, CLONE_NEWNET):
                e = ctypes.get_errno()
                raise OSError(e, f"setns into {node.ns}: {os.strerror(e)}")
            try:
                yield
            finally:
                if libc.setns(old, CLONE_NEWNET):
                    e = ctypes.get_errno()
                    raise OSError(e, f"setns back: {os.strerror(e)}")
        finally:
            os.close(old)
            os.close(new)

    def close(self) -> None:
        """Every process started on a node (SIGTERM, SIGKILL after 10 s),
        whatever else is inside the namespaces, then the namespaces."""
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(OSError):
                    p.send_signal(signal.SIGCONT)
                    p.terminate()
        deadline = time.monotonic() + 10
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        errors = []
        for ns in reversed(self.made):
            try:
                _delete(ns)
            except RuntimeError as e:
                errors.append(str(e))
        self.made.clear()
        if errors:
            raise RuntimeError("; ".join(errors))
