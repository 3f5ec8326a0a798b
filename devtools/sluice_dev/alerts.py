"""Check or regenerate ``charts/sluice/files/alerts.yaml``, the chart's alert rules as a plain
Prometheus rules file.

The rules live in one place, the chart's ``templates/prometheusrule.yaml``. The plain file is that
template rendered by ``helm template`` with the chart's default values, its ``spec.groups`` as a
rules file (``rule_files:`` of a Prometheus without the Prometheus Operator). It holds every rule
but ``SluiceOperatorDown``, which the chart makes only with its ServiceMonitor (the job name is the
release's metrics Service). ``python -m sluice_dev.alerts`` exits 1 when the file is not the
template's rendering; ``--write`` writes it. ``tests/integration/test_alert_rules.py`` runs the
same check, then ``promtool check rules`` and ``promtool test rules`` on the file.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "sluice"
RULES = CHART / "files" / "alerts.yaml"
TEMPLATE = "templates/prometheusrule.yaml"
#: the release and namespace of the rendering (they name the operator only in SluiceOperatorDown)
RELEASE, NAMESPACE = "sluice", "sluice-system"
HEADER = (
    "# The Sluice alert rules as a plain Prometheus rules file, for a Prometheus without the Prometheus\n"
    "# Operator (rule_files:). Generated from charts/sluice/templates/prometheusrule.yaml with the\n"
    "# chart's default values: do not edit; edit the template and run\n"
    "# `.venv/bin/python -m sluice_dev.alerts --write`. docs/chart.md says what each alert means.\n"
    "# The query alerts expect the drivers' metrics with the labels namespace, pod and streamingquery\n"
    "# (the pod's sluice.dev/query label), and the operator's scraped with honor_labels: true.\n"
)


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the expressions) as literal blocks, as in the template."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def helm_binary() -> Path:
    """The helm the platform builds (cached after the first build)."""
    from sluice_dev.platform import kube

    return kube.provision() / "helm"


def rendered_groups(helm: Path, values: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """``spec.groups`` of the chart's PrometheusRule, rendered with ``--set`` ``values``."""
    sets = {"metrics.prometheusRule.enabled": "true", **(values or {})}
    argv = [str(helm), "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--show-only", TEMPLATE,
            *[arg for key, value in sets.items() for arg in ("--set", f"{key}={value}")]]
    out = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"helm template failed: {out.stderr.strip()}")
    groups: list[dict[str, Any]] = yaml.safe_load(out.stdout)["spec"]["groups"]
    return groups


def render(helm: Path) -> str:
    """The text of the plain rules file."""
    body = yaml.dump({"groups": rendered_groups(helm)}, Dumper=_Dumper, sort_keys=False, width=1 << 20,
                     allow_unicode=True)
    return HEADER + body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sluice_dev.alerts", description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write {RULES.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    text = render(helm_binary())
    if args.write:
        RULES.parent.mkdir(parents=True, exist_ok=True)
        RULES.write_text(text)
        print(f"wrote {RULES.relative_to(ROOT)}")
        return 0
    if not RULES.exists() or RULES.read_text() != text:
        print(f"{RULES.relative_to(ROOT)} is not {TEMPLATE} rendered with the default values: run "
              "`.venv/bin/python -m sluice_dev.alerts --write`", file=sys.stderr)
        return 1
    print(f"{RULES.relative_to(ROOT)} is current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
