"""What the Airflow operator and sensor tests share: the two streams and a task context."""

from __future__ import annotations

from types import SimpleNamespace

SRC = "/mapr/sanfrancisco/activity"
DST = "/mapr/newyork/activity"


def ctx(try_number: int = 1) -> dict:
    """The part of an Airflow task context the operators read."""
    return {"ti": SimpleNamespace(try_number=try_number)}


def running_replica(admin, copied: int = 0, pending: int = 5):
    """SRC (2 partitions, topic clicks) -> DST, resumed: ``copied`` messages copied to the
    replica, then ``pending`` more produced and not replicated yet."""
    from streamrep.client import Producer
    from streamrep.replication.copy import copy_stream

    admin.create_stream(SRC, defaultpartitions=2)
    admin.create_topic(SRC, "clicks")
    with Producer(admin) as producer:
        for i in range(copied):
            producer.send(f"{SRC}:clicks", b"before", key=str(i).encode())
    admin.create_stream(DST, copymetafrom=SRC)
    admin.add_replica(SRC, DST, paused=True)
    admin.add_upstream(DST, SRC)
    copy_stream(admin, SRC, DST)
    admin.resume_replica(SRC, DST)
    with Producer(admin) as producer:
        for i in range(pending):
            producer.send(f"{SRC}:clicks", b"after", key=str(i).encode())
    return admin
