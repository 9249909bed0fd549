"""stream_replica_control: pause, resume or remove a replica."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param, TriggerRule, task

from streamrep.airflow.operators import (
    ReplicaPauseOperator,
    ReplicaRemoveOperator,
    ReplicaResumeOperator,
    ReplicaStatusOperator,
)
from streamrep.airflow.params import flag_param, stream_path_param
from streamrep.dags.common import REPLICA, SOURCE, replica_dag

DOC = """
### Replica control

Pause, resume or remove one replica of a stream:

| action | maprcli |
| --- | --- |
| `pause` | `stream replica pause -path <path> -replica <replica>`: updates wait at the source |
| `resume` | `stream replica resume -path <path> -replica <replica>`: replication continues |
| `remove` | `stream replica remove -path <path> -replica <replica>`: replication stops for good (the replica stream and its data stay); only with `confirm_remove: true` |

`choose_action` runs the task of the chosen action; `replica_list` then shows
`stream replica list -path <path>` (state, pending messages, lag) in its log and XCom.

**Params**: `path` (source stream), `replica` (replica stream: required, it has no default, so a
trigger that forgets it fails instead of acting on some default replica), `action`, and
`confirm_remove` (must be `true` for `remove`; the `remove` task fails otherwise and nothing is
removed).
"""

ACTIONS = {"pause": ReplicaPauseOperator, "resume": ReplicaResumeOperator, "remove": ReplicaRemoveOperator}

with replica_dag(
    "stream_replica_control",
    description="Pause, resume or remove a replica",
    doc_md=DOC,
    retries=2,
    params={
        "path": stream_path_param("/mapr/sanfrancisco/activity", "Source stream", "The replicated stream."),
        "replica": stream_path_param(None, "Replica stream", "One of its replicas (required)."),
        "action": Param(
            "pause",
            type="string",
            enum=sorted(ACTIONS),
            title="Action",
            description="What to do with the replica: pause, resume or remove.",
        ),
        "confirm_remove": flag_param(
            False, "Confirm remove", "Must be true for action remove: the replica stops for good."
        ),
    },
) as dag:

    @task.branch(task_id="choose_action")
    def choose_action(params: dict[str, Any] | None = None) -> str:
        """The task of the chosen action (Airflow passes the run's ``params``)."""
        return str((params or {})["action"])

    branch = choose_action()
    status = ReplicaStatusOperator(
        task_id="replica_list", path=SOURCE, trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS
    )
    for action, operator in ACTIONS.items():
        confirmation = {"confirmed": "{{ params.confirm_remove }}"} if action == "remove" else {}
        (branch >> operator(task_id=action, path=SOURCE, replica=REPLICA, **confirmation) >> status)
