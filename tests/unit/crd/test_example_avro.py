"""examples/avro.yaml: its QueryCluster and StreamingQuery validate, and the query compiles once the
registry's schema of orders-value is given (as the operator gives it), with an avro sink schema."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from sluice.core.compiler import CompileTarget, compile_query
from sluice.core.formats import avro
from sluice.core.plan.model import RegistrySchema
from sluice.crd.querycluster import QueryClusterSpec
from sluice.crd.streamingquery import StreamingQuerySpec

EXAMPLE = Path(__file__).parents[3] / "examples" / "avro.yaml"
ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "customer", "type": "string"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
]}


def test_the_avro_example_validates_and_compiles() -> None:
    docs = {d["kind"]: d for d in yaml.safe_load_all(EXAMPLE.read_text())}
    cluster = QueryClusterSpec.model_validate(docs["QueryCluster"]["spec"])
    registry = cluster.schema_registry
    assert registry is not None and registry.basic_auth_secret == "registry-user"
    query = StreamingQuerySpec.model_validate(docs["StreamingQuery"]["spec"]).query()
    pinned = RegistrySchema(subject="orders-value", schema_=json.dumps(ORDER), id=1, version=1)
    plan = compile_query(query, CompileTarget(schemas={"orders-value": pinned}))
    schema = plan.sink.value_schema
    assert schema is not None and schema.subject == "revenue-per-minute-value"
    written = avro.parse(schema.schema_)
    assert isinstance(written, dict)
    assert [f["name"] for f in written["fields"]] == ["minute", "customer", "revenue"]
