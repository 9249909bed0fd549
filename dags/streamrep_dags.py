# The DAGs of the installed streamrep provider. docs/airflow.md shows this file.
# Airflow's safe mode parses only a file whose text names "airflow" (and "dag" or "asset"): the
# first import names both, so the file is found whatever its comments say.
from airflow.sdk import DAG  # noqa: F401

from streamrep.dags import *  # noqa: F401,F403
