"""The alert rules, unit-tested with Prometheus' own rule engine (``promtool``, Debian's
``prometheus`` package, installed on first use; a machine that cannot install it fails here).

The rules have one place, the chart's ``templates/prometheusrule.yaml``; ``charts/sluice/files/
alerts.yaml`` is that template rendered with the default values (``sluice_dev.alerts``), checked
here to be current. ``alert_rules_test.yaml`` beside this file holds the promtool cases: each
alert firing (exact labels and annotations) and not firing. ``SluiceOperatorDown``, which the
chart makes only with its ServiceMonitor, is tested on the chart rendered with it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from sluice_dev import alerts
from sluice_dev.platform.common import PlatformError
from sluice_dev.platform.promtool import ensure_promtool

from tests.support import helm as chart

pytestmark = pytest.mark.integration

HERE = Path(__file__).resolve().parent
CASES = HERE / "alert_rules_test.yaml"
#: the alerts the chart had before issue 32 (kept, under the same names)
FIRST_FIVE = {"SluiceQueryNotProgressing", "SluiceKafkaLagGrowing", "SluiceUpgradeRolledBack",
              "SluiceQueriesDegraded", "SluiceOperatorReconcileErrors"}
ADDED = {"SluiceLateRowsDropped", "SluiceStateVolumeFilling", "SluiceUpgradeFailed", "SluiceFailoverStorm",
         "SluiceLeaseNotRenewed"}


@pytest.fixture(scope="module")
def promtool() -> Path:
    try:
        return ensure_promtool()
    except PlatformError as exc:
        pytest.fail(str(exc), pytrace=False)


def run(promtool: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool), *map(str, args)], capture_output=True, text=True, check=False,
                          timeout=120)


def alert_names(rules: dict[str, Any]) -> list[str]:
    return [r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r]


def test_the_plain_rules_file_is_the_chart_rendered() -> None:
    text = alerts.RULES.read_text()
    assert alerts.render(chart.helm_binary()) == text, (
        "charts/sluice/files/alerts.yaml is not the chart's PrometheusRule rendered with the default "
        "values: run `.venv/bin/python -m sluice_dev.alerts --write`")
    names = alert_names(yaml.safe_load(text))
    assert len(names) == len(set(names))
    assert set(names) == FIRST_FIVE | ADDED  # SluiceOperatorDown comes with the ServiceMonitor only


def test_promtool_accepts_the_rules(promtool: Path, tmp_path: Path) -> None:
    checked = run(promtool, "check", "rules", alerts.RULES)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # and the chart's, with every switch on and every tuning value moved
    rule = "metrics.prometheusRule."
    tuned = {"metrics.serviceMonitor.enabled": "true",
             f"{rule}notProgressingWindow": "30m", f"{rule}lagGrowingFor": "1h",
             f"{rule}lateRowsMinRatio": "0", f"{rule}lateRowsWindow": "1h",
             f"{rule}stateVolumeMinFreeRatio": "0.05", f"{rule}stateVolumeFullWithinHours": "96",
             f"{rule}failoverStormCount": "5", f"{rule}failoverStormWindow": "1h"}
    groups = alerts.rendered_groups(chart.helm_binary(), tuned)
    path = tmp_path / "tuned.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    checked = run(promtool, "check", "rules", path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SluiceOperatorDown" in alert_names({"groups": groups})
    text = path.read_text()
    for fragment in ("[30m]", "[1h]", "> 0\n", "< 0.05", "96 * 3600", ">= 5"):
        assert fragment in text, fragment


def test_every_alert_fires_and_does_not(promtool: Path) -> None:
    cases = yaml.safe_load(CASES.read_text())
    assert [(HERE / f).resolve() for f in cases["rule_files"]] == [alerts.RULES.resolve()]
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in cases["tests"]:
        for check in case["alert_rule_test"]:
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = set(alert_names(yaml.safe_load(alerts.RULES.read_text())))
    assert names - firing == set(), "alerts with no case where they fire"
    assert names - quiet == set(), "alerts with no case where they stay quiet"
    assert firing | quiet <= names, "cases of alerts that do not exist"
    tested = run(promtool, "test", "rules", CASES)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_a_rule_that_does_not_fire_fails_its_case(promtool: Path, tmp_path: Path) -> None:
    """The cases can fail: with one rule made never to fire, promtool names it."""
    rules = yaml.safe_load(alerts.RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == "SluiceFailoverStorm":
                rule["expr"] = "vector(1) < 0"
    broken = tmp_path / "rules.yaml"
    broken.write_text(yaml.safe_dump(rules))
    cases = yaml.safe_load(CASES.read_text())
    cases["rule_files"] = [str(broken)]
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump(cases))
    tested = run(promtool, "test", "rules", path)
    assert tested.returncode != 0
    assert "alertname: SluiceFailoverStorm" in tested.stdout + tested.stderr
    assert "alertname: SluiceLateRowsDropped" not in tested.stdout + tested.stderr


def test_operator_down_with_the_service_monitor(promtool: Path, tmp_path: Path) -> None:
    groups = alerts.rendered_groups(chart.helm_binary(), {"metrics.serviceMonitor.enabled": "true"})
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": groups}))
    job = 'job="sluice-operator-metrics", namespace="sluice-system"'
    description = ("No replica of the Sluice operator sluice-system/sluice-operator has answered a scrape "
                   "for 10 minutes: StreamingQueries are not reconciled (running drivers go on). kubectl get "
                   "pods -n sluice-system.")
    down = {"exp_labels": {"severity": "critical"},
            "exp_annotations": {"summary": "No Sluice operator replica is up", "description": description}}
    cases = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [
            {"name": "both replicas down, then the series gone", "interval": "1m",
             "input_series": [{"series": f'up{{{job}, pod="a"}}', "values": "0x20"},
                              {"series": f'up{{{job}, pod="b"}}', "values": "1x5 0x15"}],
             "alert_rule_test": [
                 {"eval_time": "10m", "alertname": "SluiceOperatorDown"},  # pending
                 {"eval_time": "20m", "alertname": "SluiceOperatorDown", "exp_alerts": [down]},
                 {"eval_time": "40m", "alertname": "SluiceOperatorDown", "exp_alerts": [down]},  # absent()
             ]},
            {"name": "one replica (the leader or a standby) up is enough", "interval": "1m",
             "input_series": [{"series": f'up{{{job}, pod="a"}}', "values": "0x30"},
                              {"series": f'up{{{job}, pod="b"}}', "values": "1x30"},
                              {"series": 'up{job="sluice-operator-metrics", namespace="elsewhere", pod="c"}',
                               "values": "0x30"}],
             "alert_rule_test": [{"eval_time": "20m", "alertname": "SluiceOperatorDown"}]},
        ],
    }
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump(cases))
    tested = run(promtool, "test", "rules", path)
    assert tested.returncode == 0, tested.stdout + tested.stderr
