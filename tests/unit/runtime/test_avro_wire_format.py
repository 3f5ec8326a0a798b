"""The pure parts of avro sources and sinks: the Confluent wire header, the settings from the
environment the operator sets, the reader schema with its decoded marker, what keeps a plan from
starting, and how an unknown schema id is recognised."""

from __future__ import annotations

import json
import struct

import pytest
from sluice.core.plan import model
from sluice_runtime import avro, cli
from sluice_runtime.avro import AvroConfigError, AvroSettings, Registry

READER = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]})


def _schema(subject: str = "orders-value", schema_id: int | None = 3) -> model.RegistrySchema:
    return model.RegistrySchema.model_validate(
        {"subject": subject, "schema": READER, "id": schema_id, "version": 1 if schema_id else None})


def _plan(source_format: str = "avro", sink_format: str = "avro") -> model.Plan:
    cols = [model.FieldSpec(name="id", type="string")]
    source_schema = _schema() if source_format == "avro" else None
    sink_schema = _schema("out-value", None) if sink_format == "avro" else None
    return model.Plan(
        settings=model.PinnedSettings(shuffle_partitions=2),
        steps=[
            model.KafkaSourceV1(id="src", schema=cols, source="orders", topic="orders", columns=cols,
                                format=source_format, value_schema=source_schema),
            model.KafkaSinkV1(id="sink", inputs=["src"], schema=cols, topic="out", format=sink_format,
                              value_schema=sink_schema),
        ],
        output_schema=cols,
    )


def test_the_wire_header_is_magic_zero_and_a_big_endian_id() -> None:
    assert avro.wire_header(1) == b"\x00\x00\x00\x00\x01"
    assert avro.wire_header(0x01020304) == b"\x00\x01\x02\x03\x04"
    assert avro.parse_wire_header(avro.wire_header(258) + b"payload") == 258
    assert struct.unpack(">bI", avro.wire_header(avro.MAX_SCHEMA_ID)) == (0, avro.MAX_SCHEMA_ID)
    for value in (None, b"", b"\x00\x00\x00\x01", b"\x01\x00\x00\x00\x01x", b'{"a": 1}'):
        assert avro.parse_wire_header(value) is None
    with pytest.raises(ValueError, match="schema id -1"):
        avro.wire_header(-1)
    with pytest.raises(ValueError):
        avro.wire_header(avro.MAX_SCHEMA_ID + 1)


def test_the_sink_schema_id_comes_from_its_variable() -> None:
    assert avro.parse_schema_id(None) is None
    assert avro.parse_schema_id("  ") is None
    assert avro.parse_schema_id(" 42 ") == 42
    for bad in ("x", "-1", "1.5", str(2**31)):
        with pytest.raises(AvroConfigError, match="SLUICE_SINK_SCHEMA_ID must be a schema id"):
            avro.parse_schema_id(bad)


def test_settings_from_the_environment() -> None:
    assert AvroSettings.from_env({}) == AvroSettings()
    url = "http://registry:8080/apis/ccompat/v7"
    settings = AvroSettings.from_env({"SLUICE_SCHEMA_REGISTRY_URL": url, "SLUICE_SINK_SCHEMA_ID": "7",
                                      "SLUICE_SCHEMA_REGISTRY_USERNAME": "u",
                                      "SLUICE_SCHEMA_REGISTRY_PASSWORD": "s3cret"})
    assert settings.registry == Registry(url, "u", "s3cret") and settings.sink_schema_id == 7
    assert "s3cret" not in repr(settings.registry)
    with pytest.raises(AvroConfigError, match="SLUICE_SCHEMA_REGISTRY_CA is not a PEM certificate"):
        AvroSettings.from_env({"SLUICE_SCHEMA_REGISTRY_URL": url, "SLUICE_SCHEMA_REGISTRY_CA": "not pem"})
    with pytest.raises(AvroConfigError, match="go together"):
        AvroSettings.from_env({"SLUICE_SCHEMA_REGISTRY_URL": url, "SLUICE_SCHEMA_REGISTRY_USERNAME": "u"})
    with pytest.raises(AvroConfigError, match="without SLUICE_SCHEMA_REGISTRY_URL"):
        AvroSettings.from_env({"SLUICE_SCHEMA_REGISTRY_USERNAME": "u",
                               "SLUICE_SCHEMA_REGISTRY_PASSWORD": "p"})


def test_the_cli_reads_the_settings_and_refuses_bad_ones() -> None:
    base = ["--plan", "p.json", "--checkpoint", "/c", "--bootstrap", "k:9092"]
    args = cli.build_parser().parse_args(["run", *base])
    env = {"SLUICE_SCHEMA_REGISTRY_URL": "http://r", "SLUICE_SINK_SCHEMA_ID": "9"}
    config = cli.resolve_config(args, env)
    assert config.avro.registry == Registry("http://r") and config.avro.sink_schema_id == 9
    assert cli.resolve_config(args, {}).avro == AvroSettings()
    with pytest.raises(cli.ConfigError, match="SLUICE_SINK_SCHEMA_ID"):
        cli.resolve_config(args, {"SLUICE_SINK_SCHEMA_ID": "nine"})


def test_the_reader_schema_gets_the_decoded_marker_with_a_default() -> None:
    marked = json.loads(avro.reader_with_marker(READER))
    assert marked["fields"] == [{"name": "id", "type": "string"},
                                {"name": avro.DECODED, "type": "boolean", "default": True}]
    assert json.loads(avro.reader_with_marker(json.dumps(marked))) == marked  # never twice
    with pytest.raises(AvroConfigError, match="record schema"):
        avro.reader_with_marker('"string"')


def test_what_keeps_a_plan_from_starting_names_the_variable() -> None:
    assert avro.startup_problems(_plan("json", "json"), AvroSettings()) == []
    ready = AvroSettings(registry=Registry("http://r"), sink_schema_id=5)
    assert avro.startup_problems(_plan(), ready) == []
    problems = avro.startup_problems(_plan(), AvroSettings())
    assert len(problems) == 2
    assert problems[0].startswith("SLUICE_SCHEMA_REGISTRY_URL is not set: avro source orders")
    assert problems[1].startswith("SLUICE_SINK_SCHEMA_ID is not set: the avro sink of topic out")
    # writer schemas given up front (a test's static frames) stand in for the registry
    given = AvroSettings(sink_schema_id=5, writers={"orders-value": {3: READER}})
    assert avro.startup_problems(_plan(), given) == []


def test_writer_schemas_include_the_pinned_one_and_need_a_registry_otherwise() -> None:
    given = AvroSettings(writers={"orders-value": {4: "w4"}})
    assert given.writer_schemas(_schema()) == {3: READER, 4: "w4"}
    with pytest.raises(AvroConfigError, match="SLUICE_SCHEMA_REGISTRY_URL is not set"):
        AvroSettings().writer_schemas(_schema())
    assert avro.refetched(given, _plan()) is None  # nothing to fetch from
    with pytest.raises(AvroConfigError, match="SLUICE_SINK_SCHEMA_ID is not set"):
        AvroSettings().require_sink_id("out-value")
    assert AvroSettings(sink_schema_id=0).require_sink_id("out-value") == 0


def test_an_unknown_schema_id_failure_is_recognised_by_its_marker() -> None:
    class StreamingFailure(Exception):
        desc = "[USER_RAISED_EXCEPTION] SLUICE_UNKNOWN_SCHEMA_ID: a record of topic t ..."

    assert avro.is_unknown_schema_id(StreamingFailure("opaque"))
    assert avro.is_unknown_schema_id(RuntimeError("... SLUICE_UNKNOWN_SCHEMA_ID: ..."))
    assert not avro.is_unknown_schema_id(RuntimeError("malformed record in topic t"))
    assert not avro.is_unknown_schema_id(None)


def _self_signed_pem() -> str:
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "registry-ca")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def test_an_https_registry_s_ca_comes_as_pem_text() -> None:
    pem = _self_signed_pem()
    env = {"SLUICE_SCHEMA_REGISTRY_URL": "https://registry:8443", "SLUICE_SCHEMA_REGISTRY_CA": pem}
    registry = AvroSettings.from_env(env).registry
    assert registry is not None and registry.ca == pem.strip()
    assert "BEGIN CERTIFICATE" not in repr(registry)


def test_a_registry_that_cannot_be_read_again_leaves_the_writer_schemas_as_they_are(
        caplog: pytest.LogCaptureFixture) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on: connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = AvroSettings(registry=Registry(f"http://127.0.0.1:{port}", timeout=2),
                            writers={"orders-value": {3: READER}})
    with caplog.at_level("WARNING"):
        assert avro.refetched(settings, _plan()) is None
    assert "could not be fetched again" in caplog.text and f"127.0.0.1:{port}" in caplog.text
    with pytest.raises(AvroConfigError, match=f"schema registry http://127.0.0.1:{port}: GET /subjects/"):
        AvroSettings(registry=settings.registry).writer_schemas(_schema())


def test_a_record_that_did_not_decode_is_told_by_a_field_that_cannot_be_null() -> None:
    nullable = json.dumps({"type": "record", "name": "R", "fields": [
        {"name": "a", "type": ["null", "string"], "default": None}, {"name": "b", "type": "null"}]})
    assert avro.decoded_field(READER) == "id" and avro.reader_for(READER) == READER
    assert avro.decoded_field(nullable) == avro.DECODED
    assert json.loads(avro.reader_for(nullable))["fields"][-1]["name"] == avro.DECODED
