"""Readiness bound logic, metrics from progress reports, drain bookkeeping, HTTP endpoint."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from sluice_runtime import drain, malformed
from sluice_runtime.metrics import RuntimeMetrics, kafka_lag
from sluice_runtime.server import (
    QueryHealth,
    RuntimeState,
    evaluate_readiness,
    parse_addr,
    parse_interval,
    readiness_bound,
    serve,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (None, 0.0),
        ("5 seconds", 5.0),
        ("1 minute", 60.0),
        ("500 ms", 0.5),
        ("1 hour 30 minutes", 5400.0),
        ("interval 2 minutes", 120.0),
    ],
)
def test_parse_interval(text: str | None, seconds: float) -> None:
    assert parse_interval(text) == seconds


def test_parse_interval_rejects() -> None:
    with pytest.raises(ValueError):
        parse_interval("5 fortnights")


def test_bound() -> None:
    assert readiness_bound(0) == 120.0
    assert readiness_bound(5) == 120.0
    assert readiness_bound(60) == 180.0
    assert readiness_bound(1, floor=2) == 3.0


def test_readiness() -> None:
    h = QueryHealth(active=True, last_progress_at=100.0)
    assert evaluate_readiness(h, 150.0, 60.0) == (True, "ok")
    ok, reason = evaluate_readiness(h, 161.0, 60.0)
    assert not ok and "no batch completed for 61s" in reason
    assert evaluate_readiness(QueryHealth(active=True), 1.0, 60.0) == (False, "no batch completed yet")
    assert not evaluate_readiness(QueryHealth(active=False, last_progress_at=1.0), 1.0, 60.0)[0]
    bad = QueryHealth(active=True, last_progress_at=1.0, exception="boom")
    assert evaluate_readiness(bad, 1.0, 60.0) == (False, "query failed: boom")
    assert (
        evaluate_readiness(QueryHealth(active=True, last_progress_at=1.0, draining=True), 1.0, 9)[1]
        == "draining"
    )


PROGRESS = {
    "batchId": 7,
    "numInputRows": 120,
    "inputRowsPerSecond": 10.0,
    "processedRowsPerSecond": 40.0,
    "durationMs": {"triggerExecution": 1500},
    "stateOperators": [
        {"numRowsTotal": 5, "memoryUsedBytes": 1000},
        {"numRowsTotal": 2, "memoryUsedBytes": 24},
    ],
    "sources": [
        {"endOffset": '{"orders":{"0":100,"1":50}}', "latestOffset": '{"orders":{"0":130,"1":50}}'},
        {"endOffset": {"other": {"0": 5}}, "latestOffset": {"other": {"0": 4}}},
    ],
    "observedMetrics": {"malformed-source-orders": {"malformed": 3}, "unrelated": {"x": 1}},
}


def test_lag() -> None:
    lags = {(lag.topic, lag.partition): lag.lag for lag in kafka_lag(PROGRESS)}
    assert lags == {("orders", "0"): 30, ("orders", "1"): 0, ("other", "0"): 0}
    assert kafka_lag({}) == []


def test_metrics_counted_once_per_batch() -> None:
    m = RuntimeMetrics()
    m.observe_recent("q", [PROGRESS, PROGRESS], True)
    m.observe_recent("q", [{**PROGRESS, "batchId": 6}], True)  # older: ignored for counters
    text = m.render().decode()
    assert 'sluice_input_rows_total{query="q"} 120.0' in text
    assert 'sluice_last_committed_batch_id{query="q"} 7.0' in text
    assert 'sluice_batch_duration_seconds{query="q"} 1.5' in text
    assert 'sluice_state_rows{query="q"} 7.0' in text
    assert 'sluice_state_memory_bytes{query="q"} 1024.0' in text
    assert 'sluice_kafka_lag_records{partition="0",query="q",topic="orders"} 30.0' in text
    assert 'sluice_query_active{query="q"} 1.0' in text
    assert 'sluice_malformed_records_total{query="q",source="source-orders"} 3.0' in text
    m.observe_recent("q", [{**PROGRESS, "batchId": 8, "numInputRows": 5}], False)
    text = m.render().decode()
    assert 'sluice_input_rows_total{query="q"} 125.0' in text
    assert 'sluice_query_active{query="q"} 0.0' in text


def test_observed_counts() -> None:
    assert malformed.observed_counts(PROGRESS) == {"source-orders": 3}
    assert malformed.observed_counts({"observedMetrics": {"malformed-s": {"malformed": None}}}) == {"s": 0}


def test_parse_addr() -> None:
    assert parse_addr("0.0.0.0:8080") == ("0.0.0.0", 8080)
    assert parse_addr("[::1]:9") == ("::1", 9)
    with pytest.raises(ValueError):
        parse_addr("8080")


def test_http_endpoint() -> None:
    drained = threading.Event()
    state = RuntimeState(bound=60.0, on_drain=drained.set)
    server = serve(state, "127.0.0.1:0")
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert urllib.request.urlopen(f"{base}/healthz").status == 200
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{base}/readyz")
        assert err.value.code == 503
        state.health = QueryHealth(active=True, last_progress_at=state.clock())
        assert urllib.request.urlopen(f"{base}/readyz").status == 200
        body = urllib.request.urlopen(f"{base}/metrics").read().decode()
        assert "sluice_ready 1.0" in body
        req = urllib.request.Request(f"{base}/drain", method="POST", data=b"")
        assert urllib.request.urlopen(req).status == 202
        assert drained.is_set()
    finally:
        server.shutdown()


def test_gate_holds_batches_after_close() -> None:
    gate = drain.BatchGate()
    gate.run("q", 0, lambda: None)
    assert gate.completed == {"q": 0}
    entered, proceed = threading.Event(), threading.Event()

    def slow() -> None:
        entered.set()
        proceed.wait(5)

    t = threading.Thread(target=gate.run, args=("q", 1, slow))
    t.start()
    entered.wait(5)
    assert not gate.close(timeout=0.1)  # batch 1 still writing
    proceed.set()
    assert gate.close(timeout=5)
    t.join(5)
    assert gate.completed == {"q": 1}
    errors: list[BaseException] = []

    def held() -> None:
        try:
            gate.run("q", 2, lambda: pytest.fail("must not write after close"))
        except drain.Draining as exc:
            errors.append(exc)

    h = threading.Thread(target=held)
    h.start()
    h.join(0.3)
    assert h.is_alive()  # held until released
    gate.release()
    h.join(5)
    assert gate.held == {"q": [2]} and len(errors) == 1


def test_roll_back_unstarted(tmp_path: Path) -> None:
    for d, ids in (("offsets", [0, 1, 2, 3]), ("commits", [0, 1])):
        (tmp_path / d).mkdir()
        for i in ids:
            (tmp_path / d / str(i)).write_text("x")
            (tmp_path / d / f".{i}.crc").write_text("x")
    assert drain.roll_back_unstarted(tmp_path) == [2, 3]
    assert drain.last_offsets(tmp_path) == drain.last_commit(tmp_path) == 1
    assert not (tmp_path / "offsets" / ".2.crc").exists()
    assert drain.wait_for_commit(tmp_path, 1, timeout=0.1)
    assert not drain.wait_for_commit(tmp_path, 2, timeout=0.1)
