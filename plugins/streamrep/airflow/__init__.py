"""streamrep's Airflow provider: the hook, operators, sensors, triggers and the UI plugin.

Every module here needs Airflow 3 (``airflow.sdk``). Installed beside Airflow 2 (pip with
``--no-deps``, or a constraint file that keeps Airflow 2), the first import says so in one line
instead of an ImportError deep inside a DAG file.
"""

from streamrep.airflow.support import require_airflow

require_airflow()
