"""What the operator and the runtime export to Prometheus, for the tests of the PromQL that reads it
(the chart's alert rules, the Grafana dashboard): every sample name as Prometheus stores it
(``_total``, ``_bucket``, ...) with its label names, and the labels a scrape adds."""

from __future__ import annotations

import re
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families
from sluice.operator.metrics import OperatorMetrics
from sluice_runtime.metrics import RuntimeMetrics

#: labels the PodMonitor gives every sample of a driver pod (Prometheus adds namespace and pod)
DRIVER_SCRAPE_LABELS = frozenset({"namespace", "pod", "streamingquery"})
#: labels a scrape of the operator adds where a sample has none of its own (ServiceMonitor, honorLabels)
OPERATOR_SCRAPE_LABELS = frozenset({"namespace", "pod"})


def exported(*registries: CollectorRegistry) -> dict[str, set[str]]:
    """Every sample name the registries expose and its label names."""
    names: dict[str, set[str]] = {}
    for registry in registries:
        text = generate_latest(registry).decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                names.setdefault(sample.name, set()).update(sample.labels)
    return names


def touched(owner: object) -> None:
    """Each metric object of ``owner`` used once, so that labelled ones show."""
    for metric in vars(owner).values():
        if not isinstance(metric, MetricWrapperBase):
            continue
        labels = getattr(metric, "_labelnames", ())
        child: Any = metric.labels(*["x"] * len(labels)) if labels else metric
        if isinstance(metric, Counter):
            child.inc()
        elif isinstance(metric, Gauge):
            child.set(1)
        elif isinstance(metric, Histogram):
            child.observe(1)


def operator_and_runtime() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """The operator's and the runtime's sample names with their own labels."""
    operator, runtime = OperatorMetrics(CollectorRegistry()), RuntimeMetrics()
    touched(operator)
    touched(runtime)
    return exported(operator.registry), exported(runtime.registry)


def scraped() -> dict[str, set[str]]:
    """Every sample name with the labels it has once scraped: its own and the scrape's."""
    operator, runtime = operator_and_runtime()
    out = {name: labels | OPERATOR_SCRAPE_LABELS for name, labels in operator.items()}
    out.update({name: labels | DRIVER_SCRAPE_LABELS for name, labels in runtime.items()})
    return out


_METRIC = re.compile(r"\b(sluice_[a-z0-9_]+)\b")
_SELECTOR = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}")
_MATCHER = re.compile(r'(\w+)\s*(?:=~|!~|!=|=)\s*"')
_GROUPING = re.compile(r"\b(?:by|on|without|ignoring|group_left|group_right)\s*\(([^)]*)\)")


def metrics_in(expr: str) -> set[str]:
    """The Sluice metric names a PromQL expression reads."""
    return set(_METRIC.findall(expr))


def selectors_in(expr: str) -> list[tuple[str, list[str]]]:
    """Each ``name{...}`` selector of an expression: the name and the label names it matches on."""
    return [(name, _MATCHER.findall(body)) for name, body in _SELECTOR.findall(expr)]


def grouping_labels_in(expr: str) -> set[str]:
    """The labels of every ``by``/``on``/... clause of an expression."""
    labels = (label.strip() for clause in _GROUPING.findall(expr) for label in clause.split(","))
    return {label for label in labels if label}
