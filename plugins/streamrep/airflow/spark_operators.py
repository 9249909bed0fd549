"""The Spark operators' documented import path (docs/airflow.md, users' DAGs): they live in
``streamrep.airflow.operators`` by area, ``spark_submit`` (their base), ``copystream``,
``spark_gateway`` and ``diffstreams``."""

# Re-exported: docs/airflow.md and users' DAGs import the Spark operators from this module.
from streamrep.airflow.operators.copystream import StreamCopyOperator
from streamrep.airflow.operators.diffstreams import DIFF_ENGINES, StreamDiffOperator
from streamrep.airflow.operators.spark_gateway import StreamGatewayOperator
from streamrep.airflow.operators.spark_submit import StreamrepSparkSubmitOperator

__all__ = [
    "DIFF_ENGINES",
    "StreamCopyOperator",
    "StreamDiffOperator",
    "StreamGatewayOperator",
    "StreamrepSparkSubmitOperator",
]
