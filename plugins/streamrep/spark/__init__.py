"""Layer 5's engine: the ``streamrep`` PySpark Python Data Source (``streamrep.spark.source``, with
``rows``, ``offsets``, ``reader``, ``writer`` and ``runtime``), the two Spark jobs
(``streamrep.spark.jobs``) and what their tasks run (``streamrep.spark.tasks``), and spark-submit
for them (``streamrep.spark.submit``, with ``command`` and ``lifetime``).

Importing this package does not import pyspark; ``source``, ``jobs`` and their parts do.
"""

from streamrep.spark.command import application, spark_submit_command, submit_env
from streamrep.spark.submit import AppResult, run_app, start_app

__all__ = ["AppResult", "application", "run_app", "spark_submit_command", "start_app", "submit_env"]
