"""The Kafka naming policy: reversible, non-overlapping, and refusing what Kafka cannot name."""

from __future__ import annotations

import pytest

from streamrep.errors import InvalidArgument
from streamrep.model.naming import HpeNaming, PrefixNaming, is_internal, naming_for


@pytest.mark.parametrize(
    "spec,path,namespace,topic,kafka",
    [
        (None, "/activity", "", "clicks", "activity__clicks"),
        ("streamrep", "/apps/clicks", "", "home", "apps.clicks__home"),
        (None, "/apps/clicks", "prod", "home", "prod.apps.clicks__home"),
        ("prefix:orders.", "/orders", "", "eu", "orders.eu"),
        ("cluster", "/all", "", "payments", "payments"),
        ("prefix:", "/all", "", "payments", "payments"),
        ("hpe", "/apps/s", "", "t", "/apps/s:t"),
    ],
)
def test_names_are_reversible(spec, path, namespace, topic, kafka):
    naming = naming_for(spec, path, namespace)
    assert naming.kafka_topic(topic) == kafka
    assert naming.topic_of(kafka) == topic


def test_other_streams_and_internal_topics_are_not_a_streams_topics():
    whole = naming_for("cluster", "/all")
    assert whole.topic_of("__consumer_offsets") is None
    assert whole.topic_of("_streamrep.catalog") is None and is_internal("_streamrep.x.marks")
    assert naming_for(None, "/a").topic_of("a.b__t") is None  # /a/b's topic, not /a's
    assert naming_for(None, "/a").topic_of("a__") is None  # no topic name left
    assert naming_for("hpe", "/a").topic_of("/a/b:t") is None


def test_overlaps():
    a, ab = naming_for(None, "/a"), naming_for(None, "/a/b")
    assert not a.overlaps(ab) and not ab.overlaps(a)
    assert naming_for("prefix:orders.", "/o").overlaps(naming_for("prefix:orders.eu", "/e"))
    assert naming_for("cluster", "/all").overlaps(a)  # the whole cluster overlaps every other stream
    assert not naming_for("hpe", "/a").overlaps(naming_for("cluster", "/all"))
    assert naming_for("hpe", "/a").overlaps(naming_for("hpe", "/a"))


def test_adoption_is_said():
    assert naming_for("prefix:x.", "/s").adopts and naming_for("cluster", "/s").adopts
    assert not naming_for(None, "/s").adopts and not naming_for("hpe", "/s").adopts
    assert isinstance(naming_for("hpe", "/s"), HpeNaming) and isinstance(naming_for(None, "/s"), PrefixNaming)


@pytest.mark.parametrize(
    "spec,path,message",
    [
        ("bogus", "/s", "use streamrep, prefix:"),
        ("prefix:bad name", "/s", "letters, digits"),
        ("prefix:__x", "/s", "internal"),
        ("prefix:_streamrep.x", "/s", "internal"),
        (None, "/has space", "cannot name Kafka topics"),
        (None, "/a@b", "cannot name Kafka topics"),
    ],
)
def test_what_kafka_cannot_name_is_refused_in_one_line(spec, path, message):
    with pytest.raises(InvalidArgument, match=message) as err:
        naming_for(spec, path)
    assert "\n" not in str(err.value)


def test_a_naming_that_creates_its_topics_outranks_one_that_adopts_and_narrower_outranks_wider():
    default, narrow = naming_for(None, "/apps/clicks", "prod"), naming_for("prefix:prod.apps.", "/a")
    wide = naming_for("cluster", "/b")
    assert default.rank > narrow.rank > wide.rank
    assert naming_for("hpe", "/s").rank > default.rank
    assert narrow.within(wide) and not wide.within(narrow) and default.within(naming_for("prefix:prod.", "/c"))
    assert naming_for("hpe", "/s").within(HpeNaming("/s")) and not naming_for("hpe", "/s").within(wide)
