"""The platform's schema registry (Apicurio Registry, Confluent-compatible API) for real, through
confluent-kafka's own clients: Avro and Protobuf records in the Confluent wire format (magic byte 0,
the 4-byte schema id, the payload), compatibility checks under BACKWARD, the latest version of a
subject. Nothing skips: a registry that cannot start fails the tests."""

from __future__ import annotations

import http.client
import json
import socket
import struct
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from sluice_dev.platform import common
from sluice_dev.platform import registry as component

from tests.support.registry_fixture import SchemaRegistry

pytestmark = pytest.mark.integration


def _record(*fields: dict[str, Any]) -> str:
    return json.dumps({"type": "record", "name": "Order", "namespace": "sluice.test", "fields": list(fields)})


ORDER_V1 = _record({"name": "id", "type": "long"}, {"name": "customer", "type": "string"})
#: v1 plus an optional field with a default: a reader of v2 reads v1's records (BACKWARD)
ORDER_V2 = _record(
    {"name": "id", "type": "long"}, {"name": "customer", "type": "string"},
    {"name": "email", "type": ["null", "string"], "default": None},
)
#: v1 with ``id`` a string: a reader of it cannot read v1's longs
ORDER_ID_STRING = _record({"name": "id", "type": "string"}, {"name": "customer", "type": "string"})


#: seconds: a request left unanswered fails the test, rather than waiting for pytest's timeout. The
#: serdes keep confluent-kafka 2.16's default subject name strategy (the associated subject, which
#: asks Confluent's ``/associations``: Apicurio answers 404, then the fallback ``<topic>-value``)
TIMEOUT = 30


def _topic() -> str:
    return f"orders-{uuid.uuid4().hex[:8]}"


def _client(registry: SchemaRegistry) -> SchemaRegistryClient:
    """A fresh client: its caches (of the latest version, among others) hold nothing yet."""
    return SchemaRegistryClient({"url": registry.url, "timeout": TIMEOUT})


def _wire(data: bytes) -> tuple[int, int]:
    """The Confluent framing of a serialized record: (magic byte, schema id)."""
    magic, schema_id = struct.unpack(">bI", data[:5])
    return magic, schema_id


def test_the_platform_exports_the_confluent_compatible_base_url(
    schema_registry: SchemaRegistry, platform_state: Path
) -> None:
    assert schema_registry.env == {"SLUICE_SCHEMA_REGISTRY_URL": schema_registry.url}
    assert schema_registry.url.startswith("http://127.0.0.1:")
    assert schema_registry.url.endswith("/apis/ccompat/v7")
    # the global rule is Confluent Schema Registry's default
    assert _client(schema_registry).get_compatibility() == "BACKWARD"
    # a second start for the same state dir keeps the running registry
    again = component.start(platform_state)
    assert again.env["SLUICE_SCHEMA_REGISTRY_URL"] == schema_registry.url
    assert again.logs == [schema_registry.log]


def test_the_global_rule_applies_to_a_subject_without_its_own(schema_registry: SchemaRegistry) -> None:
    client = _client(schema_registry)
    subject = f"{_topic()}-value"
    client.register_schema(subject, Schema(ORDER_V1, "AVRO"))
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(ORDER_ID_STRING, "AVRO"))
    assert refused.value.http_status_code == 409


def test_paths_it_does_not_have_are_answered(schema_registry: SchemaRegistry) -> None:
    """Apicurio 3.3.3 left about one such request in 200 unanswered (docs/formats.md); 2.6.13 answers
    them all, on one kept-alive connection as a client's."""
    netloc = schema_registry.url.split("/")[2]
    path = schema_registry.url.split(netloc, 1)[1]
    connection = http.client.HTTPConnection(netloc, timeout=5)
    try:
        for n in range(200):
            connection.request("GET", f"{path}/associations/resources/default/orders-{n}-value")
            reply = connection.getresponse()
            reply.read()
            assert reply.status == 404
    finally:
        connection.close()


def test_a_registry_that_cannot_start_names_its_log(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind((component.HOST, 0))
        taken.listen()
        with pytest.raises(common.PlatformError) as failed:
            component.start(tmp_path, port=taken.getsockname()[1])
    message = str(failed.value)
    assert message.startswith("registry: process exited with code ")
    assert message.endswith(f"(log: {tmp_path / 'registry' / 'registry.log'})")
    assert common.read_pid(tmp_path / "registry" / "registry.pid") is None


def test_avro_record_round_trips_in_the_confluent_wire_format(schema_registry: SchemaRegistry) -> None:
    client = _client(schema_registry)
    topic = _topic()
    context = SerializationContext(topic, MessageField.VALUE)
    serializer = AvroSerializer(client, ORDER_V1)  # registers the schema on first use

    data = serializer({"id": 7, "customer": "ada"}, context)

    registered = client.get_latest_version(f"{topic}-value")
    assert registered.version == 1
    assert _wire(data) == (0, registered.schema_id)
    assert json.loads(registered.schema.schema_str or "")["fields"][0] == {"name": "id", "type": "long"}
    assert AvroDeserializer(client)(data, context) == {"id": 7, "customer": "ada"}
    # the same schema under another subject has the same id, as with Confluent's registry
    assert client.register_schema(f"{_topic()}-value", Schema(ORDER_V1, "AVRO")) == registered.schema_id


def test_compatibility_under_backward(schema_registry: SchemaRegistry) -> None:
    client = _client(schema_registry)
    topic = _topic()
    subject = f"{topic}-value"
    first = client.register_schema(subject, Schema(ORDER_V1, "AVRO"))
    client.set_compatibility(subject_name=subject, level="BACKWARD")
    assert client.get_compatibility(subject) == "BACKWARD"

    assert client.test_compatibility(subject, Schema(ORDER_V2, "AVRO")) is True
    assert client.test_compatibility(subject, Schema(ORDER_ID_STRING, "AVRO")) is False
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(ORDER_ID_STRING, "AVRO"))
    assert refused.value.http_status_code == 409

    second = client.register_schema(subject, Schema(ORDER_V2, "AVRO"))
    assert second != first
    latest = _client(schema_registry).get_latest_version(subject)
    assert (latest.version, latest.schema_id) == (2, second)
    names = [field["name"] for field in json.loads(latest.schema.schema_str or "")["fields"]]
    assert names == ["id", "customer", "email"]
    assert client.get_subjects().count(subject) == 1
    assert client.get_versions(subject) == [1, 2]

    # a v1 record read with v2 as the reader's schema: the new field takes its default
    context = SerializationContext(topic, MessageField.VALUE)
    data = AvroSerializer(client, ORDER_V1, conf={"auto.register.schemas": False})(
        {"id": 1, "customer": "bob"}, context
    )
    assert _wire(data) == (0, first)
    back = AvroDeserializer(client, ORDER_V2)(data, context)
    assert back == {"id": 1, "customer": "bob", "email": None}


def _order_message_class() -> Any:
    """A Protobuf message class built at run time from a descriptor (no generated module)."""
    proto = descriptor_pb2.FileDescriptorProto(
        name=f"sluice_test/order_{uuid.uuid4().hex[:8]}.proto", package="sluice.test", syntax="proto3"
    )
    message = proto.message_type.add(name="Order")
    field = descriptor_pb2.FieldDescriptorProto
    message.field.add(name="id", number=1, type=field.TYPE_INT64, label=field.LABEL_OPTIONAL)
    message.field.add(name="customer", number=2, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("sluice.test.Order"))


def test_protobuf_record_round_trips_without_a_generated_module(schema_registry: SchemaRegistry) -> None:
    client = _client(schema_registry)
    order = _order_message_class()
    topic = _topic()
    context = SerializationContext(topic, MessageField.VALUE)
    conf = {"use.deprecated.format": False}

    data = ProtobufSerializer(order, client, conf)(order(id=9, customer="eve"), context)

    registered = client.get_latest_version(f"{topic}-value")
    assert registered.schema.schema_type == "PROTOBUF"
    assert _wire(data) == (0, registered.schema_id)
    assert data[5] == 0  # the message indexes: [0], the file's first message, written as one 0 byte
    back = ProtobufDeserializer(order, conf)(data, context)
    assert (back.id, back.customer) == (9, "eve")
