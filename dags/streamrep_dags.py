# The DAGs of the installed streamrep provider (Airflow reads a file for DAGs only when it
# names both airflow and dag, as this comment does). docs/airflow.md shows this file.
from streamrep.dags import *  # noqa: F401,F403
