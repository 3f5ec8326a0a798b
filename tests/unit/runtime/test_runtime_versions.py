"""The pairing record, the image's version manifest, its text and the Lease summary."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from sluice_runtime import cli, connector, image_manifest, pairing, versions

from tests.support import paths

REPO = paths.REPO

_KAFKA = f"spark-sql-kafka-0-10_{pairing.SCALA}"
_TOKEN = f"spark-token-provider-kafka-0-10_{pairing.SCALA}"


def _manifest(**changes: object) -> dict[str, object]:
    data: dict[str, object] = {
        "format": 1, "image": True, "source": "/opt/sluice/versions.json",
        "sluice": "0.1.0", "spark": "4.3.0", "scala": "2.13.18", "java": "17.0.15", "python": "3.11.2",
        "connectors": [
            {"name": "kafka", "artifact": _KAFKA, "version": "4.2.0", "recorded": "4.2.0", "why": "w1"},
            {"name": "kafka-token-provider", "artifact": _TOKEN, "version": "4.2.0", "recorded": "4.2.0",
             "why": "w2"},
        ],
        "jars": [{"file": "kafka-clients-3.9.1.jar", "artifact": "kafka-clients", "version": "3.9.1"}],
    }
    data.update(changes)
    return data


def test_record_follows_its_rules_and_the_pinned_pyspark() -> None:
    runtime_extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert f"pyspark=={pairing.SPARK}" in runtime_extra["runtime"]
    assert len({a.name for a in pairing.ARTIFACTS}) == len(pairing.ARTIFACTS)
    for artifact in pairing.ARTIFACTS:
        assert artifact.artifact.endswith(f"_{pairing.SCALA}") or artifact.group != "org.apache.spark"
        assert artifact.why
        if artifact.rule is pairing.Rule.SPARK:
            assert artifact.version == pairing.SPARK, artifact
        else:
            assert pairing.version_key(artifact.version) < pairing.version_key(pairing.SPARK), artifact
    # the --resolve-connector fallback asks Spark for the recorded connector
    assert connector.coordinates(pairing.SPARK) == pairing.by_name("kafka").coordinates
    with pytest.raises(KeyError):
        pairing.by_name("nope")


def test_jar_names_split_into_artifact_and_version() -> None:
    cases = {
        f"{_KAFKA}-4.2.0.jar": (_KAFKA, "4.2.0"),
        "/x/kafka-clients-3.9.1.jar": ("kafka-clients", "3.9.1"),
        "log4j-1.2-api-2.24.3.jar": ("log4j-1.2-api", "2.24.3"),
        "zstd-jni-1.5.7-3.jar": ("zstd-jni", "1.5.7-3"),
        "netty-transport-native-epoll-4.2.13.Final-linux-x86_64.jar":
            ("netty-transport-native-epoll", "4.2.13.Final-linux-x86_64"),
        "foo-2.jar": ("foo", "2"),
    }
    for name, expected in cases.items():
        jar = versions.parse_jar(name)
        assert jar is not None and (jar.artifact, jar.version) == expected, name
        assert jar.file == Path(name).name
    assert versions.parse_jar("README") is None


def test_manifest_round_trips_and_refuses_other_shapes(tmp_path: Path) -> None:
    path = tmp_path / "versions.json"
    path.write_text(json.dumps(_manifest()))
    loaded = versions.load(path)
    assert loaded.image and loaded.source == str(path)
    assert (loaded.spark, loaded.scala, loaded.java) == ("4.3.0", "2.13.18", "17.0.15")
    assert [c.name for c in loaded.connectors] == ["kafka", "kafka-token-provider"]
    assert loaded.jars == (versions.Jar("kafka-clients-3.9.1.jar", "kafka-clients", "3.9.1"),)
    assert versions.from_json(loaded.to_json(), source=str(path)) == loaded
    for bad in (_manifest(format=2), _manifest(connectors=[{"x": 1}]), [1, 2]):
        with pytest.raises(versions.ManifestError):
            versions.from_json(bad, source="m")  # type: ignore[arg-type]
    broken = _manifest()
    del broken["scala"]
    with pytest.raises(versions.ManifestError, match="scala"):
        versions.from_json(broken, source="m")
    assert versions.current(manifest=path) == loaded


def test_text_names_spark_java_and_each_connector_with_why(tmp_path: Path) -> None:
    path = tmp_path / "versions.json"
    path.write_text(json.dumps(_manifest()))
    text = versions.render_text(versions.load(path))
    lines = text.splitlines()
    assert lines[0] == f"sluice-runtime 0.1.0 (image: {path})"
    assert lines[1] == "Spark 4.3.0 (Scala 2.13.18), Java 17.0.15, Python 3.11.2"
    assert f"  kafka                 {_KAFKA} 4.2.0: w1" in lines
    assert f"  kafka-token-provider  {_TOKEN} 4.2.0: w2" in lines
    assert lines[-1] == "jars added to Spark's: kafka-clients-3.9.1.jar"
    other = _manifest(connectors=[
        {"name": "kafka", "artifact": _KAFKA, "version": "4.1.0", "recorded": "4.2.0", "why": "w"}])
    text = versions.render_text(versions.from_json(other, source="m"))
    assert f"{_KAFKA} 4.1.0 (recorded 4.2.0): w" in text


def test_summary_is_flat_strings_for_a_lease_annotation(tmp_path: Path) -> None:
    path = tmp_path / "versions.json"
    path.write_text(json.dumps(_manifest()))
    assert versions.summary(versions.load(path)) == {
        "image": "true", "sluice": "0.1.0", "spark": "4.3.0", "scala": "2.13.18", "java": "17.0.15",
        "kafka": "4.2.0", "kafka-token-provider": "4.2.0",
    }
    outside = versions.outside_image({}, manifest=tmp_path / "none.json")
    summary = versions.summary(outside)
    assert summary["image"] == "false" and "java" not in summary
    assert all(isinstance(v, str) for v in versions.summary().values())


def test_outside_an_image_the_jars_come_from_sluice_jars(tmp_path: Path) -> None:
    env = {"SLUICE_JARS": f"/c/{_KAFKA}-4.2.0.jar,/c/kafka-clients-3.9.1.jar, ,/c/{_TOKEN}-4.0.0.jar"}
    found = versions.current(env, manifest=tmp_path / "missing.json")
    assert not found.image and found.source.startswith("not an image: no ")
    assert found.java is None
    assert [j.file for j in found.jars] == [
        "kafka-clients-3.9.1.jar", f"{_KAFKA}-4.2.0.jar", f"{_TOKEN}-4.0.0.jar"]
    shipped = {c.name: (c.version, c.recorded) for c in found.connectors}
    assert {name: shipped.pop(name) for name in ("kafka", "kafka-token-provider")} == {
        "kafka": ("4.2.0", "4.2.0"), "kafka-token-provider": ("4.0.0", "4.2.0")}
    # spark-avro and the S3A set are recorded too; no jar of them here
    assert shipped.pop("avro") == (None, pairing.by_name("avro").version)
    assert shipped == {a.name: (None, a.version) for a in pairing.S3A_ARTIFACTS}
    text = versions.render_text(found)
    assert "(not an image: no " in text.splitlines()[0]
    assert f"{_TOKEN} 4.0.0 (recorded 4.2.0)" in text
    assert text.splitlines()[-1].startswith("jars given (SLUICE_JARS): kafka-clients-3.9.1.jar")


def _spark_jars(*extra: str) -> tuple[versions.Jar, ...]:
    return versions.parse_jars([
        f"spark-core_{pairing.SCALA}-{pairing.SPARK}.jar", "scala-library-2.13.18.jar",
        f"hadoop-client-api-{pairing.HADOOP}.jar",
        *(f"{a.artifact}-{a.version}.jar" for a in versions.RECORDED), *extra])


def test_the_record_the_image_follows_is_the_kafka_connector_and_the_s3a_set() -> None:
    assert versions.RECORDED == (*pairing.ARTIFACTS, *pairing.S3A_ARTIFACTS)
    assert len({a.name for a in versions.RECORDED}) == len(versions.RECORDED)
    assert len({a.artifact for a in versions.RECORDED}) == len(versions.RECORDED)


def test_pairing_problems_name_unrecorded_pairings() -> None:
    assert versions.pairing_problems(_spark_jars("kafka-clients-3.9.1.jar"), pairing.SPARK) == []
    assert versions.pairing_problems(_spark_jars(), "4.2.0") == [
        f"Spark is 4.2.0, the record says {pairing.SPARK}",
        f"spark-core_{pairing.SCALA}-{pairing.SPARK}.jar: a Spark artifact of another version than 4.2.0, "
        "not recorded"]
    token = pairing.by_name("kafka-token-provider")
    swapped = [j for j in _spark_jars() if j.artifact != token.artifact]
    swapped += versions.parse_jars([f"{token.artifact}-4.0.0.jar"])
    assert versions.pairing_problems(swapped, pairing.SPARK) == [
        f"{token.artifact}: ships 4.0.0, recorded {token.version}"]
    assert versions.pairing_problems(_spark_jars(f"{token.artifact}-4.0.0.jar"), pairing.SPARK) == [
        f"{token.artifact}: ships 4.0.0, {token.version}, recorded {token.version}"]
    protobuf = f"spark-protobuf_{pairing.SCALA}-4.2.0.jar"
    assert versions.pairing_problems(_spark_jars(protobuf), pairing.SPARK) == [
        f"{protobuf}: a Spark artifact of another version than {pairing.SPARK}, not recorded"]
    missing = [j for j in _spark_jars() if j.artifact != _KAFKA]
    assert versions.pairing_problems(missing, pairing.SPARK) == [
        f"{_KAFKA}: ships no jar, recorded {pairing.by_name('kafka').version}"]
    # the S3A set: hadoop-aws needs the Hadoop PySpark ships; spark-hadoop-cloud is recorded below Spark
    no_s3 = [j for j in _spark_jars() if j.artifact != "s3"]
    assert versions.pairing_problems(no_s3, pairing.SPARK) == [
        f"s3: ships no jar, recorded {pairing.AWS_SDK}"]
    other_hadoop = [j for j in _spark_jars() if j.artifact != "hadoop-client-api"]
    other_hadoop += versions.parse_jars(["hadoop-client-api-3.4.1.jar"])
    assert versions.pairing_problems(other_hadoop, pairing.SPARK) == [
        f"hadoop-client-api: ships 3.4.1, the record says Hadoop {pairing.HADOOP}"]


def test_image_manifest_collects_the_jars_directory(tmp_path: Path) -> None:
    for jar in _spark_jars("kafka-clients-3.9.1.jar"):
        (tmp_path / jar.file).write_bytes(b"")
    added = ["kafka-clients-3.9.1.jar", *(f"{a.artifact}-{a.version}.jar" for a in versions.RECORDED)]
    manifest = image_manifest.collect(tmp_path, added, spark=pairing.SPARK, java="17.0.15")
    assert manifest.image and manifest.scala == "2.13.18" and manifest.java == "17.0.15"
    assert {c.name: c.version for c in manifest.connectors} == {a.name: a.version for a in versions.RECORDED}
    assert {"hadoop-aws", "aws-sdk-s3", "hadoop-cloud"} <= {c.name for c in manifest.connectors}
    assert sorted(j.file for j in manifest.jars) == sorted(added)
    assert versions.from_json(json.loads(json.dumps(manifest.to_json())), source="m").connectors == (
        manifest.connectors)


def test_java_version_is_read_from_the_jvms_settings(tmp_path: Path) -> None:
    fake = tmp_path / "java"
    fake.write_text("#!/bin/sh\necho 'Property settings:' >&2\necho '    java.version = 17.0.15' >&2\n"
                    "echo '    java.version.date = 2025-04-15' >&2\n")
    fake.chmod(0o755)
    assert image_manifest.java_version(str(fake)) == "17.0.15"
    fake.write_text("#!/bin/sh\necho nothing >&2\n")
    with pytest.raises(RuntimeError, match=r"no java\.version"):
        image_manifest.java_version(str(fake))


def test_cli_version_prints_text_or_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("sluice-runtime ")
    assert f"connectors (record: Spark {pairing.SPARK}, Hadoop {pairing.HADOOP}, " in out
    assert "  hadoop-aws " in out and f" spark-hadoop-cloud_{pairing.SCALA} " in out
    assert cli.main(["--version", "--output", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["format"] == versions.FORMAT and data["image"] is False
    assert [c["name"] for c in data["connectors"]] == [a.name for a in versions.RECORDED]
    assert "--version" in cli.build_parser().format_help()
