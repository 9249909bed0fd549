"""Layer 5's engine: the ``streamrep`` PySpark Python Data Source (``streamrep.spark.source``),
the two Spark jobs (``streamrep.spark.jobs``), and spark-submit for them (``streamrep.spark.submit``).

Importing this package does not import pyspark; ``source`` and ``jobs`` do.
"""

from streamrep.spark.submit import AppResult, application, run_app, spark_submit_command, start_app, submit_env

__all__ = ["AppResult", "application", "run_app", "spark_submit_command", "start_app", "submit_env"]
