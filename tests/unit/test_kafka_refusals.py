"""The line a broker's refusal becomes: an authorization refusal (``store/kafka/client.lacking``) names
the principal, the operation and the resource from what the call was doing; a refused TLS handshake
(``client.refusal``) names the broker and OpenSSL's reason. Pure mapping of librdkafka's errors, no broker."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from streamrep.errors import TlsHandshakeFailed
from streamrep.store.kafka.client import lacking, refusal

SETTINGS = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "gateway"}
TOPIC, GROUP = KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED


@pytest.mark.parametrize(
    "code,what,expected",
    [
        (TOPIC, "cannot write to ns.orders__t", "lacks WRITE on topic ns.orders__t"),
        (TOPIC, "cannot read offsets of ns.orders__t", "lacks DESCRIBE on topic ns.orders__t"),
        (TOPIC, "cannot add partitions to topic ns.orders__t", "lacks ALTER on topic ns.orders__t"),
        # a group's commit refused for its topic names the topic, not the group (it said "topic app")
        (TOPIC, "cannot commit cursors of group app on topic ns.orders__t", "lacks READ on topic ns.orders__t"),
        (TOPIC, "cannot commit cursors of group app", "lacks READ on the topic"),
        (GROUP, "cannot commit cursors of group app on topic ns.orders__t", "lacks READ on group app"),
        (GROUP, "cannot read cursors of group app", "lacks DESCRIBE on group app"),
        (GROUP, "cannot read ns.orders__t", "lacks READ on the consumer group"),
    ],
)
def test_a_refusal_names_the_operation_and_the_resource_it_was_for(code, what, expected):
    line = lacking(code, what, SETTINGS, "_streamrep.ns.")
    assert line is not None and line.endswith(expected), line
    assert line.startswith("principal User:gateway lacks ")


def test_other_codes_are_not_refusals():
    assert lacking(KafkaError.UNKNOWN_TOPIC_OR_PART, "cannot read ns.t", SETTINGS, "_streamrep.") is None


# librdkafka's two reports of one refused certificate (seen on the secured test clusters): as _SSL, and,
# when the handshake fails while the socket is read, as a transport failure carrying OpenSSL's error.
VERIFY = (
    "ssl/statem/statem_clnt.c:2124:tls_post_process_server_certificate error:0A000086:SSL routines::"
    "certificate verify failed: broker certificate could not be verified (after 24ms in state SSL_HANDSHAKE)"
)


@pytest.mark.parametrize(
    "error",
    [
        KafkaError(KafkaError._SSL, f"sasl_ssl://vm:9093/bootstrap: SSL handshake failed: {VERIFY}"),
        KafkaError(KafkaError._TRANSPORT, f"sasl_ssl://vm:9093/bootstrap: {VERIFY}"),
    ],
    ids=["ssl", "transport"],
)
def test_a_refused_certificate_is_a_tls_refusal_however_librdkafka_reports_it(error):
    refused = refusal([error, KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down")], [], SETTINGS)
    assert isinstance(refused, TlsHandshakeFailed)
    assert str(refused) == (
        "TLS handshake failed: certificate verify failed: broker certificate could not be verified "
        "(Kafka at vm:9093, as User:gateway)"
    )


def test_a_transport_failure_without_openssls_error_is_no_refusal():
    down = KafkaError(KafkaError._TRANSPORT, "sasl_ssl://vm:9093/bootstrap: Connect to ipv4#127.0.0.1:9093 failed")
    assert refusal([down], [], SETTINGS) is None
