"""Removing everything a real node leaves on the machine, and checking that nothing is left.

A node touches more than its state dir: processes (containerd, its shims, runc containers,
kubelet, kube-proxy), mounts (overlay root file systems, shm, projected volumes, network
namespaces bind-mounted under the state dir), the ``sluice0`` bridge and the veths on it,
iptables chains and rules (kube-proxy's and the kubelet's ``KUBE-*``, the bridge plugin's
``CNI-*`` masquerade chains, portmap's ``CNI-HOSTPORT-*``), ``/var/log/containers`` links, shim
sockets under ``/run/containerd/s`` (containerd 1.6 cannot move those), container cgroups under
``/sys/fs/cgroup/<controller>/k8s.io/`` and the ``ip_forward`` sysctl the bridge plugin switches
on. ``teardown`` removes all of it, also after a crash (every step works from what is on disk,
not from live processes); ``leftovers`` lists what remains.

Only one real node runs per machine (iptables chains and the bridge are machine-wide);
``sluice_dev.platform.node.lifecycle`` refuses a second one.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from sluice_dev.platform.node import config, volumes

SHIM_SOCKET_DIR = Path("/run/containerd/s")
CONTAINER_LOG_LINKS = Path("/var/log/containers")
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
CGROUP_ROOT = Path("/sys/fs/cgroup")
IPTABLES_FAMILIES = ("iptables", "ip6tables")
IPTABLES_BACKENDS = ("nft", "legacy")


# --- iptables (pure) ---------------------------------------------------------------------------


def _ours(chain: str, rules: list[str], network: str) -> bool:
    if chain.startswith(("KUBE-", "CNI-HOSTPORT-")):
        return True
    return chain.startswith("CNI-") and any(f'name: \\"{network}\\"' in rule for rule in rules)


def _targets(rule: str) -> set[str]:
    words = rule.split()
    return {words[i + 1] for i, word in enumerate(words[:-1]) if word in ("-j", "-g", "--jump", "--goto")}


def iptables_cleanup_script(save_text: str, network: str = config.CNI_NETWORK) -> str:
    """An ``iptables-restore --noflush`` script removing every rule and chain a node created.

    Ours: every ``KUBE-*`` chain (kube-proxy, the kubelet's canaries), portmap's
    ``CNI-HOSTPORT-*`` chains and every ``CNI-*`` chain with a rule commented with our network
    name; rules of other chains that jump to ours or carry that comment are deleted first.
    Returns ``""`` when there is nothing to remove.
    """
    out: list[str] = []
    table = ""
    chains: dict[str, list[str]] = {}
    order: list[str] = []

    def flush_table() -> None:
        if not table:
            return
        ours = {chain for chain in order if _ours(chain, chains[chain], network)}
        if not ours:
            return
        lines = [f"*{table}"]
        for chain in order:
            if chain in ours:
                continue
            for rule in chains[chain]:
                if _targets(rule) & ours or f'name: \\"{network}\\"' in rule:
                    lines.append(f"-D {chain} {rule}")
        lines += [f"-F {chain}" for chain in order if chain in ours]
        lines += [f"-X {chain}" for chain in order if chain in ours]
        lines.append("COMMIT")
        out.extend(lines)

    for line in save_text.splitlines():
        if line.startswith("*"):
            table, chains, order = line[1:].strip(), {}, []
        elif line.startswith(":"):
            name = line[1:].split()[0]
            chains.setdefault(name, [])
            order.append(name)
        elif line.startswith("-A "):
            chain, _, rule = line[3:].partition(" ")
            if chain not in chains:
                chains[chain] = []
                order.append(chain)
            chains[chain].append(rule)
        elif line.strip() == "COMMIT":
            flush_table()
            table = ""
    return "\n".join(out) + "\n" if out else ""


def iptables_leftovers(save_text: str, network: str = config.CNI_NETWORK) -> list[str]:
    """The chains a node created that are still present, as ``table/chain``."""
    found: list[str] = []
    table = ""
    rules: dict[str, list[str]] = {}
    for line in save_text.splitlines():
        if line.startswith("*"):
            table, rules = line[1:].strip(), {}
        elif line.startswith(":"):
            rules.setdefault(line[1:].split()[0], [])
        elif line.startswith("-A "):
            chain, _, rule = line[3:].partition(" ")
            rules.setdefault(chain, []).append(rule)
        elif line.strip() == "COMMIT":
            found += [f"{table}/{chain}" for chain, body in rules.items() if _ours(chain, body, network)]
    return found


# --- the machine --------------------------------------------------------------------------------


def _run(argv: list[str], *, input_text: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, input=input_text, capture_output=True, text=True, check=False, timeout=120)


def _iptables_tools() -> Iterable[tuple[str, str]]:
    """(save, restore) command pairs present on this machine, per family and backend."""
    for family in IPTABLES_FAMILIES:
        for backend in IPTABLES_BACKENDS:
            save, restore = f"{family}-{backend}-save", f"{family}-{backend}-restore"
            if shutil.which(save) and shutil.which(restore):
                yield save, restore


def clean_iptables() -> list[str]:
    """Apply ``iptables_cleanup_script`` to every family and backend; return problems."""
    problems: list[str] = []
    for save, restore in _iptables_tools():
        result = _run([save])
        if result.returncode != 0:
            continue  # backend not usable on this kernel
        script = iptables_cleanup_script(result.stdout)
        if script:
            applied = _run([restore, "--noflush"], input_text=script)
            if applied.returncode != 0:
                problems.append(f"{restore}: {applied.stderr.strip()}")
    return problems


#: the node's own programs; a process of these whose arguments name the state dir is ours (so is
#: the volume provisioner, a Python module)
PROGRAMS = frozenset({"containerd", "containerd-shim-runc-v2", "kubelet", "kube-proxy", "runc"})


def is_node_process(argv: list[str], node_dir: Path) -> bool:
    """Is ``argv`` one of the node's programs run for ``node_dir`` (not, say, a ``tail -f`` of
    one of its logs, nor a process of a sibling directory)?"""
    if not argv or (Path(argv[0]).name not in PROGRAMS and volumes.MODULE not in argv[1:3]):
        return False
    pattern = re.compile(re.escape(str(node_dir)) + r"(/|$)")
    return any(pattern.search(arg) for arg in argv[1:])


def processes(layout: config.Layout, *, provisioner: bool = True) -> list[int]:
    """Pids of processes started by the node: its programs whose arguments name the node's
    state dir (containerd, shims, kubelet, kube-proxy) plus the containers' processes (runc).
    ``provisioner=False`` leaves out the volume provisioner (a cluster add-on, not the node's)."""
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            argv = argv[:-1] if argv and argv[-1] == "" else argv
            if not provisioner and volumes.MODULE in argv[1:3]:
                continue
            if is_node_process(argv, layout.dir):
                found.add(int(entry.name))
    found.update(container_pids(layout))
    return sorted(pid for pid in found if _alive(pid))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def runc_containers(layout: config.Layout) -> list[tuple[str, str]]:
    """(runc root, container id) of every container runc knows under our roots."""
    found: list[tuple[str, str]] = []
    if not layout.runc_root.is_dir() or shutil.which("runc") is None:
        return found
    for root in [layout.runc_root, *sorted(p for p in layout.runc_root.iterdir() if p.is_dir())]:
        result = _run(["runc", f"--root={root}", "list", "-q"])
        if result.returncode == 0:
            found += [(str(root), cid) for cid in result.stdout.split() if cid]
    return found


def container_pids(layout: config.Layout) -> set[int]:
    pids: set[int] = set()
    for root, cid in runc_containers(layout):
        result = _run(["runc", f"--root={root}", "ps", "--format=json", cid])
        if result.returncode == 0:
            pids.update(int(p) for p in re.findall(r"\d+", result.stdout))
    return pids


def kill_processes(
    layout: config.Layout, grace: float = 5.0, *, power_loss: bool = False, provisioner: bool = True
) -> None:
    """SIGTERM, then SIGKILL, every process of ``processes``; then delete the runc containers.
    ``power_loss``: SIGKILL at once, every process in one pass (the containers' processes are
    listed before their shims die)."""
    for sig in (signal.SIGKILL,) if power_loss else (signal.SIGTERM, signal.SIGKILL):
        pids = processes(layout, provisioner=provisioner)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            time.sleep(0.1)
    for root, cid in runc_containers(layout):
        _run(["runc", f"--root={root}", "delete", "--force", cid])


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below ``path``, deepest first."""
    prefix = str(path)
    found: list[str] = []
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            mount_point = line.split()[4].encode().decode("unicode_escape")
            if mount_point == prefix or mount_point.startswith(prefix + "/"):
                found.append(mount_point)
    return sorted(set(found), key=lambda p: (-p.count("/"), p))


def unmount_all(path: Path) -> None:
    for _ in range(5):
        points = mounts_under(path)
        if not points:
            return
        for point in points:
            if _run(["umount", point]).returncode != 0:
                _run(["umount", "-l", point])


def bridge_exists() -> bool:
    return Path(f"/sys/class/net/{config.BRIDGE}").exists()


def bridge_ports() -> list[str]:
    brif = Path(f"/sys/class/net/{config.BRIDGE}/brif")
    return sorted(p.name for p in brif.iterdir()) if brif.is_dir() else []


def bridge_owner() -> str | None:
    """The state dir of the node that created the bridge (kept in its alias), if any."""
    alias = Path(f"/sys/class/net/{config.BRIDGE}/ifalias")
    try:
        return alias.read_text().strip() or None
    except OSError:
        return None


def owned_elsewhere(layout: config.Layout) -> bool:
    """Is the machine-wide network (bridge, iptables) in use by another node that still runs?"""
    owner = bridge_owner()
    return owner is not None and owner != str(layout.dir) and bool(processes(config.Layout(Path(owner))))


#: host ends of the veths of nodes in network namespaces of their own (``topology``)
NODE_LINK_PREFIX = "sluice-n"


def remove_network(
    layout: config.Layout, *, keep_bridge: bool = False, keep_node_links: bool = False
) -> None:
    """Remove the veths on the bridge, the iptables chains and rules, and (unless
    ``keep_bridge``, when the bridge is ours) the bridge itself, restoring ``ip_forward``.
    ``keep_node_links`` keeps the ports that are other nodes' links (node 1 powered off)."""
    if owned_elsewhere(layout):
        return
    for port in bridge_ports():
        if not (keep_node_links and port.startswith(NODE_LINK_PREFIX)):
            _run(["ip", "link", "delete", port])
    clean_iptables()
    if keep_bridge and bridge_owner() == str(layout.dir):
        return
    if bridge_exists():
        _run(["ip", "link", "delete", config.BRIDGE])
    saved = layout.dir / "ip_forward.orig"
    if saved.is_file():
        with contextlib.suppress(OSError):
            IP_FORWARD.write_text(saved.read_text().strip() + "\n")
        saved.unlink()


def remove_host_files(layout: config.Layout) -> None:
    """``/var/log/containers`` links into our pod logs and shim sockets of our tasks."""
    if CONTAINER_LOG_LINKS.is_dir():
        for link in CONTAINER_LOG_LINKS.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and os.readlink(link).startswith(str(layout.pod_logs)):
                    link.unlink()
    for socket in shim_sockets(layout):
        socket.unlink(missing_ok=True)


def shim_sockets(layout: config.Layout) -> list[Path]:
    """Sockets under ``/run/containerd/s`` that belong to our containerd's tasks (containerd 1.6
    names them ``sha256(<containerd address>/<namespace>/<task id>)``)."""
    tasks = layout.containerd_state / "io.containerd.runtime.v2.task"
    found: list[Path] = []
    if not tasks.is_dir() or not SHIM_SOCKET_DIR.is_dir():
        return found
    for namespace in tasks.iterdir():
        for task in namespace.iterdir() if namespace.is_dir() else []:
            for address in (str(layout.containerd_socket), f"{layout.containerd_socket}.ttrpc"):
                name = hashlib.sha256(f"{address}/{namespace.name}/{task.name}".encode()).hexdigest()
                if (SHIM_SOCKET_DIR / name).exists():
                    found.append(SHIM_SOCKET_DIR / name)
    return found


def container_ids(layout: config.Layout) -> set[str]:
    """Ids of every sandbox and container our containerd ever recorded (from its files)."""
    cri = layout.containerd_root / "io.containerd.grpc.v1.cri"
    dirs = [cri / "containers", cri / "sandboxes"]
    tasks = layout.containerd_state / "io.containerd.runtime.v2.task"
    if tasks.is_dir():
        dirs += [ns for ns in tasks.iterdir() if ns.is_dir()]
    return {entry.name for d in dirs if d.is_dir() for entry in d.iterdir()}


def container_cgroups(layout: config.Layout) -> list[Path]:
    """cgroup v1 directories (``/sys/fs/cgroup/<controller>/k8s.io/<id>``) of our containers."""
    ids = container_ids(layout)
    return sorted(
        path for path in CGROUP_ROOT.glob(f"*/{config.CONTAINERD_NAMESPACE}/*") if path.name in ids
    )


#: cpu.shares of one CPU's worth (cgroup v1: a task at nice 0 weighs as much)
CPU_SHARES_PER_CPU = 1024


def share_cpu_with_pods() -> int | None:
    """Give the pods, as a group, the CPU weight of a node of this machine's size: ``cpu.shares``
    of their parent cgroup (``/sys/fs/cgroup/cpu/k8s.io``, created if missing; ``remove_cgroups``
    removes it once empty) set to 1024 per CPU. Without it that parent weighs 1024, as much as a
    single busy thread of the host: the kubelet's ``cgroupsPerQOS: false`` leaves it unconfigured,
    and on a 2-core machine running Spark beside the node, all the pods together got a quarter of
    the CPU. The shares of the pods among themselves stay the kubelet's (from their CPU requests).
    Returns the shares written; None where there is no cgroup v1 cpu controller (nothing done)."""
    controller = CGROUP_ROOT / "cpu"
    if not (controller / "cpu.shares").is_file():
        return None
    parent = controller / config.CONTAINERD_NAMESPACE
    parent.mkdir(exist_ok=True)
    shares = CPU_SHARES_PER_CPU * (os.cpu_count() or 1)
    (parent / "cpu.shares").write_text(str(shares))
    return shares


def remove_cgroups(layout: config.Layout) -> None:
    """rmdir our containers' cgroups, then the ``k8s.io`` parents if empty (rmdir never removes
    a cgroup that still has processes or children, so another runtime's are safe)."""
    for path in container_cgroups(layout):
        with contextlib.suppress(OSError):
            path.rmdir()
    for parent in CGROUP_ROOT.glob(f"*/{config.CONTAINERD_NAMESPACE}"):
        with contextlib.suppress(OSError):
            parent.rmdir()


def remove_empty_dirs() -> None:
    """Directories the kubelet and the shims create on the host, when nothing is left in them."""
    for directory in (CONTAINER_LOG_LINKS, SHIM_SOCKET_DIR, SHIM_SOCKET_DIR.parent):
        with contextlib.suppress(OSError):
            directory.rmdir()


def teardown(layout: config.Layout, *, keep_bridge: bool = False) -> None:
    """Remove every process, mount, network object and host file of the node; idempotent.

    ``keep_bridge`` keeps our bridge and its address (the node IP) for a node that starts again
    at once: Kafka and the API server listen on that address and must not lose it."""
    kill_processes(layout)
    remove_host_files(layout)
    unmount_all(layout.dir)
    remove_cgroups(layout)
    remove_network(layout, keep_bridge=keep_bridge)
    remove_empty_dirs()


def power_off(layout: config.Layout) -> None:
    """Node 1 loses power: its kubelet, containerd, shims, kube-proxy and every container
    SIGKILLed at once, its mounts and its pods' network (their veths, the host's KUBE-* and CNI
    chains) gone; the bridge ``sluice0`` and its address stay (Kafka, the API server and s3proxy
    listen there, and other nodes hang on it), so does the volume provisioner (a cluster add-on)."""
    kill_processes(layout, power_loss=True, provisioner=False)
    remove_host_files(layout)
    unmount_all(layout.dir)
    remove_cgroups(layout)
    remove_network(layout, keep_bridge=True, keep_node_links=True)


def teardown_isolated(
    layout: config.Layout, *, host_link: str, route: list[str], power_loss: bool = False
) -> None:
    """Remove a node that lives in a network namespace of its own: its processes (SIGKILL at
    once with ``power_loss``), host files, every mount under its dir (its namespace's among them,
    which takes the veth pair, its bridge and its iptables with it), its cgroups, the host end of
    its veth if still there and the host's route to its pods (``route``: the ``ip route del``)."""
    kill_processes(layout, power_loss=power_loss)
    remove_host_files(layout)
    unmount_all(layout.dir)
    remove_cgroups(layout)
    if Path(f"/sys/class/net/{host_link}").exists():
        _run(["ip", "link", "delete", host_link])
    if _route_present(route):
        _run(route)


def _route_present(route: list[str]) -> bool:
    """Is the route of an ``ip route del <dst> ...`` command on the host?"""
    destination = route[3]
    return bool(_run(["ip", "-o", "route", "show", destination]).stdout.strip())


def _own_leftovers(layout: config.Layout) -> tuple[list[str], list[str]]:
    """What any stopped node leaves in its own directory and on the host, in two parts: its
    processes and mounts; its shim sockets, cgroups and container log links."""
    first = [f"process {pid}: {_cmdline(pid)}" for pid in processes(layout)]
    first += [f"mount {point}" for point in mounts_under(layout.dir)]
    last = [f"shim socket {socket}" for socket in shim_sockets(layout)]
    last += [f"cgroup {path}" for path in container_cgroups(layout)]
    if CONTAINER_LOG_LINKS.is_dir():
        for link in CONTAINER_LOG_LINKS.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and os.readlink(link).startswith(str(layout.pod_logs)):
                    last.append(f"log link {link}")
    return first, last


def isolated_leftovers(layout: config.Layout, *, host_link: str, route: list[str]) -> list[str]:
    """What a stopped node in a namespace of its own left behind (empty when clean)."""
    first, last = _own_leftovers(layout)
    found = list(first)
    if Path(f"/sys/class/net/{host_link}").exists():
        found.append(f"link {host_link} (a node's veth)")
    if _route_present(route):
        found.append(f"route {route[3]}")
    return found + last


def leftovers(layout: config.Layout) -> list[str]:
    """What a stopped node left behind (empty when clean): the check the tests call."""
    first, last = _own_leftovers(layout)
    found = list(first)
    if bridge_exists():
        found.append(f"link {config.BRIDGE} (ports: {', '.join(bridge_ports()) or 'none'})")
    found += [f"link {name} (a CNI veth)" for name in cni_veths()]
    found += [f"netns {ns}" for ns in _foreign_netns()]
    for save, _ in _iptables_tools():
        result = _run([save])
        if result.returncode == 0:
            found += [f"{save}: chain {chain}" for chain in iptables_leftovers(result.stdout)]
    return found + last


def cni_veths() -> list[str]:
    """Host-side veths named the way the CNI bridge plugin names them (``veth`` + 8 hex digits).
    Ours disappear with their pods' network namespaces; machines here have no other CNI users."""
    result = _run(["ip", "-o", "link", "show", "type", "veth"])
    names = [line.split(":")[1].strip().split("@")[0] for line in result.stdout.splitlines() if ":" in line]
    return [name for name in names if re.fullmatch(r"veth[0-9a-f]{8}", name)]


def _foreign_netns() -> list[str]:
    """Named network namespaces in /var/run/netns whose interfaces use our pod subnet (our
    containerd keeps its own under the state dir; this catches any that escaped there)."""
    netns_dir = Path("/var/run/netns")
    if not netns_dir.is_dir():
        return []
    prefix = config.node_ip().rsplit(".", 1)[0] + "."
    found: list[str] = []
    for ns in sorted(netns_dir.iterdir()):
        result = _run(["ip", "-n", ns.name, "-o", "-4", "addr"])
        if prefix in result.stdout:
            found.append(str(ns))
    return found


def _cmdline(pid: int) -> str:
    try:
        return shlex.join(Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1])
    except OSError:
        return "?"
