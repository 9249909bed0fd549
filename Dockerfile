# The streamrep image: Airflow 3 with streamrep installed from uv.lock, and a JRE for Spark.
# docker-compose.yaml runs every Airflow service (and the Celery workers, where the tasks and the
# drivers of their Spark jobs run) AND the Spark master and worker from it, so Spark's executors
# import the same streamrep, pyarrow and pyspark as the task that submitted the job.
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
COPY pyproject.toml uv.lock README.md ./
RUN uv sync --frozen --no-dev --no-install-project --extra postgres --extra celery

# The project as a wheel, as `uv build` makes it for PyPI.
FROM uv AS wheel
COPY pyproject.toml README.md ./
COPY src/ src/
RUN uv build --wheel --out-dir /dist

# --- the image ---
FROM debian:bookworm-slim
ARG PYTHON_VERSION
ARG AIRFLOW_VERSION=3.3.2
ARG PYSPARK_VERSION=4.3.0

# python3 (3.11 on bookworm); Debian's default JRE (17) for spark-submit and the Spark daemons;
# curl for healthchecks; tini as PID 1.
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 default-jre-headless curl tini procps ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -c "import sys; v = '%d.%d' % sys.version_info[:2]; sys.exit(f'python {v} != ${PYTHON_VERSION}') if v != '${PYTHON_VERSION}' else None" \
    && useradd --uid 50000 --gid 0 --home-dir /home/airflow --create-home airflow \
    && mkdir -p /opt/airflow/dags /opt/airflow/logs /opt/airflow/auth /opt/streamrep/home /tmp/streamrep-airflow \
    && chown -R airflow:0 /opt/airflow /opt/streamrep /tmp/streamrep-airflow

COPY --from=uv /opt/uv/bin/uv /usr/local/bin/uv
COPY --from=deps --chown=airflow:0 /opt/streamrep/venv /opt/streamrep/venv
COPY --from=wheel /dist/ /tmp/dist/
ENV PATH=/opt/streamrep/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
USER airflow
# The wheel into the lock's environment: no network (--offline), no dependency changed (--no-deps).
RUN uv pip install --offline --no-deps --no-cache --compile-bytecode --python /opt/streamrep/venv/bin/python /tmp/dist/*.whl \
    && python -c "import airflow, pyspark, streamrep, sys; \
v = {'apache-airflow': (airflow.__version__, '${AIRFLOW_VERSION}'), 'pyspark': (pyspark.__version__, '${PYSPARK_VERSION}')}; \
bad = {k: x for k, x in v.items() if x[0] != x[1]}; \
sys.exit(f'installed != pinned: {bad}') if bad else print('versions ok', v)" \
    && java -version
# The dags folder: the one short file that imports the package's DAGs (README).
COPY --chown=airflow:0 dags/streamrep_dags.py /opt/airflow/dags/

USER root
# pyspark's own Spark distribution (bin/spark-class, jars) at a fixed path for the Spark services.
RUN ln -s "$(/opt/streamrep/venv/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" /opt/spark \
    && rm -rf /tmp/dist
USER airflow

ENV SPARK_HOME=/opt/spark \
    AIRFLOW_HOME=/opt/airflow \
    STREAMREP_HOME=/opt/streamrep/home \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/airflow/dags \
    AIRFLOW__CORE__LOAD_EXAMPLES=False
WORKDIR /opt/airflow
ENTRYPOINT ["/usr/bin/tini", "--", "airflow"]
