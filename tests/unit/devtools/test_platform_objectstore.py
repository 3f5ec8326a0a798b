"""The object store's pure parts: SigV4 signing (AWS's published examples), s3proxy's configuration
and command line, the S3A jar set and its Spark settings."""

from __future__ import annotations

import datetime
from pathlib import Path

from sluice_dev.platform import objectstore, sparkjars
from sluice_runtime import pairing

EXAMPLE = {
    "access_key": "AKIAIOSFODNN7EXAMPLE",
    "secret_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "region": "us-east-1",
    "now": datetime.datetime(2013, 5, 24, tzinfo=datetime.UTC),
}
EMPTY = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def _signature(headers: dict[str, str]) -> tuple[str, str]:
    authorization = headers["Authorization"]
    assert authorization.startswith(
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
    )
    signed = authorization.split("SignedHeaders=")[1].split(",")[0]
    return signed, authorization.rsplit("Signature=", 1)[1]


def test_sigv4_matches_the_aws_example_get_object() -> None:
    headers = objectstore.sign_v4(
        "GET", "examplebucket.s3.amazonaws.com", "/test.txt", {}, {"Range": "bytes=0-9"}, EMPTY, **EXAMPLE
    )
    assert headers["x-amz-date"] == "20130524T000000Z"
    assert headers["x-amz-content-sha256"] == EMPTY
    assert _signature(headers) == (
        "host;range;x-amz-content-sha256;x-amz-date",
        "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
    )


def test_sigv4_matches_the_aws_example_list_objects() -> None:
    headers = objectstore.sign_v4(
        "GET", "examplebucket.s3.amazonaws.com", "/", {"max-keys": "2", "prefix": "J"}, {}, EMPTY, **EXAMPLE
    )
    assert _signature(headers) == (
        "host;x-amz-content-sha256;x-amz-date",
        "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7",
    )


def test_properties_use_the_filesystem_backend_and_signed_requests(tmp_path: Path) -> None:
    text = objectstore.properties("http://10.242.0.1:9000", tmp_path / "data", "AK", "SK")
    lines = dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert lines == {
        "s3proxy.endpoint": "http://10.242.0.1:9000",
        "s3proxy.authorization": "aws-v2-or-v4",
        "s3proxy.identity": "AK",
        "s3proxy.credential": "SK",
        "jclouds.provider": "filesystem",
        "jclouds.filesystem.basedir": str(tmp_path / "data"),
    }


def test_argv_runs_the_jar_with_its_properties(tmp_path: Path) -> None:
    argv = objectstore.argv("/usr/bin/java", tmp_path / objectstore.JAR, tmp_path / "s3proxy.conf")
    assert argv[0] == "/usr/bin/java"
    jar, conf = str(tmp_path / objectstore.JAR), str(tmp_path / "s3proxy.conf")
    assert argv[-4:] == ["-jar", jar, "--properties", conf]
    assert objectstore.JAR == "s3proxy-4.1.0-jar-with-dependencies.jar"


def test_generated_keys_are_fresh_and_aws_shaped() -> None:
    first, second = objectstore.generate_keys(), objectstore.generate_keys()
    assert first != second
    access, secret = first
    assert len(access) == 20 and access.isalnum() and len(secret) == 40


def test_s3a_settings_point_at_the_store_path_style_with_the_cloud_checkpoint_manager() -> None:
    conf = objectstore.s3a_spark_conf("http://127.0.0.1:9000", "AK", "SK")
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert (conf["spark.hadoop.fs.s3a.access.key"], conf["spark.hadoop.fs.s3a.secret.key"]) == ("AK", "SK")
    assert conf["spark.sql.streaming.checkpointFileManagerClass"] == (
        "org.apache.spark.internal.io.cloud.AbortableStreamBasedCheckpointFileManager"
    )
    assert "spark.jars.packages" not in conf


def test_the_s3a_set_is_hadoop_aws_of_pysparks_hadoop_and_sdk_modules_not_the_bundle() -> None:
    shipped = sparkjars.artifact_versions(sparkjars.pyspark_jars_dir())
    assert shipped["hadoop-client-api"] == pairing.HADOOP
    by_artifact = {a.artifact: a for a in pairing.S3A_ARTIFACTS}
    assert by_artifact["hadoop-aws"].version == pairing.HADOOP
    assert by_artifact["hadoop-aws"].exclusions == ("software.amazon.awssdk:bundle",)
    sdk = [a for a in pairing.S3A_ARTIFACTS if a.group == "software.amazon.awssdk"]
    assert {a.artifact for a in sdk} >= {"s3", "sts"} and all(a.version == pairing.AWS_SDK for a in sdk)
    assert "bundle" not in by_artifact
    cloud = by_artifact[f"spark-hadoop-cloud_{pairing.SCALA}"]
    assert pairing.version_key(cloud.version) <= pairing.version_key(pairing.SPARK)
    assert cloud.exclusions == ("*:*",)


def test_the_s3a_pom_renders_the_record_and_leaves_the_kafka_pom_alone() -> None:
    pom = objectstore.s3a_pom()
    assert "<artifactId>spark-s3a-jars</artifactId>" in pom
    for artifact in pairing.S3A_ARTIFACTS:
        version = f"      <version>{artifact.version}</version>"
        assert f"<artifactId>{artifact.artifact}</artifactId>\n{version}" in pom
    assert "<groupId>*</groupId>\n          <artifactId>*</artifactId>" in pom
    kafka = sparkjars.render_pom()
    assert "<artifactId>spark-kafka-jars</artifactId>" in kafka and "hadoop-aws" not in kafka
    assert len(objectstore.s3a_key()) == 12 and objectstore.s3a_key() != sparkjars.pairing_key()
