"""Tests for streamrep.model.paths: MapR stream and topic paths."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamrep.errors import InvalidArgument
from streamrep.model.paths import (
    MAX_PATH_LENGTH,
    StreamPath,
    TopicPath,
    parse_stream_or_topic,
    parse_stream_path,
    parse_topic_path,
    validate_cluster_name,
    validate_topic_name,
)

SF = "sanfrancisco"


# --- stream paths -------------------------------------------------------------


def test_mapr_path_names_cluster_and_path():
    sp = parse_stream_path("/mapr/sanfrancisco/activity", "newyork")
    assert sp == StreamPath("sanfrancisco", "/activity")
    assert str(sp) == "/mapr/sanfrancisco/activity"


def test_nested_path():
    sp = parse_stream_path("/mapr/newyork/apps/web/activity", None)
    assert sp.cluster == "newyork"
    assert sp.path == "/apps/web/activity"


@pytest.mark.parametrize("text", ["/activity", "activity"])
def test_path_without_mapr_is_on_default_cluster(text):
    assert parse_stream_path(text, SF) == StreamPath(SF, "/activity")


def test_mapr_without_leading_slash_is_the_same_path():
    # The seeds themselves write "mapr/sanfrancisco/activity".
    assert parse_stream_path("mapr/sanfrancisco/activity", None) == parse_stream_path(
        "/mapr/sanfrancisco/activity", None
    )


def test_surrounding_whitespace_and_trailing_slash_ignored():
    assert parse_stream_path("  /mapr/sanfrancisco/activity/ ", None) == StreamPath(SF, "/activity")


def test_no_default_cluster_is_an_error():
    with pytest.raises(InvalidArgument, match="no default cluster"):
        parse_stream_path("/activity", None)


@pytest.mark.parametrize("text", ["", "   ", None, 42])
def test_path_required(text):
    with pytest.raises(InvalidArgument, match="stream path is required"):
        parse_stream_path(text, SF)


@pytest.mark.parametrize("text", ["/mapr", "/mapr/sanfrancisco", "mapr/sanfrancisco/"])
def test_mapr_path_needs_cluster_and_stream(text):
    with pytest.raises(InvalidArgument, match=r"expected /mapr/<cluster>/<stream>"):
        parse_stream_path(text, SF)


@pytest.mark.parametrize(
    "cluster",
    ["-sf", ".sf", "_sf", "san francisco", "sf!", "sf\n", "x" * 129, "é"],
)
def test_bad_cluster_names_in_paths(cluster):
    with pytest.raises(InvalidArgument, match="invalid cluster name"):
        parse_stream_path(f"/mapr/{cluster}/activity", None)


@pytest.mark.parametrize("name", ["a", "sanfrancisco", "my-cluster.example_1", "9" * 128])
def test_good_cluster_names(name):
    assert validate_cluster_name(name) == name


@pytest.mark.parametrize("name", ["", "-a", "a b", "a\n", "x" * 129, None, 5])
def test_validate_cluster_name_refuses(name):
    with pytest.raises(InvalidArgument, match="invalid cluster name"):
        validate_cluster_name(name)


@pytest.mark.parametrize("component", [".", ".."])
def test_dot_components_refused(component):
    with pytest.raises(InvalidArgument, match=f"bad component '{component}'"):
        parse_stream_path(f"/mapr/sanfrancisco/{component}/activity", None)


def test_dot_component_on_default_cluster_refused():
    with pytest.raises(InvalidArgument, match="bad component"):
        parse_stream_path("/apps/../activity", SF)


def test_empty_component_refused():
    with pytest.raises(InvalidArgument, match=r"empty path component \('//'\)"):
        parse_stream_path("/mapr/sanfrancisco/apps//activity", None)


def test_colon_refused_in_stream_path():
    with pytest.raises(InvalidArgument, match="':' separates a topic"):
        parse_stream_path("/mapr/sanfrancisco/activity:clicks", None)


@pytest.mark.parametrize("component", [" lead", "a\tb", "a\nb", "tab\n", "star*", "q?", "a\\b", "é"])
def test_bad_characters_in_component(component):
    with pytest.raises(InvalidArgument, match="bad component"):
        parse_stream_path(f"/mapr/sanfrancisco/{component}/x", None)


def test_component_too_long():
    parse_stream_path("/mapr/sanfrancisco/" + "a" * 255, None)
    with pytest.raises(InvalidArgument, match="bad component"):
        parse_stream_path("/mapr/sanfrancisco/" + "a" * 256, None)


def test_path_too_long():
    longest = "/mapr/sanfrancisco/" + "/".join(["a" * 200] * 5) + "b"
    assert len(longest) == MAX_PATH_LENGTH
    assert parse_stream_path(longest, None).cluster == SF
    with pytest.raises(InvalidArgument, match=f"longer than {MAX_PATH_LENGTH} characters"):
        parse_stream_path(longest + "b", None)


def test_error_messages_are_one_line():
    for text in ["/mapr/sf\n/x", "/mapr/sf/a\nb", "/a:b\n:c", "\n/x\n//y"]:
        with pytest.raises(InvalidArgument) as err:
            parse_stream_path(text, SF)
        assert "\n" not in str(err.value)


# --- topic paths ---------------------------------------------------------------


def test_topic_path():
    tp = parse_topic_path("/mapr/sanfrancisco/activity:clicks", None)
    assert tp == TopicPath(StreamPath(SF, "/activity"), "clicks")
    assert str(tp) == "/mapr/sanfrancisco/activity:clicks"


def test_topic_path_on_default_cluster():
    assert parse_topic_path("activity:clicks", SF) == TopicPath(StreamPath(SF, "/activity"), "clicks")


@pytest.mark.parametrize("text", ["/mapr/sanfrancisco/activity", "/a:b:c", None])
def test_topic_path_needs_exactly_one_colon(text):
    with pytest.raises(InvalidArgument, match=r"expected <stream path>:<topic>"):
        parse_topic_path(text, SF)


@pytest.mark.parametrize("topic", ["", " ", ".", "..", "a b", "a/b", "t!", "é", "t" * 250])
def test_bad_topic_names(topic):
    with pytest.raises(InvalidArgument, match="invalid topic name"):
        parse_topic_path(f"/mapr/sanfrancisco/activity:{topic}", None)


@pytest.mark.parametrize("topic", ["t\n", "\nt", "a\nb"])
def test_validate_topic_name_refuses_newlines(topic):
    with pytest.raises(InvalidArgument, match="invalid topic name"):
        validate_topic_name(topic)


def test_longest_topic_name_accepted():
    assert validate_topic_name("t" * 249) == "t" * 249


def test_stream_path_topic_validates():
    sp = StreamPath(SF, "/activity")
    assert sp.topic("clicks") == TopicPath(sp, "clicks")
    with pytest.raises(InvalidArgument):
        sp.topic("bad topic")


def test_parse_stream_or_topic():
    assert parse_stream_or_topic("/mapr/sanfrancisco/a", None) == (StreamPath(SF, "/a"), None)
    assert parse_stream_or_topic("/mapr/sanfrancisco/a:t", None) == (StreamPath(SF, "/a"), "t")
    with pytest.raises(InvalidArgument):
        parse_stream_or_topic("/mapr/sanfrancisco/a:", None)


# --- properties ---------------------------------------------------------------

CLUSTERS = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)
COMPONENTS = st.from_regex(r"[A-Za-z0-9._@+=,%~-][A-Za-z0-9._@+=,%~ -]{0,30}", fullmatch=True).filter(
    lambda c: c not in (".", "..")
)
TOPICS = st.from_regex(r"[A-Za-z0-9._-]{1,40}", fullmatch=True).filter(lambda t: t not in (".", ".."))
# Text biased toward path syntax so the parser's branches are all reached.
PATHISH = st.text(alphabet=st.sampled_from(list("/:mapr. -_\n\t\x00é*" + "abcsf")) | st.characters(), max_size=60)


@settings(max_examples=300, deadline=None)
@given(text=PATHISH | st.text(), default=st.none() | st.just(SF))
def test_parse_stream_path_returns_or_raises_invalid_argument(text, default):
    try:
        sp = parse_stream_path(text, default)
    except InvalidArgument as err:
        assert "\n" not in str(err)
    else:
        assert isinstance(sp, StreamPath)
        assert sp.path.startswith("/")
        assert "\n" not in str(sp) and ":" not in str(sp)


@settings(max_examples=300, deadline=None)
@given(text=PATHISH | st.text(), default=st.none() | st.just(SF))
def test_parse_topic_path_returns_or_raises_invalid_argument(text, default):
    try:
        tp = parse_topic_path(text, default)
    except InvalidArgument as err:
        assert "\n" not in str(err)
    else:
        assert isinstance(tp, TopicPath)
        assert validate_topic_name(tp.topic) == tp.topic


@settings(max_examples=200, deadline=None)
@given(
    cluster=CLUSTERS,
    # Whitespace around a whole path is stripped, so the last component cannot end in a space.
    components=st.lists(COMPONENTS, min_size=1, max_size=5).filter(lambda c: not c[-1].endswith(" ")),
    leading_slash=st.booleans(),
    default=st.none() | st.just("elsewhere"),
)
def test_stream_path_round_trip(cluster, components, leading_slash, default):
    text = ("/" if leading_slash else "") + "mapr/" + cluster + "/" + "/".join(components)
    sp = parse_stream_path(text, default)
    assert sp == StreamPath(cluster, "/" + "/".join(components))
    assert parse_stream_path(str(sp), default) == sp
    assert parse_stream_path(str(sp), None) == sp


@settings(max_examples=200, deadline=None)
@given(
    components=st.lists(COMPONENTS, min_size=1, max_size=5).filter(lambda c: c[0] != "mapr" and not c[-1].endswith(" "))
)
def test_default_cluster_round_trip(components):
    sp = parse_stream_path("/" + "/".join(components), SF)
    assert sp.cluster == SF
    assert parse_stream_path(str(sp), None) == sp


@settings(max_examples=200, deadline=None)
@given(cluster=CLUSTERS, components=st.lists(COMPONENTS, min_size=1, max_size=4), topic=TOPICS)
def test_topic_path_round_trip(cluster, components, topic):
    tp = parse_topic_path(f"/mapr/{cluster}/{'/'.join(components)}:{topic}", None)
    assert tp.topic == topic
    assert parse_topic_path(str(tp), None) == tp
