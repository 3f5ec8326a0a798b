"""What a standby driver does with executor pods, from the QueryCluster to the runtime (issue 31):
the driver container's env, resolved as the kubelet does, gives the runtime's own parser the
cluster's ``standbyExecutors``; with the default (``hold``) the env has no such variable (the
pods stay as they were) and the runtime holds; the engine's digest moves only with ``release``."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from sluice.core.naming import STANDBY_EXECUTORS_ENV
from sluice.crd.engine import Engine
from sluice.crd.querycluster import QueryClusterSpec
from sluice_runtime.standby_executors import plan_for, start_conf

from tests.support.operator_fixtures import cluster_spec
from tests.unit.operator.test_runtime_operator_contract_eos import _driver


def test_release_makes_a_standby_with_executors_start_without_them() -> None:
    env, config = _driver(cluster_spec(executors=3, standbyExecutors="release"))
    assert {"name": STANDBY_EXECUTORS_ENV, "value": "release"} in env
    assert config.standby_executors == "release"
    policy = plan_for(config.conf, config.master, config.standby_executors, bool(config.lease_name))
    assert (policy.released, policy.executors) == (True, 3)
    assert start_conf(config.conf, policy)["spark.executor.instances"] == "0"
    assert config.conf["spark.executor.instances"] == "3"  # what the Lease's holder asks for


@pytest.mark.parametrize("cluster", [cluster_spec(executors=2),
                                     cluster_spec(executors=2, standbyExecutors="hold")])
def test_by_default_standbys_hold_their_executors_and_the_env_has_no_variable(
        cluster: dict[str, Any]) -> None:
    env, config = _driver(cluster)
    assert STANDBY_EXECUTORS_ENV not in {e["name"] for e in env}
    assert config.standby_executors == "hold"
    policy = plan_for(config.conf, config.master, config.standby_executors, bool(config.lease_name))
    assert not policy.released
    assert start_conf(config.conf, policy)["spark.executor.instances"] == "2"


def test_local_mode_has_nothing_to_release_and_no_variable() -> None:
    env, config = _driver(cluster_spec(standbyExecutors="release"))
    assert STANDBY_EXECUTORS_ENV not in {e["name"] for e in env}
    policy = plan_for(config.conf, config.master, config.standby_executors, bool(config.lease_name))
    assert (policy.released, policy.executors) == (False, 0)


def test_the_default_changes_no_engine_digest_and_release_does() -> None:
    def engine(**fields: Any) -> Engine:
        return QueryClusterSpec.model_validate(cluster_spec(executors=2, **fields)).engine("img:1")

    plain, held, released = engine(), engine(standbyExecutors="hold"), engine(standbyExecutors="release")
    assert "standbyExecutors" not in plain.canonical()
    assert plain.compute_digest() == held.compute_digest() != released.compute_digest()
    # the engine a rollout carries gives the cluster back its setting
    spec = QueryClusterSpec.model_validate(cluster_spec(executors=2))
    assert spec.with_engine(released).standby_executors == "release"
    assert spec.with_engine(plain).standby_executors == "hold"


def test_an_unknown_mode_is_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError, match=r"standbyExecutors"):
        QueryClusterSpec.model_validate(cluster_spec(standbyExecutors="keep"))


