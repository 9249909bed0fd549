#!/usr/bin/env bash
# Airflow on this machine with streamrep's DAGs and the "Stream replication" page, login off.
#
#   scripts/airflow-ui.sh          then open http://localhost:8080  (Ctrl-C stops everything)
#
# It runs `airflow standalone` (api-server, scheduler, dag-processor, triggerer) on SQLite with:
#   dags/ as the DAG folder (streamrep_dags.py brings the package's DAGs); the page comes from the
#   installed package's airflow.plugins entry point (the "Replication" entry of the UI's navigation,
#   /plugin/stream-replication); the connection form's Test button on;
#   the same clusters as the streamrep CLI ($STREAMREP_HOME, default ~/.streamrep);
#   Spark in local mode for copystream and the gateways (connection spark_default).
# Settings: PORT (8080), AIRFLOW_HOME (<repo>/.airflow-home), STREAMREP_HOME, and any AIRFLOW__*.
# For local use only: every visitor is an admin (AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS), and
# the page and the REST form (/streamrep/rest/...) act as the CLI's user: STREAMREP_USER, else the
# OS user who runs this script.
# AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS=False turns login on (the page then asks for it too).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
if [ ! -x .venv/bin/airflow ]; then
  echo "airflow-ui: .venv/bin/airflow is missing; install first (./run test --co -q, or uv sync --frozen --all-extras)" >&2
  exit 1
fi

if [ ! -f plugins/streamrep/airflow/static/replication.js ]; then
  ./run ui  # the page's bundle (ui/), which the installed package serves from its folder
fi

source scripts/airflow-env.sh
export AIRFLOW__API__PORT="${PORT:-8080}"
export AIRFLOW__API__BASE_URL="${AIRFLOW__API__BASE_URL:-http://localhost:$AIRFLOW__API__PORT}"  # tasks call it back
mkdir -p "$AIRFLOW_HOME"

echo "airflow-ui: http://localhost:${AIRFLOW__API__PORT}  (replication page: /plugin/stream-replication)"
echo "airflow-ui: AIRFLOW_HOME=$AIRFLOW_HOME STREAMREP_HOME=$STREAMREP_HOME"
exec airflow standalone
