"""Who may use the "Stream replication" page and its API, and what they see.

Airflow does not put a plugin's app behind its login, so the app asks Airflow's auth manager
itself, the way Airflow's own routes do:

- the page's data: an authenticated user (the UI's session cookie or a JWT bearer token) whom
  the auth manager allows the custom view ``Stream replication`` (the simple auth manager: every
  role, from viewer up). Otherwise 401 (not logged in) or 403.
- where the clusters are (their ``embedded:`` URLs, and file paths such as ``STREAMREP_HOME`` in
  error messages): only users who may read Airflow connections, since the URLs come from them
  (the simple auth manager: op and admin). Others see the topology with the URL left out and
  paths in errors replaced by ``(hidden)``.
- starting and stopping a cluster's gateways: only users whom the auth manager allows to trigger
  the ``stream_gateway_service`` DAG (the simple auth manager: user, op and admin, not viewer),
  since that DAG does the same. The change is made and recorded as that Airflow user, so the
  cluster's adminperm is theirs to hold. The buttons post with the UI's session cookie, which
  Airflow sets ``SameSite=Lax``: another site cannot make a browser post it.

With login off (``AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS=True``, as ``scripts/airflow-ui.sh``
runs Airflow) every visitor is Airflow's ``Anonymous`` admin; streamrep then acts as the user the
CLI acts as on the API server's machine (``STREAMREP_USER``, else the OS user, with their groups),
so the page and the REST form do what that user's own commands would.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from streamrep.client.config import KAFKA_SCHEME
from streamrep.client.identity import current_identity
from streamrep.model.ace import Identity

# -- who sees what ----------------------------------------------------------------------------
PAGE_RESOURCE = "Stream replication"  # the custom view an auth manager grants for the page
HIDDEN = "(hidden)"
# An absolute file path in a message (a stream path, /mapr/..., is not one).
_FILE_PATH = re.compile(r"(?<![\w/.])/(?!mapr/)[^\s'\",;:]+")
# A broker address librdkafka resolved (``ipv4#10.0.0.2:9092``), which no cluster URL names.
_RESOLVED_ADDRESS = re.compile(r"\bipv[46]#[^\s'\",;]+")


@dataclass(frozen=True)
class PageAccess:
    """What the caller of the page may see.

    :param user: the caller's name.
    :param sees_locations: whether cluster URLs and file paths are shown too.
    :param may_control: whether the caller may start and stop gateways (the page's buttons).
    :param groups: the caller's streamrep groups (only the CLI's identity has any: login off).
    """

    user: str
    sees_locations: bool
    may_control: bool = False
    groups: frozenset[str] = frozenset()

    @property
    def identity(self) -> Identity:
        """Whom streamrep's permission checks see, and whose name changes are recorded under."""
        return Identity(user=self.user, groups=self.groups)


SERVICE_DAG_ID = "stream_gateway_service"  # starting/stopping gateways is triggering this DAG's work


def allowed_to_control(manager: Any, user: Any) -> bool:
    """Whether the auth manager lets ``user`` trigger runs of the gateway service DAG."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    allowed: bool = manager.is_authorized_dag(
        method="POST", access_entity=DagAccessEntity.RUN, details=DagDetails(id=SERVICE_DAG_ID), user=user
    )
    return allowed


async def airflow_access(request: Request) -> PageAccess:
    """The caller as Airflow's auth manager knows them (401 if not logged in, 403 if the page is
    not theirs to see), authenticated the way Airflow's own routes are (``get_user``)."""
    # Imported here: the plugin is loaded by every Airflow process, only the API server serves it.
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user
    from fastapi import HTTPException, status

    user = await get_user(request, None, await bearer_scheme(request))
    manager = get_auth_manager()
    if not manager.is_authorized_custom_view(method="GET", resource_name=PAGE_RESOURCE, user=user):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "Forbidden")
    sees, controls = manager.is_authorized_connection(method="GET", user=user), allowed_to_control(manager, user)
    if login_off(manager):
        local = current_identity()
        return PageAccess(local.user, sees, controls, local.groups)
    return PageAccess(user.get_name(), sees, controls)


def login_off(manager: Any) -> bool:
    """Whether Airflow runs with login off: every visitor is the simple auth manager's ``Anonymous``
    admin, a name no streamrep ACE grants anything to."""
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
    from airflow.configuration import conf

    return isinstance(manager, SimpleAuthManager) and conf.getboolean(
        "core", "simple_auth_manager_all_admins", fallback=False
    )


async def airflow_control(request: Request) -> PageAccess:
    """``airflow_access``, and 403 unless the caller may start and stop gateways."""
    from fastapi import HTTPException, status

    caller = await airflow_access(request)
    if not caller.may_control:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"Forbidden: starting or stopping gateways needs the right to trigger the {SERVICE_DAG_ID} DAG",
        )
    return caller


def location_scrubber(urls: list[str], home: str) -> Callable[[Any], Any]:
    """What hides where the clusters are in a message: the cluster ``urls`` (and a Kafka cluster's
    bootstrap servers, one by one too), the registry folder ``home``, any other absolute file path,
    and the broker addresses Kafka's client resolved. Anything but a string passes unchanged."""
    found = {home}
    for url in urls:
        found.update({url, url.split(":", 1)[-1]})
        if url.startswith(KAFKA_SCHEME):  # Kafka's errors name the bootstrap servers, one by one too
            servers = url[len(KAFKA_SCHEME) :]
            found.update({servers, *servers.split(",")})
    secrets = sorted((s for s in found if s), key=len, reverse=True)

    def scrub(text: Any) -> Any:
        if not isinstance(text, str):
            return text
        for secret in secrets:
            text = text.replace(secret, HIDDEN)
        return _RESOLVED_ADDRESS.sub(HIDDEN, _FILE_PATH.sub(HIDDEN, text))

    return scrub


def hide_locations(cluster: dict[str, Any], scrub: Callable[[Any], Any]) -> dict[str, Any]:
    """One cluster's answer (``page_data.cluster_view``) without where the clusters are: no URL,
    no gateway's Spark master, and no location in any error (``location_scrubber``)."""
    return {
        **cluster,
        "url": None,
        "error": scrub(cluster["error"]),
        "streams": [{**s, "error": scrub(s["error"])} for s in cluster["streams"]],
        "gateways": [{**g, "master": None} for g in cluster["gateways"]],
        "links": [{**link, "errors": scrub(link.get("errors"))} for link in cluster["links"]],
    }
