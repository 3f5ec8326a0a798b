"""The operator's avro driver environment and the runtime agree (issue 30): the driver container of a
plan with an avro source and sink, its env resolved as the kubelet does, gives the runtime's own
parser the registry (URL, basic auth, CA) and the sink schema id, and the runtime sees nothing missing
for that plan (``sluice_runtime.avro.startup_problems``)."""

from __future__ import annotations

import json

from sluice.core.compiler import CompileTarget, compile_query
from sluice.core.plan.model import RegistrySchema
from sluice.core.spec import QuerySpec
from sluice.operator import builders
from sluice.operator.handlers.admission import self_signed_certificate
from sluice_runtime import cli
from sluice_runtime.avro import startup_problems

from tests.support.operator_fixtures import cluster_spec, context, query_spec
from tests.unit.operator.test_runtime_operator_contract import FIELDS, kubelet_env

ORDER = {"type": "record", "name": "Order", "fields": [{"name": "customer", "type": "string"},
                                                       {"name": "amount", "type": "double"}]}
CA = self_signed_certificate(["registry.shop"])[0].decode()
SECRETS = {("registry-user", "username"): "sluice", ("registry-user", "password"): "p4ss",
           ("registry-ca", "ca.crt"): CA}
REGISTRY = {"url": "https://registry.shop:8081/apis/ccompat/v7", "basicAuthSecret": "registry-user",
            "tlsSecret": "registry-ca"}


def test_an_avro_plans_driver_env_is_what_the_runtime_needs() -> None:
    spec = query_spec(sources=[{"name": "orders", "topic": "orders", "format": "avro"}],
                      sql="SELECT customer, sum(amount) AS total FROM orders GROUP BY customer",
                      sink={"topic": "totals", "format": "avro", "key": ["customer"], "outputMode": "update"})
    pinned = RegistrySchema(subject="orders-value", schema_=json.dumps(ORDER), id=5, version=2)
    plan = compile_query(QuerySpec.model_validate(spec), CompileTarget(schemas={"orders-value": pinned}))
    ctx = context(spec=spec, cluster=cluster_spec(schemaRegistry=REGISTRY), sink_schema_ids={plan.hash: 9})
    deployment = builders.driver_deployment(ctx, plan.hash, "totals-plan-x")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = kubelet_env(container["env"], SECRETS, FIELDS, container["resources"])
    argv = [*container.get("command", ["sluice-runtime", "run"])[1:], *container.get("args", [])]
    config = cli.resolve_config(cli.build_parser().parse_args(argv), env)
    registry = config.avro.registry
    assert registry is not None
    assert (registry.url, registry.username, registry.password, registry.ca) == (
        REGISTRY["url"], "sluice", "p4ss", CA.strip())  # the runtime strips the PEM text
    assert config.avro.sink_schema_id == 9
    assert startup_problems(plan, config.avro) == []
