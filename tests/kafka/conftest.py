"""One real Apache Kafka broker per test session, for tests marked ``kafka``.

The broker comes from ``scripts/kafka_local.py`` (the same code as ``./run kafka``), on free loopback
ports in a temporary folder, so a developer's ``./run kafka`` brokers never clash with it. It is
killed at session end, and by the kernel if the session itself is killed.
"""

from __future__ import annotations

import importlib.util
import socket
import sys
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "kafka_local.py"
_spec = importlib.util.spec_from_file_location("kafka_local", _SCRIPT)
kafka_local = importlib.util.module_from_spec(_spec)
sys.modules["kafka_local"] = kafka_local
_spec.loader.exec_module(kafka_local)


def _free_ports(count: int) -> list[int]:
    """Ports the kernel just handed out on loopback (held together, so they differ)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory) -> str:
    """The bootstrap address (``127.0.0.1:<port>``) of a broker that lives for the whole session.

    Skips only when the install step could not get the jars; a broker that fails to start is an error.
    """
    missing = kafka_local.jars_missing_reason()
    if missing:
        pytest.skip(missing)
    port, controller_port = _free_ports(2)
    broker = kafka_local.Broker("test", port, controller_port, tmp_path_factory.mktemp("kafka"))
    try:
        kafka_local.start(broker, die_with_parent=True)
        yield broker.bootstrap
    finally:
        kafka_local.stop(broker, timeout=10)
