"""`sluice-runtime executor`: the executor JVM command built from the variables Spark sets."""

from __future__ import annotations

from pathlib import Path

import pytest
from sluice_runtime import classdata, executor

POD_ENV = {
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@127.20.0.5:7078",
    "SPARK_EXECUTOR_ID": "2",
    "SPARK_EXECUTOR_CORES": "1",
    "SPARK_APPLICATION_ID": "spark-application-1",
    "SPARK_EXECUTOR_POD_IP": "127.20.0.9",
    "SPARK_RESOURCE_PROFILE_ID": "0",
    "SPARK_EXECUTOR_POD_NAME": "shop-revenue-exec-2",
    "SPARK_EXECUTOR_MEMORY": "512m",
    "SPARK_JAVA_OPT_10": "-Dspark.driver.port=7078",
    "SPARK_JAVA_OPT_2": "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "SPARK_JAVA_OPT_1": "-Djava.net.preferIPv6Addresses=false",
    "SPARK_CONF_DIR": "/opt/spark/conf",
    "SLUICE_JARS": "/cache/a.jar, /cache/b.jar",
}


def test_the_command_runs_spark_s_kubernetes_executor_backend_with_the_pod_s_settings() -> None:
    argv = executor.executor_argv(POD_ENV, java="/jdk/bin/java", spark_jars_dir=Path("/py/pyspark/jars"))
    assert argv[0] == "/jdk/bin/java"
    # JVM options in their numeric order (2 before 10), then the heap, then the class path
    assert argv[1:4] == [
        "-Djava.net.preferIPv6Addresses=false",
        "--add-opens=java.base/java.nio=ALL-UNNAMED",
        "-Dspark.driver.port=7078",
    ]
    assert argv[4:6] == ["-Xms512m", "-Xmx512m"]
    cp = argv[argv.index("-cp") + 1].split(":")
    assert cp == ["/opt/spark/conf", "/py/pyspark/jars/*", "/cache/a.jar", "/cache/b.jar"]
    main = argv.index(executor.MAIN_CLASS)
    flags = dict(zip(argv[main + 1 :: 2], argv[main + 2 :: 2], strict=True))
    assert flags == {
        "--driver-url": "spark://CoarseGrainedScheduler@127.20.0.5:7078",
        "--executor-id": "2",
        "--cores": "1",
        "--app-id": "spark-application-1",
        "--hostname": "127.20.0.9",
        "--resourceProfileId": "0",
        "--podName": "shop-revenue-exec-2",
    }


def test_a_pod_not_created_by_spark_gets_an_error_naming_what_is_missing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = {k: v for k, v in POD_ENV.items() if k not in ("SPARK_DRIVER_URL", "SPARK_EXECUTOR_POD_IP")}
    with pytest.raises(executor.ExecutorConfigError, match="SPARK_DRIVER_URL, SPARK_EXECUTOR_POD_IP"):
        executor.executor_argv(env, java="java", spark_jars_dir=Path("/jars"))
    assert executor.main([], env=env) == 2
    assert "missing SPARK_DRIVER_URL" in capsys.readouterr().err


def test_java_comes_from_java_home_when_it_has_one(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "java").write_text("")
    assert executor.find_java({"JAVA_HOME": str(tmp_path)}) == str(tmp_path / "bin" / "java")
    assert executor.find_java({"JAVA_HOME": str(tmp_path / "missing")}) == "java"
    assert executor.find_java({}) == "java"


def test_the_installed_pyspark_ships_the_kubernetes_backend() -> None:
    jars = executor.spark_jars_dir()
    assert any(p.name.startswith("spark-kubernetes_") for p in jars.glob("*.jar")), jars


def test_with_the_driver_s_archive_the_class_path_starts_with_the_one_it_was_written_with() -> None:
    """A JVM uses an archive's classes only when its class path starts with the archive's: the
    recorded one first, then the pod's own entries as without an archive."""
    archive = classdata.SharedArchive(Path("/opt/sluice/spark-driver.jsa"),
                                      "/py/pyspark/conf:/py/pyspark/jars/a.jar:/py/pyspark/jars/b.jar")
    argv = executor.executor_argv(POD_ENV, java="java", spark_jars_dir=Path("/py/pyspark/jars"),
                                  archive=archive)
    # the archive's option first: an option of the pod's own (spark.executor.extraJavaOptions) wins
    assert argv[1] == "-XX:SharedArchiveFile=/opt/sluice/spark-driver.jsa"
    assert argv[2:5] == ["-Djava.net.preferIPv6Addresses=false",
                         "--add-opens=java.base/java.nio=ALL-UNNAMED", "-Dspark.driver.port=7078"]
    cp = argv[argv.index("-cp") + 1].split(":")
    assert cp == ["/py/pyspark/conf", "/py/pyspark/jars/a.jar", "/py/pyspark/jars/b.jar",
                  "/opt/spark/conf", "/py/pyspark/jars/*", "/cache/a.jar", "/cache/b.jar"]


def test_without_an_archive_nothing_names_one() -> None:
    argv = executor.executor_argv(POD_ENV, java="java", spark_jars_dir=Path("/py/pyspark/jars"))
    assert not [a for a in argv if a.startswith(classdata.ARCHIVE_FLAGS)]
