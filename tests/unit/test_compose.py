"""docker-compose.yaml, the Dockerfiles, .env.example and "The compose stack" of docs/operations.md agree.

Fast and without an engine: Debian's docker-compose 1.29 validates and resolves the file
(``docker-compose config``, as on a fresh clone: no .env, none of its variables in the
environment), and the resolved services are checked against the services table of docs/operations.md, the
pinned versions of uv.lock, kafka/pom.xml and ./run. ``tests/e2e/test_stack.py`` builds and
starts the stack for real.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yaml"
OPERATIONS = REPO / "docs" / "operations.md"
STACK_SECTION = "## The compose stack"
# ${VAR}, ${VAR:-default} or ${VAR-default}; "$${...}" is an escaped dollar for the container's shell.
VARIABLE = re.compile(r"(?<!\$)\$\{(\w+)(?:(:?-)([^}]*))?\}")


@pytest.fixture(scope="module")
def compose_config(tmp_path_factory) -> dict:
    """``docker-compose config`` of the file as a fresh clone has it, parsed."""
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (./run test installs Debian's when apt-get is usable)")
    empty_env = tmp_path_factory.mktemp("compose") / "empty.env"
    empty_env.write_text("")
    # Only PATH and HOME: a variable of the developer's shell or .env must not stand in for a default.
    env = {k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ}
    done = subprocess.run(
        [binary, "--env-file", str(empty_env), "-f", str(COMPOSE), "config"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"docker-compose config failed:\n{done.stderr}"
    # A variable without a default is reported ("The X variable is not set") and becomes "".
    assert "is not set" not in done.stderr, done.stderr
    return yaml.safe_load(done.stdout)


def documented_services() -> list[str]:
    """The services named in the first column of the compose services table of docs/operations.md."""
    text = OPERATIONS.read_text(encoding="utf-8")
    start = text.find(STACK_SECTION)
    assert start != -1, f"docs/operations.md has no section {STACK_SECTION!r}"
    end = text.find("\n## ", start + len(STACK_SECTION))
    section = text[start : end if end != -1 else len(text)]
    names = re.findall(r"^\| `([a-z][a-z0-9-]*)` \|", section, flags=re.MULTILINE)
    assert names, f"no services table (rows starting with | `name` |) in docs/operations.md's {STACK_SECTION!r}"
    return names


def dockerfile_args() -> dict[str, str]:
    text = (REPO / "Dockerfile").read_text(encoding="utf-8")
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", text, flags=re.MULTILINE))


def locked_version(package: str) -> str:
    lock = tomllib.loads((REPO / "uv.lock").read_text(encoding="utf-8"))
    versions = {p["version"] for p in lock["package"] if p["name"] == package}
    assert len(versions) == 1, f"{package} in uv.lock: {versions}"
    return versions.pop()


def test_config_validates_without_env_file(compose_config):
    assert compose_config["services"], "no services"


def test_documented_services_are_the_stack_and_all_have_healthchecks(compose_config):
    named = documented_services()
    services = compose_config["services"]
    assert len(named) == len(set(named)), f"a service listed twice in docs/operations.md: {named}"
    assert set(named) - set(services) == set(), "in the table of docs/operations.md but not in docker-compose.yaml"
    assert set(services) - set(named) == set(), "in docker-compose.yaml but not in the table of docs/operations.md"
    for name in named:
        check = services[name].get("healthcheck") or {}
        test = check.get("test")
        # docker-compose 1.29 resolves "disable: true" to test ["NONE"]
        assert test and test != ["NONE"] and not check.get("disable"), f"{name} has no healthcheck"


def test_every_image_is_pinned(compose_config):
    for name, service in compose_config["services"].items():
        image = service.get("image")
        assert image, f"{name} has no image (a built service names its image and tag too)"
        if "@sha256:" in image:
            continue
        repository, _, tag = image.rpartition(":")
        assert repository and "/" not in tag, f"{name}: image {image} has no tag"
        assert tag != "latest", f"{name}: image {image} is not pinned"


AIRFLOW_IMAGE_SERVICES = {
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-worker",
    "airflow-triggerer",
    "spark-master",
    "spark-worker",
}


def dockerfiles() -> dict[str, str]:
    """Every Dockerfile of the repository by its path, as text."""
    paths = [REPO / "Dockerfile", *sorted((REPO / "docker").glob("*/Dockerfile"))]
    return {str(p.relative_to(REPO)): p.read_text(encoding="utf-8") for p in paths}


def test_every_image_is_built_here_from_debian(compose_config):
    services = compose_config["services"]
    for name, service in services.items():
        assert "build" in service, f"{name} is pulled, not built: no registry serves images here"
        assert Path(service["build"]["context"]).resolve() == REPO
        assert (REPO / service["build"].get("dockerfile", "Dockerfile")).is_file()
    assert {
        n for n, s in services.items() if s["image"] == services["airflow-scheduler"]["image"]
    } == AIRFLOW_IMAGE_SERVICES
    used = {s["build"].get("dockerfile", "Dockerfile") for s in services.values()}
    assert used == set(dockerfiles()), "a Dockerfile that no service builds, or one missing"
    for path, text in dockerfiles().items():
        stages = set(re.findall(r"^FROM \S+ AS (\w+)", text, flags=re.MULTILINE))
        bases = set(re.findall(r"^FROM (\S+)", text, flags=re.MULTILINE))
        assert bases - stages == {"debian:bookworm-slim"}, f"{path}: bases {bases - stages}"
        # Only the package clients (apt-get, pip, uv, mvn) fetch; nothing downloads by URL.
        runs = " ".join(re.findall(r"^RUN (.*(?:\\\n.*)*)", text, flags=re.MULTILINE))
        assert not re.search(r"https?://|\bwget\b|\bcurl\s", runs), f"{path} fetches by URL"


def test_celery_executor_with_a_worker_and_connection_testing(compose_config):
    services = compose_config["services"]
    env = services["airflow-worker"]["environment"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert env["AIRFLOW__CELERY__BROKER_URL"] == "redis://redis:6379/0"
    assert services["airflow-worker"]["command"] in ("celery worker", ["celery", "worker"])
    for name in AIRFLOW_IMAGE_SERVICES - {"spark-master", "spark-worker"}:
        assert services[name]["environment"]["AIRFLOW__CORE__TEST_CONNECTION"] == "Enabled", name


def bind_mounts(service: dict) -> dict[str, Path]:
    """A service's bind mounts, target to source, in the short form docker-compose 1.29 prints
    (``/abs/src:/target:rw``) or the long one (``{type: bind, source, target}``)."""
    mounts = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            if volume.get("type") == "bind":
                mounts[volume["target"]] = Path(volume["source"])
        elif volume.startswith(("/", ".")):
            source, target = volume.split(":")[:2]
            mounts[target] = Path(source)
    return mounts


def test_the_design_cards_folders_are_mounted_not_baked_in(compose_config):
    """dags/, plugins/ and spark_apps/ are mounted into every Airflow service, as the official
    compose file mounts dags/ and plugins/; the Spark worker's executors import the mounted package."""
    services = compose_config["services"]
    folders = {"/opt/airflow/dags": "dags", "/opt/airflow/plugins": "plugins", "/opt/airflow/spark_apps": "spark_apps"}
    for name in AIRFLOW_IMAGE_SERVICES - {"spark-master", "spark-worker"}:
        mounts = bind_mounts(services[name])
        for target, folder in folders.items():
            assert mounts.get(target) in (REPO / folder, Path(".") / folder), f"{name} does not mount ./{folder}"
    assert bind_mounts(services["spark-worker"]).get("/opt/airflow/plugins") in (REPO / "plugins", Path("plugins"))
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "PYTHONPATH=/opt/airflow/plugins" in dockerfile and "COPY src/" not in dockerfile
    assert not re.search(r"^COPY\b.*\b(plugins|dags|spark_apps)/", dockerfile, flags=re.MULTILINE)


def test_ports_are_published_on_loopback_only(compose_config):
    published = 0
    for name, service in compose_config["services"].items():
        for port in service.get("ports", []):
            host_ip = port["host_ip"] if isinstance(port, dict) else port.split(":")[0]
            assert host_ip == "127.0.0.1", f"{name} publishes {port} beyond loopback"
            published += 1
    assert published == 4


def test_connections_name_the_clusters_and_the_spark_master(compose_config):
    import json

    env = compose_config["services"]["airflow-worker"]["environment"]
    for cluster in ("sanfrancisco", "newyork"):
        conn = json.loads(env[f"AIRFLOW_CONN_STREAMREP_{cluster.upper()}"])  # the hook's streamrep_<cluster>
        assert conn == {"conn_type": "streamrep", "host": f"kafka://{cluster}:9092"}
        assert cluster in compose_config["services"], f"no Kafka service {cluster}"
    assert json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])["host"] == "spark://spark-master:7077"


def test_kafka_clusters_run_kraft_on_the_pinned_kafka(compose_config):
    pom = (REPO / "kafka" / "pom.xml").read_text(encoding="utf-8")
    kafka_version = re.search(r"<kafka.version>([^<]+)</kafka.version>", pom).group(1)
    # The settings ./run kafka uses too; the image copies them (docker/kafka/Dockerfile).
    shared = (REPO / "kafka" / "server.properties").read_text(encoding="utf-8")
    assert "process.roles=broker,controller" in shared.splitlines()
    assert "kafka/server.properties" in (REPO / "docker" / "kafka" / "Dockerfile").read_text(encoding="utf-8")
    for cluster in ("sanfrancisco", "newyork"):
        service = compose_config["services"][cluster]
        assert service["image"] == f"streamrep-kafka:{kafka_version}"
        env = service["environment"]
        assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"1@{cluster}:9093"
        assert f"INTERNAL://{cluster}:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
    ids = {compose_config["services"][c]["environment"]["CLUSTER_ID"] for c in ("sanfrancisco", "newyork")}
    assert len(ids) == 2, "the two clusters share a KRaft cluster id"


def test_dockerfile_pins_agree_with_the_lock():
    args = dockerfile_args()
    assert args["AIRFLOW_VERSION"] == locked_version("apache-airflow")
    assert args["PYSPARK_VERSION"] == locked_version("pyspark")
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert f">={args['PYTHON_VERSION']}" in project["requires-python"]
    run_uv = re.search(r"^UV_VERSION=(\S+)$", (REPO / "run").read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert args["UV_VERSION"] == run_uv.group(1)
    text = (REPO / "Dockerfile").read_text(encoding="utf-8")
    # Exactly the lock, no dev group, the stack's extras (which pyproject.toml must declare).
    sync = re.search(r"uv sync (.*)", text).group(1).split()
    assert {"--frozen", "--no-dev"} <= set(sync), sync
    extras = {sync[i + 1] for i, word in enumerate(sync) if word == "--extra"}
    assert extras == {"postgres", "celery"} and extras <= set(project.get("optional-dependencies", {}))
    # The project itself is not in the image: the stack mounts it (the folder way; the wheel way is
    # tests/e2e/test_wheel_install.py's).
    assert "--no-install-project" in sync and "uv build" not in text and ".whl" not in text


def test_every_variable_has_a_default_documented_in_env_example():
    used: dict[str, str] = {}
    for name, operator, default in VARIABLE.findall(COMPOSE.read_text(encoding="utf-8")):
        assert operator == ":-", f"${{{name}}} has no ':-' default"
        assert used.setdefault(name, default) == default, f"{name} has two defaults"
    documented = dict(
        re.findall(r"^(\w+)=(.*)$", (REPO / ".env.example").read_text(encoding="utf-8"), flags=re.MULTILINE)
    )
    assert used == documented, "docker-compose.yaml's defaults and .env.example differ"
    secrets = {"POSTGRES_PASSWORD", "AIRFLOW_ADMIN_PASSWORD", "AIRFLOW_JWT_SECRET", "AIRFLOW_FERNET_KEY"}
    assert secrets <= set(used)


def test_dockerignore_keeps_local_state_and_secrets_out():
    ignored = set((REPO / ".dockerignore").read_text(encoding="utf-8").split())
    assert {".git", ".venv", ".cache", ".docker", ".kafka-local", ".env", "tests"} <= ignored
