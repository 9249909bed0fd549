# The streamrep image: Airflow 3 with this repository's DAGs, plugin and the streamrep package,
# installed from uv.lock, plus a JRE for spark-submit. docker-compose.yaml runs every Airflow
# service AND the Spark master and worker from it, so Spark's executors import the same
# streamrep, pyarrow and pyspark as the Airflow task that submitted the job (the executors run
# the Python of that task: spark.pyspark.python is the submitting interpreter's path).
#
# Versions: AIRFLOW_VERSION and PYSPARK_VERSION must be the ones uv.lock pins
# (tests/unit/test_compose.py checks it); the build fails if the installed ones differ.
# Builds with the classic builder and BuildKit alike (no heredocs, no cache mounts).
ARG AIRFLOW_VERSION=3.3.2
ARG PYTHON_VERSION=3.11

# --- stage 1: uv.lock as a hashed requirements file (uv stays out of the final image) ---
FROM apache/airflow:${AIRFLOW_VERSION}-python${PYTHON_VERSION} AS requirements
ARG UV_VERSION=0.13.9
USER airflow
RUN pip install --no-cache-dir "uv==${UV_VERSION}"
COPY --chown=airflow:0 pyproject.toml uv.lock README.md /tmp/lock/
# --frozen: exactly the lock, never a re-resolve; no dev group; the project itself comes later.
# The lock's pyspark-client carries the marker sys_platform == 'never', so pip skips it.
RUN cd /tmp/lock && python -m uv export --frozen --no-dev --no-emit-project \
        --format requirements-txt -o /tmp/lock/requirements.txt

# --- stage 2: the image ---
FROM apache/airflow:${AIRFLOW_VERSION}-python${PYTHON_VERSION}
ARG AIRFLOW_VERSION
ARG PYSPARK_VERSION=4.3.0

USER root
# A JRE for spark-submit and for the Spark master and worker (Debian's default: 17 on bookworm,
# 21 on trixie; Spark 4 runs on both).
RUN apt-get update \
    && apt-get install -y --no-install-recommends default-jre-headless \
    && apt-get autoremove -yqq --purge \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*

USER airflow
COPY --from=requirements /tmp/lock/requirements.txt /tmp/streamrep-requirements.txt
# pyspark-client (pulled in by the Spark provider elsewhere) would overwrite ~700 of pyspark
# 4.3's Python files with 4.2's: make sure no copy of it is in the base image's environment.
# --no-deps --require-hashes: the lock is the whole closure, each file checked by its hash.
# The base image's other packages (psycopg2 for PostgreSQL among them) stay as they are.
RUN pip uninstall -y pyspark-client \
    && pip install --no-cache-dir --no-deps --require-hashes -r /tmp/streamrep-requirements.txt

# The repository (filtered by .dockerignore), installed editable: the package is then
# /opt/streamrep/plugins/streamrep, which is also Airflow's plugins folder, and
# streamrep.spark.submit finds the apps in /opt/streamrep/spark_apps.
COPY --chown=airflow:0 . /opt/streamrep
RUN pip install --no-cache-dir --no-deps -e /opt/streamrep \
    && python -c "import airflow, pyspark, streamrep, sys; \
v = {'apache-airflow': (airflow.__version__, '${AIRFLOW_VERSION}'), 'pyspark': (pyspark.__version__, '${PYSPARK_VERSION}')}; \
bad = {k: x for k, x in v.items() if x[0] != x[1]}; \
sys.exit(f'installed != pinned: {bad}') if bad else print('versions ok', v)" \
    && python -c "import os, pyspark; print(os.path.dirname(pyspark.__file__))" > /opt/streamrep/.spark-home \
    && java -version \
    && mkdir -p /opt/streamrep/home /tmp/streamrep-airflow /opt/airflow/auth

USER root
# pyspark's own Spark distribution (bin/spark-class, jars) at a fixed path for the Spark services.
RUN ln -s "$(cat /opt/streamrep/.spark-home)" /opt/spark
USER airflow

ENV SPARK_HOME=/opt/spark \
    STREAMREP_HOME=/opt/streamrep/home \
    STREAMREP_SPARK_APPS=/opt/streamrep/spark_apps \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/streamrep/dags \
    AIRFLOW__CORE__PLUGINS_FOLDER=/opt/streamrep/plugins \
    AIRFLOW__CORE__LOAD_EXAMPLES=False
WORKDIR /opt/airflow
