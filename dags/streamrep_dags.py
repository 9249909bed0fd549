# The DAGs of the installed streamrep provider (Airflow reads a file for DAGs only when it
# names both airflow and dag, as this comment does). The README shows this file.
from streamrep.dags import *  # noqa: F401,F403
