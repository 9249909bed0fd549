# The streamrep image: Airflow 3 with streamrep's dependencies installed from uv.lock, and a JRE
# for Spark. streamrep itself is not in it: docker-compose.yaml mounts the design card's folders
# (dags/, plugins/ with the package, spark_apps/) as the official compose file mounts dags/ and
# plugins/, so a change to a DAG or a Spark app needs no rebuild. It runs every Airflow service
# (and the Celery workers, where the tasks and the drivers of their Spark jobs run) AND the Spark
# master and worker, so Spark's executors import the same pyarrow and pyspark, and the same
# mounted streamrep, as the task that submitted the job. (The wheel way is tested by
# tests/e2e/test_wheel_install.py; docs/airflow.md shows an image that installs the wheel.)
#
# Built from debian:bookworm-slim (Python 3.11.2, as pyproject.toml requires) and Debian's
# packages; Python packages come from PyPI, exactly as uv.lock pins them. ./run stack makes the
# base image locally with mmdebstrap; elsewhere it is Docker Hub's. AIRFLOW_VERSION and
# PYSPARK_VERSION must be uv.lock's (tests/unit/test_compose.py checks): the build fails if the
# installed ones differ. Builds with the classic builder and BuildKit alike (no heredocs, no
# cache mounts).
ARG PYTHON_VERSION=3.11

# --- build stages: Python, uv, and the CAs of docker/extra-ca/ (see its README) ---
FROM debian:bookworm-slim AS uv
ARG UV_VERSION=0.13.9
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY docker/extra-ca/ /usr/local/share/ca-certificates/
RUN update-ca-certificates \
    && python3 -m venv /opt/uv \
    && /opt/uv/bin/pip install --no-cache-dir --cert /etc/ssl/certs/ca-certificates.crt "uv==${UV_VERSION}"
ENV UV_PROJECT_ENVIRONMENT=/opt/streamrep/venv \
    UV_PYTHON=/usr/bin/python3 \
    UV_PYTHON_DOWNLOADS=never \
    UV_NATIVE_TLS=1 \
    UV_NO_CACHE=1 \
    UV_LINK_MODE=copy \
    UV_COMPILE_BYTECODE=1 \
    PATH=/opt/uv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /src

# The environment of uv.lock: --frozen (exactly the lock), no dev group, the extras of the
# stack (PostgreSQL, Celery with Redis), not the project. Rebuilt only when the lock changes.
FROM uv AS deps
COPY pyproject.toml uv.lock ./
RUN uv sync --frozen --no-dev --no-install-project --extra postgres --extra celery

# --- the image ---
FROM debian:bookworm-slim
ARG PYTHON_VERSION
ARG AIRFLOW_VERSION=3.3.2
ARG PYSPARK_VERSION=4.2.0

# python3 (3.11 on bookworm); Debian's default JRE (17) for spark-submit and the Spark daemons;
# curl for healthchecks; tini as PID 1.
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 default-jre-headless curl tini procps ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -c "import sys; v = '%d.%d' % sys.version_info[:2]; sys.exit(f'python {v} != ${PYTHON_VERSION}') if v != '${PYTHON_VERSION}' else None" \
    && useradd --uid 50000 --gid 0 --home-dir /home/airflow --create-home airflow \
    && mkdir -p /opt/airflow/dags /opt/airflow/plugins /opt/airflow/spark_apps /opt/airflow/logs /opt/airflow/auth /opt/streamrep/home /tmp/streamrep-airflow \
    && chown -R airflow:0 /opt/airflow /opt/streamrep /tmp/streamrep-airflow

COPY --from=uv /opt/uv/bin/uv /usr/local/bin/uv
COPY --from=deps --chown=airflow:0 /opt/streamrep/venv /opt/streamrep/venv
ENV PATH=/opt/streamrep/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# The command line of a folder deployment: the mounted package's CLI.
RUN printf '#!/bin/sh\nexec python -m streamrep.cli "$@"\n' > /usr/local/bin/streamrep \
    && chmod 755 /usr/local/bin/streamrep
USER airflow
RUN python -c "import airflow, pyspark, sys; \
v = {'apache-airflow': (airflow.__version__, '${AIRFLOW_VERSION}'), 'pyspark': (pyspark.__version__, '${PYSPARK_VERSION}')}; \
bad = {k: x for k, x in v.items() if x[0] != x[1]}; \
sys.exit(f'installed != pinned: {bad}') if bad else print('versions ok', v)" \
    && java -version
USER root
# pyspark's own Spark distribution (bin/spark-class, jars) at a fixed path for the Spark services.
RUN ln -s "$(/opt/streamrep/venv/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" /opt/spark
USER airflow

ENV SPARK_HOME=/opt/spark \
    AIRFLOW_HOME=/opt/airflow \
    STREAMREP_HOME=/opt/streamrep/home \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/airflow/dags \
    AIRFLOW__CORE__PLUGINS_FOLDER=/opt/airflow/plugins \
    PYTHONPATH=/opt/airflow/plugins \
    AIRFLOW__CORE__LOAD_EXAMPLES=False
WORKDIR /opt/airflow
ENTRYPOINT ["/usr/bin/tini", "--", "airflow"]
