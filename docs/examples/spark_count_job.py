"""A complete PySpark job of a user's own that reads a stream with ``format("streamrep")``.

Run it with the Python streamrep is installed in (``.venv/bin/python docs/examples/spark_count_job.py
/mapr/sanfrancisco/activity``), or with ``spark-submit``. It needs no ``PYSPARK_PYTHON``: ``register``
points Spark's Python workers at this interpreter unless another is chosen. It prints one JSON line:
the messages per topic, and the newest timestamp, as Spark's Kafka source would give them.
"""

import json
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from streamrep.spark.source import register

spark = SparkSession.builder.appName("count-a-stream").master("local[1]").getOrCreate()
register(spark)
df = spark.read.format("streamrep").option("path", sys.argv[1]).load()
counts = df.groupBy("topic").agg(F.count("*").alias("messages"), F.max(F.unix_millis("timestamp")).alias("newest_ms"))
print(json.dumps({row.topic: {"messages": row.messages, "newest_ms": row.newest_ms} for row in counts.collect()}))
spark.stop()
