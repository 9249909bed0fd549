"""The line a broker's authorization refusal becomes (``store/kafka/client.lacking``): the principal,
the operation and the resource, each named from what the call was doing. Pure mapping, no broker."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from streamrep.store.kafka.client import lacking

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
