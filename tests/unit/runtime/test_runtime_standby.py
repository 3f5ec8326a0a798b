"""Runtime pieces of standby drivers that need no cluster: checkpoint epochs, the write guard,
the election settings, readiness and /role of a standby."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from sluice_runtime import epochs
from sluice_runtime.cli import ConfigError, build_parser, resolve_config
from sluice_runtime.drain import BatchGate, NotHolder
from sluice_runtime.driver import advertised_address
from sluice_runtime.server import RuntimeState
from sluice_runtime.takeover import GapMeter

BASE_ENV = {"SLUICE_PLAN": "/p.json", "SLUICE_CHECKPOINT": "/c", "SLUICE_BOOTSTRAP": "k:9092"}


def write(path: Path, text: str = "x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def spark_checkpoint(root: Path, batches: int) -> None:
    write(root / "metadata", '{"id":"q1"}')
    for n in range(batches):
        write(root / "offsets" / str(n), f"offsets {n}")
        write(root / "commits" / str(n), f"commit {n}")
        write(root / "state" / "0" / "0" / f"{n + 1}.changelog", f"state {n}")
    write(root / "offsets" / f".{batches}.abc.tmp", "half written")


def test_first_epoch_of_a_new_query_is_empty(tmp_path: Path) -> None:
    target, source = epochs.prepare(tmp_path, 1)
    assert source is None and target.is_dir() and not any(target.iterdir())


def test_an_epoch_links_the_previous_one_and_is_fenced_from_it(tmp_path: Path) -> None:
    first, _ = epochs.prepare(tmp_path, 1)
    spark_checkpoint(first, 3)
    second, source = epochs.prepare(tmp_path, 2)
    assert source == first
    assert (second / "commits" / "2").read_text() == "commit 2"
    assert os.stat(second / "commits" / "2").st_ino == os.stat(first / "commits" / "2").st_ino  # a link
    assert not (second / "offsets" / ".3.abc.tmp").exists()  # unfinished writes are not carried over
    # a zombie of epoch 1 writes on: the live epoch does not see it
    write(first / "offsets" / "3", "zombie")
    (first / "commits" / "0").unlink()
    assert not (second / "offsets" / "3").exists()
    assert (second / "commits" / "0").exists()


def test_a_file_the_former_holder_removes_while_the_epoch_is_linked_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A drained driver releases its Lease before its queries stop, so Spark may still purge old
    log entries of its epoch while the successor links it: a file listed, then gone, is left out,
    and the rest of the epoch is linked."""
    first, _ = epochs.prepare(tmp_path, 1)
    spark_checkpoint(first, 3)
    real_walk = os.walk

    def walk_then_purge(top: str | os.PathLike[str]):  # type: ignore[no-untyped-def]
        for root, dirs, files in real_walk(top):
            if Path(root).name == "offsets" and (Path(root) / "0").exists():
                (Path(root) / "0").unlink()  # the purge runs between the listing and the link
            yield root, dirs, files

    monkeypatch.setattr(epochs.os, "walk", walk_then_purge)
    second, _ = epochs.prepare(tmp_path, 2)
    assert not (second / "offsets" / "0").exists()
    assert sorted(p.name for p in (second / "offsets").iterdir()) == ["1", "2"]
    assert sorted(p.name for p in (second / "commits").iterdir()) == ["0", "1", "2"]


def test_prepare_is_idempotent_and_skips_missing_epochs(tmp_path: Path) -> None:
    first, _ = epochs.prepare(tmp_path, 1)
    spark_checkpoint(first, 1)
    again, _ = epochs.prepare(tmp_path, 1)
    assert again == first and (again / "commits" / "0").exists()
    fifth, source = epochs.prepare(tmp_path, 5)  # takeovers whose holder never started
    assert source == first and (fifth / "metadata").exists()


def test_a_checkpoint_written_without_election_is_the_first_source(tmp_path: Path) -> None:
    """A driver without a Lease (``sluice run``) runs on the base itself: the first elected holder
    continues that checkpoint instead of starting the query over."""
    spark_checkpoint(tmp_path, 2)
    target, source = epochs.prepare(tmp_path, 1)
    assert source == tmp_path
    assert (target / "commits" / "1").exists()
    assert not (target / "epochs").exists()


def test_prune_keeps_the_live_epoch_and_the_one_before(tmp_path: Path) -> None:
    for e in (1, 2, 3, 4):
        epochs.prepare(tmp_path, e)
    assert epochs.prune(tmp_path, 4) == [1, 2]
    assert epochs.epochs(tmp_path) == [3, 4]


def test_gap_meter_measures_from_the_old_last_commit_to_the_new_first(tmp_path: Path) -> None:
    old, _ = epochs.prepare(tmp_path, 1)
    spark_checkpoint(old, 2)
    os.utime(old / "commits" / "1", (1000.0, 1000.0))
    new, source = epochs.prepare(tmp_path, 2)
    meter = GapMeter(new, epochs.last_commit_time(source), acquired_at=0.0)
    assert meter.poll() is None  # nothing committed by the new holder yet
    write(new / "commits" / "2", "new")
    os.utime(new / "commits" / "2", (1002.5, 1002.5))
    assert meter.poll() == pytest.approx(2.5)
    assert meter.poll() is None  # measured once


def test_the_gate_refuses_a_batch_when_the_guard_says_no() -> None:
    allowed = {"ok": True}
    gate = BatchGate(guard=lambda: None if allowed["ok"] else "lease lost")
    wrote: list[int] = []
    gate.run("q", 0, lambda: wrote.append(0))
    allowed["ok"] = False
    with pytest.raises(NotHolder, match="before writing: lease lost"):
        gate.run("q", 1, lambda: wrote.append(1))
    assert wrote == [0] and gate.completed == {"q": 0}


def test_the_gate_refuses_the_commit_of_a_batch_written_while_the_lease_ran_out() -> None:
    allowed = {"ok": True}
    gate = BatchGate(guard=lambda: None if allowed["ok"] else "lease lost")

    def paused_write() -> None:
        allowed["ok"] = False  # e.g. SIGSTOP in the middle of the write, longer than the lease

    with pytest.raises(NotHolder, match="after writing"):
        gate.run("q", 5, paused_write)
    assert "q" not in gate.completed  # the drain never waits for a commit Spark must not write


def test_election_settings_from_the_environment() -> None:
    env = {**BASE_ENV, "SLUICE_LEASE_NAME": "q-driver", "SLUICE_LEASE_NAMESPACE": "ns",
           "SLUICE_POD_NAME": "q-driver-abc", "SLUICE_LEASE_SECONDS": "15"}
    config = resolve_config(build_parser().parse_args(["run"]), env)
    assert (config.lease_name, config.lease_namespace, config.pod_name, config.lease_seconds) == (
        "q-driver", "ns", "q-driver-abc", 15.0)
    plain = resolve_config(build_parser().parse_args(["run"]), BASE_ENV)
    assert plain.lease_name is None


@pytest.mark.parametrize(("env", "message"), [
    ({"SLUICE_LEASE_NAME": "q"}, "SLUICE_LEASE_NAMESPACE"),
    ({"SLUICE_LEASE_NAME": "q", "SLUICE_LEASE_NAMESPACE": "n", "SLUICE_LEASE_SECONDS": "ten"},
     "SLUICE_LEASE_SECONDS must be a number"),
    ({"SLUICE_LEASE_NAME": "q", "SLUICE_LEASE_NAMESPACE": "n", "SLUICE_LEASE_SECONDS": "1"},
     "between 3 and 300"),
])
def test_bad_election_settings_are_refused_with_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_config(build_parser().parse_args(["run"]), {**BASE_ENV, **env})


def test_a_warm_standby_is_ready_and_says_so() -> None:
    state = RuntimeState(identity="q-driver-a/1", role="warming", plan_hash="ab" * 32)
    ok, reason = state.readiness()
    assert not ok and reason.startswith("warming up")
    state.role = "standby"
    ok, reason = state.readiness()
    assert ok and "standby: warm" in reason and "plan abababababab" in reason
    described = json.loads(json.dumps(state.describe()))
    assert described["identity"] == "q-driver-a/1" and described["role"] == "standby"


def test_an_active_driver_without_progress_is_not_ready() -> None:
    state = RuntimeState(identity="a/1", role="active", plan_hash="cd" * 32, clock=time.monotonic)
    ok, reason = state.readiness()
    assert not ok and "query not active" in reason


def test_advertised_address_uses_the_pod_ip_for_a_wildcard_bind() -> None:
    assert advertised_address("10.1.2.3:8080", {}) == "10.1.2.3:8080"
    assert advertised_address("0.0.0.0:8080", {"POD_IP": "10.9.9.9"}) == "10.9.9.9:8080"
    assert advertised_address(None, {}) is None


def test_a_lease_released_long_ago_is_no_handoff() -> None:
    import datetime as dt

    from sluice.core.election import LeaseRecord
    from sluice_runtime.elector import released_recently

    now = dt.datetime(2026, 11, 22, 12, 0, 0, tzinfo=dt.UTC)

    def rec(renew: str | None) -> LeaseRecord:
        return LeaseRecord(holder="", duration=10, transitions=3, renew_time=renew, resource_version="1")

    assert released_recently(rec("2026-11-22T11:59:50.123456Z"), now)
    assert not released_recently(rec("2026-11-22T11:50:00.000000Z"), now)  # a resume after suspend
    assert not released_recently(rec(None), now)
    assert released_recently(rec("2026-11-22T11:59:59Z"), now)


def test_a_standby_runs_below_the_active_driver_and_takes_normal_priority_back() -> None:
    import subprocess
    import sys

    from sluice_runtime.priority import STANDBY_NICE, set_priority

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert set_priority([child.pid], STANDBY_NICE) >= 1
        assert os.getpriority(os.PRIO_PROCESS, child.pid) == STANDBY_NICE
        if os.geteuid() == 0:  # raising priority back needs CAP_SYS_NICE
            assert set_priority([child.pid], 0) >= 1
            assert os.getpriority(os.PRIO_PROCESS, child.pid) == 0
        assert set_priority([2**22 + 12345], 0) == 0  # a process that is gone is skipped
    finally:
        child.kill()
        child.wait()


def test_a_fresh_start_rebuilds_the_pipeline_at_the_backfill_s_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first term on a checkpoint without offsets: ``SLUICE_START_FROM`` rebuilds the prepared
    pipeline with every source starting there (no previous version to hand off from)."""
    from sluice_runtime import driver, pipeline
    from sluice_runtime.config import RunConfig

    calls: list[tuple[dict[str, str], str | None]] = []

    def rebuilt(prepared: object, offsets: dict[str, str], start_from: str | None = None) -> str:
        calls.append((offsets, start_from))
        return "rebuilt"

    monkeypatch.setattr(pipeline, "with_start_offsets", rebuilt)
    config = RunConfig(plan="/p", checkpoint="/c", bootstrap="k:9092", start_from="2026-11-20T10:00:00Z")
    before = (3, 1.5)
    assert driver._fresh_start(config, "prepared", before) == ("rebuilt", before)  # type: ignore[arg-type]
    assert calls == [({}, "2026-11-20T10:00:00Z")]
    config.start_from = None  # neither: the pipeline as prepared
    assert driver._fresh_start(config, "prepared", before) == ("prepared", before)  # type: ignore[arg-type]
    assert len(calls) == 1
