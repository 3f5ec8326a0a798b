"""Which drivers start with executor pods (:mod:`sluice_runtime.standby_executors`)."""

from __future__ import annotations

import pytest
from sluice_runtime import cli
from sluice_runtime.standby_executors import HOLD, RELEASE, plan_for, start_conf

from tests.unit.runtime.test_runtime_config import REQUIRED, _resolve

K8S = "k8s://https://10.0.0.1:443"


@pytest.mark.parametrize(("conf", "executors"), [({"spark.executor.instances": "4"}, 4), ({}, 2)])
def test_an_elected_driver_on_kubernetes_that_releases_starts_without_executors(
        conf: dict[str, str], executors: int) -> None:
    policy = plan_for(conf, K8S, RELEASE, elected=True)
    assert policy.released and policy.executors == executors  # Spark's own default is 2
    assert start_conf(conf, policy) == {**conf, "spark.executor.instances": "0"}


def test_a_driver_without_election_is_always_active_and_starts_with_its_executors() -> None:
    conf = {"spark.executor.instances": "3"}
    policy = plan_for(conf, K8S, RELEASE, elected=False)
    assert not policy.released and start_conf(conf, policy) == conf


def test_hold_and_local_mode_start_as_configured() -> None:
    conf = {"spark.executor.instances": "3"}
    assert start_conf(conf, plan_for(conf, K8S, HOLD, elected=True)) == conf
    local = plan_for(conf, "local[*]", RELEASE, elected=True)
    assert (local.released, local.executors) == (False, 0)
    assert start_conf(conf, local) == conf


def test_bad_settings_are_refused_naming_them() -> None:
    with pytest.raises(ValueError, match="SLUICE_STANDBY_EXECUTORS: 'keep'"):
        plan_for({}, K8S, "keep", elected=True)
    with pytest.raises(ValueError, match=r"spark\.executor\.instances must be a whole number"):
        plan_for({"spark.executor.instances": "two"}, K8S, RELEASE, elected=True)


def test_the_runtime_reads_the_mode_from_its_environment_and_refuses_an_unknown_one() -> None:
    assert _resolve([], dict(REQUIRED)).standby_executors == HOLD
    assert _resolve([], {**REQUIRED, "SLUICE_STANDBY_EXECUTORS": "release"}).standby_executors == RELEASE
    with pytest.raises(cli.ConfigError, match="SLUICE_STANDBY_EXECUTORS: 'keep'"):
        _resolve([], {**REQUIRED, "SLUICE_STANDBY_EXECUTORS": "keep", "SLUICE_MASTER": K8S,
                      "SLUICE_LEASE_NAME": "q-driver", "SLUICE_LEASE_NAMESPACE": "ns"})


def test_spark_submit_launches_without_a_zero_executor_count_which_it_refuses() -> None:
    from sluice_runtime.session import launch_settings

    settings = {"spark.executor.instances": "0", "spark.app.name": "q"}
    assert launch_settings(settings) == {"spark.app.name": "q"}  # the builder gives the context the 0
    assert launch_settings({**settings, "spark.executor.instances": "3"}) == {**settings,
                                                                              "spark.executor.instances": "3"}
