"""Node agent: one loopback address per pod."""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

import pytest
from sluice_dev.nodeagent import ipam


def test_candidates_skip_network_broadcast_and_dot_zero_255() -> None:
    pool = ipam.candidates(ipaddress.IPv4Network("127.10.0.0/23"))
    assert pool[0] == "127.10.0.1" and pool[-1] == "127.10.1.254"
    assert "127.10.0.255" not in pool and "127.10.1.0" not in pool
    assert len(pool) == 2 * 254


def test_allocation_is_stable_round_robin_and_persisted(tmp_path: Path) -> None:
    table = tmp_path / "ipam.json"
    alloc = ipam.Allocator("127.10.0.0/24", table)
    a, b = alloc.allocate("a"), alloc.allocate("b")
    assert (a, b) == ("127.10.0.1", "127.10.0.2")
    assert alloc.allocate("a") == a
    alloc.release("a")
    assert alloc.allocate("c") == "127.10.0.3"  # a released address is not reused at once
    again = ipam.Allocator("127.10.0.0/24", table)
    assert again.known() == {"b": b, "c": "127.10.0.3"}
    assert again.allocate("d") == "127.10.0.4"


def test_exhaustion_and_wraparound() -> None:
    alloc = ipam.Allocator("127.10.0.0/30")  # hosts .1 and .2
    assert alloc.allocate("a") == "127.10.0.1"
    assert alloc.allocate("b") == "127.10.0.2"
    with pytest.raises(ipam.PoolExhausted):
        alloc.allocate("c")
    alloc.release("a")
    assert alloc.allocate("c") == "127.10.0.1"


def test_only_loopback_ranges_are_accepted() -> None:
    with pytest.raises(ValueError, match="loopback"):
        ipam.Allocator("10.0.0.0/24")


def test_two_pod_addresses_can_listen_on_the_same_port_without_ip_addr_add() -> None:
    alloc = ipam.Allocator("127.10.0.0/16")
    first, second = alloc.allocate("x"), alloc.allocate("y")
    with socket.socket() as one, socket.socket() as two:
        one.bind((first, 0))
        port = one.getsockname()[1]
        two.bind((second, port))
        one.listen()
        two.listen()
        with socket.create_connection((second, port), timeout=2):
            pass
