"""The Kafka broker's jars and Spark's Kafka connector, resolved from Maven Central through the project's own build
files.

``conf/kafka/pom.xml`` names Apache Kafka (KRaft mode) and its logging binding; :func:`install_broker_jars` copies
them with Maven into the git-ignored ``.kafka/broker`` folder (``make kafka-jars`` and ``misa kafka install`` call
it). ``conf/kafka/connector-pom.xml`` names Spark's Kafka connector; :func:`install_connector_jars` copies it and the
dependencies PySpark does not ship into ``.kafka/connector``, for ``spark.jars`` (:func:`connector_jars`). Maven
Central serves no Spark 4.3.0 artifact (the installed PySpark's), so the connector is 4.2.0, the newest it serves;
both engines of every comparison run with it. A stamp file holds each build file's hash: while it matches, nothing
is fetched again. Jobs and tests only read the folders; they never fetch.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

from services.exceptions import KafkaBrokerError

ROOT = Path(__file__).resolve().parents[1]
BROKER_POM = ROOT / "conf" / "kafka" / "pom.xml"
BROKER_JARS = ROOT / ".kafka" / "broker"
CONNECTOR_POM = ROOT / "conf" / "kafka" / "connector-pom.xml"
CONNECTOR_JARS = ROOT / ".kafka" / "connector"
STAMP = ".resolved"  # in the jar folder: the hash of the build file it was resolved from
INSTALL_HINT = "run `make kafka-jars` (or `misa kafka install`), which resolves conf/kafka/pom.xml with Maven"


def java_binary() -> str:
    """``$JAVA_HOME/bin/java`` if set, else ``java`` on PATH; an error naming Java when there is none."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    path = shutil.which("java")
    if path is None:
        raise KafkaBrokerError(
            "Java was not found (no JAVA_HOME, no java on PATH): the Kafka broker needs Java 17 or newer, "
            "e.g. `apt-get install openjdk-17-jre-headless`"
        )
    return path


def maven_binary() -> str:
    """``mvn`` on PATH; an error naming Maven when there is none."""
    path = shutil.which("mvn")
    if path is None:
        raise KafkaBrokerError(
            "Maven (mvn) was not found on PATH: it resolves the Kafka jars from conf/kafka/pom.xml, "
            "e.g. `apt-get install maven`"
        )
    return path


def pom_hash(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()


def is_installed(jars_dir: Path = BROKER_JARS, pom: Path = BROKER_POM) -> bool:
    """Whether ``jars_dir`` holds the jars of ``pom`` as it is now (its stamp matches)."""
    stamp = jars_dir / STAMP
    return stamp.is_file() and stamp.read_text().strip() == pom_hash(pom)


def install_broker_jars(jars_dir: Path = BROKER_JARS, pom: Path = BROKER_POM) -> bool:
    """Resolve ``pom``'s runtime jars into ``jars_dir`` unless its stamp matches; True if Maven ran.

    The jars go to a sibling folder first, which replaces ``jars_dir`` once Maven has succeeded, so an interrupted
    run never leaves a folder that looks complete."""
    if is_installed(jars_dir, pom):
        return False
    java_binary()  # Maven needs it too: name it first
    mvn = maven_binary()
    partial = jars_dir.with_name(jars_dir.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    cmd = [mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies", "-DincludeScope=runtime"]
    cmd.append(f"-DoutputDirectory={partial}")
    result = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if result.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        raise KafkaBrokerError(f"Maven could not resolve {pom} (exit {result.returncode}):\n{tail}")
    if pom == CONNECTOR_POM:
        _drop_jars_spark_ships(partial)
    (partial / STAMP).write_text(pom_hash(pom) + "\n")
    shutil.rmtree(jars_dir, ignore_errors=True)
    partial.rename(jars_dir)
    return True


def install_connector_jars(jars_dir: Path = CONNECTOR_JARS) -> bool:
    """Spark's Kafka connector and the dependencies PySpark does not ship, into ``jars_dir``; True if Maven ran."""
    return install_broker_jars(jars_dir, CONNECTOR_POM)


def _drop_jars_spark_ships(folder: Path) -> None:
    """Remove the jars of artifacts PySpark's own ``jars`` folder has (another version of one on ``spark.jars``
    would shadow or clash with Spark's)."""
    import pyspark

    shipped = {_artifact(jar.name) for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    for jar in folder.glob("*.jar"):
        if _artifact(jar.name) in shipped:
            jar.unlink()


def _artifact(jar_name: str) -> str:
    """A jar's artifact name without its version (``kafka-clients-3.9.2.jar``: ``kafka-clients``)."""
    parts = jar_name.removesuffix(".jar").split("-")
    kept = []
    for part in parts:
        if part[:1].isdigit():
            break
        kept.append(part)
    return "-".join(kept)


def connector_jars(jars_dir: Path = CONNECTOR_JARS) -> list[str]:
    """The connector's jars for ``spark.jars`` (none when it is not installed: Kafka sources then fail in Spark,
    naming the data source)."""
    if not (jars_dir / STAMP).is_file():
        return []
    return [str(jar) for jar in sorted(jars_dir.glob("*.jar"))]


def broker_jars(jars_dir: Path = BROKER_JARS) -> list[Path]:
    """The broker's jars (its classpath); an error naming the folder and how to fill it when they are missing."""
    jars = sorted(jars_dir.glob("*.jar")) if (jars_dir / STAMP).is_file() else []
    if not any(jar.name.startswith("kafka_2.13-") for jar in jars):
        raise KafkaBrokerError(f"no Kafka broker jars in {jars_dir}: {INSTALL_HINT}")
    return jars


def main() -> int:
    """``python -m services.kafka_install``: resolve the jars if needed and say how long it took."""
    began = time.monotonic()
    ran = install_broker_jars()
    ran = install_connector_jars() or ran
    what = f"resolved in {time.monotonic() - began:.1f} s" if ran else "already resolved"
    print(f"kafka jars: {len(broker_jars())} in {BROKER_JARS}, {len(connector_jars())} in {CONNECTOR_JARS} ({what})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
