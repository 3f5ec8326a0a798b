"""The allow-list of Kafka client settings (``sluice.core.kafkaclient``): one table, owned keys refused
with their path, librdkafka names derived per client, and the claims of an OAUTHBEARER token."""

from __future__ import annotations

import base64
import json

import pytest
from sluice.core import kafkaclient
from sluice.core.kafkaclient import BY_KEY, CLIENTS, SETTINGS, ClientSettings, Problem, problems, token_claims


def jwt(claims: dict[str, object], header: dict[str, object] | None = None, signature: str = "c2ln") -> str:
    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part(header or {'alg': 'RS256'})}.{part(claims)}.{signature}"


def test_the_table_names_each_key_once_and_owns_none_of_them() -> None:
    keys = [s.key for s in SETTINGS]
    assert len(keys) == len(set(keys)) == len(BY_KEY)
    for setting in SETTINGS:
        assert setting.clients and setting.clients <= set(CLIENTS), setting.key
        assert kafkaclient._owned(setting.key) is None, setting.key
    # what the brief's users ask for most is there, with its librdkafka name where there is one
    assert BY_KEY["client.rack"].librdkafka == "client.rack"
    assert BY_KEY["fetch.max.wait.ms"].librdkafka == "fetch.wait.max.ms"
    assert BY_KEY["receive.buffer.bytes"].librdkafka == "socket.receive.buffer.bytes"
    assert BY_KEY["delivery.timeout.ms"].librdkafka is None  # bound to the transaction timeout
    assert BY_KEY["max.poll.records"].librdkafka is None


@pytest.mark.parametrize(("client", "key", "message"), [
    ("producer", "transactional.id", "owned by the operator: derived from the query's identity"),
    ("producer", "acks", "owned by the operator: the sink's delivery decides"),
    ("producer", "enable.idempotence", "owned by the operator"),
    ("consumer", "isolation.level", "owned by the operator"),
    ("consumer", "group.id", "owned by the operator: derived from the query's identity"),
    ("consumer", "auto.offset.reset", "owned by the operator: the source's startingOffsets"),
    ("admin", "bootstrap.servers", "owned by the operator: spec.kafka.bootstrapServers"),
    ("admin", "sasl.jaas.config", "owned by the operator: spec.kafka.sasl"),
    ("consumer", "ssl.truststore.location", "owned by the operator: spec.kafka.tls"),
    ("consumer", "value.deserializer", "owned by the operator"),
])
def test_owned_keys_are_refused_with_their_path(client: str, key: str, message: str) -> None:
    assert problems({client: {key: "x"}}) == [Problem((client, key), message)]


def test_unknown_and_misplaced_keys_and_bad_values_are_refused() -> None:
    found = problems({
        "consumer": {"fetch.wait.max.ms": "5", "linger.ms": "5", "fetch.min.bytes": "a lot",
                     "client.rack": "eu-1a"},
        "producer": {"compression.type": "brotli", "batch.size": "0", "linger.ms": "10"},
        "admin": {"client.dns.lookup": "use_all_dns_ips"},
    })
    assert [(p.loc, p.message.split(" (")[0]) for p in found] == [
        (("consumer", "fetch.wait.max.ms"), "not an allowed Kafka client setting"),
        (("consumer", "linger.ms"), "not a consumer setting"),
        (("consumer", "fetch.min.bytes"), "must be an integer"),
        (("producer", "compression.type"), "must be one of none, gzip, snappy, lz4, zstd"),
        (("producer", "batch.size"), "must be at least 1 and at most 2147483647"),
    ]
    assert "allowed for consumer: client.rack, fetch.min.bytes" in found[0].message
    assert found[1].message.endswith("(it applies to: producer)")
    assert problems(None) == [] and problems({"consumer": "x"}) == []


def test_each_client_gets_its_settings_in_its_dialect() -> None:
    settings = ClientSettings(
        consumer={"fetch.max.wait.ms": "250", "client.rack": "eu-1a", "max.poll.records": "100"},
        producer={"linger.ms": "5", "delivery.timeout.ms": "90000", "max.request.size": "2097152"},
        admin={"request.timeout.ms": "15000"},
    )
    assert settings.java("consumer") == {"client.rack": "eu-1a", "fetch.max.wait.ms": "250",
                                         "max.poll.records": "100"}
    assert settings.spark("producer") == {"kafka.delivery.timeout.ms": "90000", "kafka.linger.ms": "5",
                                          "kafka.max.request.size": "2097152"}
    assert settings.librdkafka("consumer") == {"client.rack": "eu-1a", "fetch.wait.max.ms": "250"}
    assert settings.librdkafka("producer") == {"linger.ms": "5", "message.max.bytes": "2097152"}
    assert settings.librdkafka("admin") == {"socket.timeout.ms": "15000"}
    assert ClientSettings.from_json(settings.to_json()) == settings
    assert json.loads(ClientSettings(admin={"retry.backoff.ms": "5"}).to_json()) == {
        "admin": {"retry.backoff.ms": "5"}}
    assert kafkaclient.EMPTY.is_empty() and not settings.is_empty()


def test_the_record_refuses_what_the_model_refuses() -> None:
    with pytest.raises(ValueError, match=r"producer\.acks: owned by the operator"):
        ClientSettings(producer={"acks": "1"})
    for text, message in (("{", "not JSON"), ('{"other": {}}', "keys consumer, producer, admin"),
                          ('{"consumer": {"fetch.min.bytes": 1}}', "consumer: must be an object of strings")):
        with pytest.raises(ValueError, match=message):
            ClientSettings.from_json(text)


def test_every_librdkafka_name_is_taken_by_confluent_kafka() -> None:
    """Each mapped name with a valid value creates the client it is for (librdkafka refuses unknown
    names and values out of range at creation)."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient

    def value(setting: kafkaclient.ClientSetting) -> str:
        if setting.key == "fetch.max.bytes":  # librdkafka: at least message.max.bytes (1000000)
            return "52428800"
        if setting.choices:
            return setting.choices[-1]
        return str(max(setting.minimum or 0, 1000)) if setting.minimum is not None else "eu-1a"

    settings = ClientSettings(**{c: {s.key: value(s) for s in SETTINGS if c in s.clients} for c in CLIENTS})
    base = {"bootstrap.servers": "127.0.0.1:1"}
    Consumer({**base, "group.id": "g", **settings.librdkafka("consumer")}).close()
    Producer({**base, **settings.librdkafka("producer")}).flush(0)
    AdminClient({**base, **settings.librdkafka("admin")})


def test_token_claims_read_sub_and_exp() -> None:
    assert token_claims(jwt({"sub": "svc", "exp": 1700000000, "iat": 1})) == kafkaclient.TokenClaims(
        "svc", 1700000000.0)
    assert token_claims("  " + jwt({"sub": "a", "exp": 1.5}) + "\n").expires == 1.5
    for token, message in (
        ("abc", "not a JWT"),
        ("a.b.c", "header is not base64url JSON"),
        (jwt({"exp": 1}), "no 'sub' claim"),
        (jwt({"sub": "a", "exp": "soon"}), "no numeric 'exp' claim"),
        (jwt({"sub": "a", "exp": True}), "no numeric 'exp' claim"),
    ):
        with pytest.raises(ValueError, match=message):
            token_claims(token)
