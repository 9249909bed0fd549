"""stream_messages_example: a DAG scheduled on new messages in a streamrep topic, through an
AssetWatcher whose trigger waits for them in the triggerer: common-messaging's
``MessageQueueTrigger(scheme="streamrep")``, which streamrep's provider info maps onto
``StreamMessageTrigger`` (``streamrep.airflow.queues``)."""

from __future__ import annotations

import os

from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger
from airflow.sdk import DAG, AssetWatcher, task

from streamrep.airflow.assets import topic_asset

# The watched topic: the demo's, unless the deployment names another (read when the DAG is parsed).
TOPIC = os.environ.get("STREAMREP_EXAMPLE_TOPIC", "/mapr/sanfrancisco/activity:clicks")
STREAM, _, TOPIC_NAME = TOPIC.partition(":")

DOC = f"""
### Runs on new messages in a stream

Scheduled on the Asset of the topic `{TOPIC}` (`streamrep://<cluster>/<stream>:<topic>`), which
an `AssetWatcher` watches with common-messaging's `MessageQueueTrigger(scheme="streamrep")`,
that is streamrep's `StreamMessageTrigger`: the triggerer reads the topic as the consumer group
`airflow-asset-watcher` and fires once for each batch of new messages; each fire makes one asset
event, and the scheduler a run of this DAG (events that arrive together may share a run). The
task `show_messages` logs what the events carried.

**Params**: none. The topic is set by `STREAMREP_EXAMPLE_TOPIC` where the DAG is parsed
(default `/mapr/sanfrancisco/activity:clicks`).
"""

messages = topic_asset(
    TOPIC,
    watchers=[
        AssetWatcher(
            name="streamrep_example_messages",
            trigger=MessageQueueTrigger(scheme="streamrep", stream=STREAM, topic=TOPIC_NAME or None, poll_interval=2),
        )
    ],
)

with DAG(
    dag_id="stream_messages_example",
    description="Runs when new messages arrive in a streamrep topic (AssetWatcher)",
    doc_md=DOC,
    schedule=[messages],
    tags=["streamrep", "assets", "example"],
    max_active_runs=1,
) as dag:

    @task(inlets=[messages])
    def show_messages(**context) -> list[dict]:
        """Log the messages the triggering events carried; return their places."""
        seen = []
        for event in context["triggering_asset_events"][messages]:
            payload = (event.extra or {}).get("payload") or {}
            for m in payload.get("messages", []):
                print(f"{payload.get('path')} partition {m['partition']} offset {m['offset']}: {m['value']!r}")
                seen.append({"partition": m["partition"], "offset": m["offset"]})
        return seen

    show_messages()
