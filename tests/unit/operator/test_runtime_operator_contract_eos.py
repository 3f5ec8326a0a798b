"""Who writes exactly-once output, from the QueryCluster to the runtime (issue 31): the driver
container's env, resolved as the kubelet does, gives the runtime's own parser the writers the
cluster names; without ``spec.exactlyOnce`` the env has no such variable (pods stay as they were)
and the driver writes."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from sluice.crd.querycluster import QueryClusterSpec
from sluice.operator import builders
from sluice_runtime import cli

from tests.support.operator_fixtures import cluster_spec, context
from tests.unit.operator.test_runtime_operator_contract import FIELDS, kubelet_env


def _driver(cluster: dict[str, Any]) -> tuple[list[dict[str, Any]], Any]:
    deployment = builders.driver_deployment(context(cluster=cluster), "h" * 64, "totals-plan-x")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = kubelet_env(container["env"], {}, FIELDS, container["resources"])
    argv = [*container.get("command", ["sluice-runtime", "run"])[1:], *container.get("args", [])]
    return container["env"], cli.resolve_config(cli.build_parser().parse_args(argv), env)


def test_the_cluster_s_task_writers_reach_the_runtime() -> None:
    _, config = _driver(cluster_spec(exactlyOnce={"writers": "tasks"}))
    assert config.eos_writers == "tasks"


@pytest.mark.parametrize("cluster", [cluster_spec(), cluster_spec(exactlyOnce={}),
                                     cluster_spec(exactlyOnce={"writers": "driver"})])
def test_without_task_writers_the_driver_writes_and_the_env_has_no_variable(cluster: dict[str, Any]) -> None:
    env, config = _driver(cluster)
    assert config.eos_writers == "driver"
    assert "SLUICE_EOS_WRITERS" not in {e["name"] for e in env}


def test_unknown_writers_are_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError, match=r"exactlyOnce\.writers"):
        QueryClusterSpec.model_validate(cluster_spec(exactlyOnce={"writers": "executors"}))
