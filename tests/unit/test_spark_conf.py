"""What every Spark job is given, whatever its master: the caller's identity for the executors."""

from __future__ import annotations

from streamrep.spark.command import application, spark_conf


def test_executors_check_permissions_as_the_launching_caller(monkeypatch):
    monkeypatch.setenv("STREAMREP_USER", "alice")
    monkeypatch.setenv("STREAMREP_GROUPS", "eng,ops")
    conf = spark_conf()
    assert conf["spark.executorEnv.STREAMREP_USER"] == "alice"
    assert conf["spark.executorEnv.STREAMREP_GROUPS"] == "eng ops"
    _, _, app_conf = application("gateway", ["--cluster", "newyork"])
    assert app_conf["spark.executorEnv.STREAMREP_USER"] == "alice"


def test_a_users_own_conf_still_wins(monkeypatch):
    monkeypatch.setenv("STREAMREP_USER", "alice")
    assert spark_conf({"spark.executorEnv.STREAMREP_USER": "svc"})["spark.executorEnv.STREAMREP_USER"] == "svc"


def test_copystream_starts_a_lighter_jvm_and_a_users_conf_wins():
    # copystream's JVM only plans and schedules: C1 alone and the serial GC; the gateway's JVM
    # moves every row, so it keeps the default JIT.
    _, _, copy_conf = application("copystream", ["--src", "/mapr/a/s", "--dst", "/mapr/b/s"])
    assert copy_conf["spark.driver.defaultJavaOptions"].split() == ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
    _, _, gateway_conf = application("gateway", ["--cluster", "newyork"])
    assert "spark.driver.defaultJavaOptions" not in gateway_conf
    _, _, own = application("copystream", [], {"spark.driver.defaultJavaOptions": "-Xss4m"})
    assert own["spark.driver.defaultJavaOptions"] == "-Xss4m"


def test_executors_get_the_os_user_as_a_stand_in_that_names_no_one(monkeypatch):
    import getpass

    monkeypatch.delenv("STREAMREP_USER", raising=False)
    conf = spark_conf()
    assert "spark.executorEnv.STREAMREP_USER" not in conf
    assert conf["spark.executorEnv.STREAMREP_LAUNCHER_USER"] == getpass.getuser()
    monkeypatch.setenv("STREAMREP_LAUNCHER_USER", "launcher")
    from streamrep.client.identity import current_identity, named_user

    assert current_identity().user == "launcher" and named_user() is None
