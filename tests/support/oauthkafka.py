"""A real KRaft broker with a SASL/OAUTHBEARER listener, and the JWTs it accepts (integration tests).

The broker is the platform's (same jars, same base configuration: ``sluice_dev.platform.kafka``) with a
third listener, ``OAUTH`` (SASL_PLAINTEXT, mechanism OAUTHBEARER), whose tokens Kafka's secured
validator (``OAuthBearerValidatorCallbackHandler``) checks against a JWKS file: RS256 signatures of
a key made here, ``exp`` in the future. Kafka's *unsecured* validator would not do: it wants unsigned
tokens (``alg: none``, an empty signature), which the Java client's file-based login refuses to read
(``SerializedJwt`` wants three non-empty parts). The broker JVM allows the JWKS file's URL
(``org.apache.kafka.sasl.oauthbearer.allowed.urls``, required from Kafka 4.0 on).
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sluice_dev.platform import common
from sluice_dev.platform import kafka as kafka_component

HOST = "127.0.0.1"
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _uint(value: int) -> str:
    return _b64(value.to_bytes((value.bit_length() + 7) // 8, "big"))


@dataclass
class Issuer:
    """An RSA key that signs tokens (RS256) and the JWKS that publishes it."""

    key: Any
    kid: str = "sluice-test"

    @classmethod
    def new(cls, kid: str = "sluice-test") -> Issuer:
        from cryptography.hazmat.primitives.asymmetric import rsa

        return cls(rsa.generate_private_key(public_exponent=65537, key_size=2048), kid)

    def jwks(self) -> dict[str, Any]:
        numbers = self.key.public_key().public_numbers()
        return {"keys": [{"kty": "RSA", "kid": self.kid, "use": "sig", "alg": "RS256",
                          "n": _uint(numbers.n), "e": _uint(numbers.e)}]}

    def token(self, sub: str = "sluice", ttl: float = 3600.0, **claims: Any) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        now = int(time.time())
        header = _b64(json.dumps({"alg": "RS256", "typ": "JWT", "kid": self.kid}).encode())
        body = _b64(json.dumps({"sub": sub, "iat": now, "exp": int(now + ttl), **claims}).encode())
        signature = self.key.sign(f"{header}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{header}.{body}.{_b64(signature)}"


@dataclass
class OAuthBroker:
    plaintext: str
    oauth: str
    issuer: Issuer
    base: Path

    def stop(self) -> None:
        common.stop_pid(self.base / "kafka.pid", grace=20.0)


def server_properties(data: Path, port: int, controller: int, oauth: int, jwks_url: str) -> str:
    """The platform's configuration with the OAUTH listener (later lines of a properties file win)."""
    listeners = f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller},OAUTH://{HOST}:{oauth}"
    prefix = "listener.name.oauth.oauthbearer"
    return kafka_component.server_properties(data, port, controller) + "\n".join((
        "# the OAUTHBEARER listener (sluice tests)",
        f"listeners={listeners}",
        f"advertised.listeners={listeners}",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,OAUTH:SASL_PLAINTEXT",
        "listener.name.oauth.sasl.enabled.mechanisms=OAUTHBEARER",
        f'{prefix}.sasl.jaas.config={LOGIN_MODULE} required unsecuredLoginStringClaim_sub="broker";',
        f"{prefix}.sasl.server.callback.handler.class={VALIDATOR}",
        f"{prefix}.sasl.oauthbearer.jwks.endpoint.url={jwks_url}",
        f"sasl.oauthbearer.jwks.endpoint.url={jwks_url}",
        "",
    ))


def start(base: Path) -> OAuthBroker:
    """Start the broker in ``base``; return once both listeners answer."""
    from confluent_kafka.admin import AdminClient

    base.mkdir(parents=True, exist_ok=True)
    log_path, data = base / "kafka.log", base / "data"
    data.mkdir()
    issuer = Issuer.new()
    jwks = base / "jwks.json"
    jwks.write_text(json.dumps(issuer.jwks()))
    port, controller, oauth = (common.free_port(HOST) for _ in range(3))
    while len({port, controller, oauth}) < 3:
        oauth = common.free_port(HOST)
    config = base / "server.properties"
    config.write_text(server_properties(data, port, controller, oauth, jwks.as_uri()))
    java, libs = kafka_component.find_java(), kafka_component.provision()
    cp = ["-Djava.awt.headless=true", "-cp", f"{libs}/*"]
    cluster_id = kafka_component._random_cluster_id()
    common.run_logged("kafka-oauth", [java, "-Xmx256m", "-XX:TieredStopAtLevel=1", *cp,
                                      "kafka.tools.StorageTool", "format", "--cluster-id", cluster_id,
                                      "--config", str(config), "--ignore-formatted"],
                      log_path=log_path, timeout=180)
    allowed = f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={jwks.as_uri()}"
    argv = [java, *kafka_component.BROKER_JVM_OPTS, allowed, *cp, "kafka.Kafka", str(config)]
    proc = common.spawn("kafka-oauth", argv, log_path=log_path, pid_path=base / "kafka.pid")
    broker = OAuthBroker(f"{HOST}:{port}", f"{HOST}:{oauth}", issuer, base)

    def ready() -> bool:
        admin = AdminClient({"bootstrap.servers": broker.plaintext, "socket.timeout.ms": 3000})
        return bool(admin.list_topics(timeout=3).brokers) and common.port_open(HOST, oauth)

    try:
        common.wait_until("kafka-oauth", ready, timeout=kafka_component.READY_TIMEOUT, log_path=log_path,
                          proc=proc, what="answer on its listeners", interval=0.5)
    except common.PlatformError:
        broker.stop()
        raise
    return broker
