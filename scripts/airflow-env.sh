# The environment streamrep's Airflow runs in: sourced by airflow-ui.sh and demo.sh (REPO must be set).
export AIRFLOW_HOME="${AIRFLOW_HOME:-$REPO/.airflow-home}"
export STREAMREP_HOME="${STREAMREP_HOME:-$HOME/.streamrep}"
export PATH="$REPO/.venv/bin:$PATH"              # spark-submit and airflow from this venv
export PYSPARK_PYTHON="$REPO/.venv/bin/python"
export AIRFLOW__CORE__DAGS_FOLDER="$REPO/dags"
# No plugins folder of ours: the installed package brings its page (the airflow.plugins entry point).
# The connection form's Test button (off by default in Airflow 3).
export AIRFLOW__CORE__TEST_CONNECTION="${AIRFLOW__CORE__TEST_CONNECTION:-Enabled}"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
# Login off (every visitor an admin) unless the caller says False: then the simple auth manager
# asks for the users of AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS (passwords in $AIRFLOW_HOME).
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS:-True}"
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="${AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION:-False}"
export AIRFLOW__CORE__PARALLELISM="${AIRFLOW__CORE__PARALLELISM:-4}"   # a small machine
LOCAL_SPARK='{"conn_type": "spark", "host": "local[2]"}'
export AIRFLOW_CONN_SPARK_DEFAULT="${AIRFLOW_CONN_SPARK_DEFAULT:-$LOCAL_SPARK}"
