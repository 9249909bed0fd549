"""maprcli's REST form, served by the Airflow API server: ``GET|POST /streamrep/rest/<command words
joined by />?<option>=<value>&...`` runs the CLI's own command (``COMMANDS``) with the options the
query string (and a POST's form) gives, named as the CLI names them without the dash, and answers
with the envelope ``-json`` prints (``cli/output.py``)::

    curl -H "Authorization: Bearer $JWT" \\
        "http://airflow:8080/streamrep/rest/stream/replica/list?path=/mapr/sanfrancisco/activity"

It lives with the CLI because it *is* the CLI over HTTP (the ``airflow`` layer may not import the
``cli`` one), and is a plugin of its own (``RestPlugin``): a root middleware of the API server
answers ``/streamrep/rest/...`` before the page's app mounted at ``/streamrep`` would.

Who: the logged-in Airflow user (a JWT bearer token or the UI's session cookie, through Airflow's
auth manager as the page authenticates) acts as the streamrep user of the same name, in no group.
With login off (``scripts/airflow-ui.sh``), the caller acts as the user the CLI acts as on the API
server's machine (``STREAMREP_USER``, else the OS user; ``page_access.login_off``).
A named identity, so a cluster whose settings authenticate another principal (SASL) refuses it,
as the CLI does with ``STREAMREP_USER``. Airflow rights: a reading command (last word ``list``,
``info``, ``get`` or ``lag``) needs the page's (the custom view ``Stream replication``); any other
needs what the page's gateway buttons need (triggering the ``stream_gateway_service`` DAG). The
streams' and clusters' ACEs are then checked as for the CLI. As on the page, where the clusters are
(URLs, file paths) is hidden from callers who may not read Airflow connections.

A command that changes anything must be a POST (a GET is 405): a link on another site is followed
with the UI's session cookie, a cross-site POST never is.

Answers: 200 and ``status: OK``; else the ERROR envelope with 401 (no login), 403 (Airflow or an
ACE refuses), 405 (a change sent as a GET), 404 (unknown command, or a stream or cluster not
found), 400 (bad options, a refused command and other user errors), 503 (a cluster cannot be
reached), 500 (the server's own files or disk fail).
"""

from __future__ import annotations

import io
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from airflow.plugins_manager import AirflowPlugin
from starlette.requests import Request

from streamrep.airflow.hook import StreamrepHook
from streamrep.airflow.page_access import PageAccess, airflow_access, location_scrubber
from streamrep.cli.common import Context, Rows, reason
from streamrep.cli.grammar import Command
from streamrep.cli.main import find_command, one_line
from streamrep.cli.output import envelope, error_envelope
from streamrep.client import StreamAdmin
from streamrep.errors import InvalidArgument, StreamrepError, http_status
from streamrep.model.ace import Identity

if TYPE_CHECKING:  # imported where the app is made: the CLI runs without FastAPI loaded
    from fastapi import FastAPI

PREFIX = "/streamrep/rest"
READ_VERBS = frozenset({"list", "info", "get", "lag"})
# Commands that run until stopped or for minutes, read stdin or stream messages, or change the API
# server's own cluster registry: the REST form refuses them, one line each.
REFUSED: dict[tuple[str, ...], str] = {
    ("copystream",): "it runs a Spark job for as long as the copy takes; trigger a DAG that copies instead",
    ("diffstreams",): "it writes its ops directories on the API server's disk; run it with the CLI",
    ("diffstreamswithcrc",): "it writes its ops directories on the API server's disk; run it with the CLI",
    ("importstream",): "it reads an ops directory on the API server's disk; run it with the CLI",
    ("gateway", "run"): "a gateway runs until stopped; use 'gateway start' or the stream_gateway_service DAG",
    ("stream", "replica", "failover"): "it waits for the replica to catch up; trigger the stream_replica_failover DAG",
    ("stream", "replica", "failback"): "it waits for the replica to catch up; trigger the stream_replica_failback DAG",
    ("produce",): "messages go through a Kafka or streamrep producer, not the admin API",
    ("consume",): "messages go through a Kafka or streamrep consumer, not the admin API",
    ("cluster", "add"): "the cluster registry is the API server's configuration (Airflow connections)",
    ("cluster", "remove"): "the cluster registry is the API server's configuration (Airflow connections)",
    ("cluster", "default"): "the cluster registry is the API server's configuration (Airflow connections)",
    ("cluster", "list"): "cluster locations are the API server's configuration; the Stream replication page lists them",
}


class RestError(Exception):
    """An answer other than OK: the HTTP status and the one line of the ERROR envelope."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def reads(cmd: Command) -> bool:
    return cmd.words[-1] in READ_VERBS


def command_of(words: list[str]) -> Command:
    """The CLI's command named by the URL's words (404 if none, 400 if refused over REST)."""
    try:
        cmd = find_command(words)
    except InvalidArgument as error:
        raise RestError(404, str(error)) from None
    why = REFUSED.get(cmd.words)
    if why is not None:
        raise RestError(400, f"'{' '.join(cmd.words)}' is not served over REST: {why}")
    return cmd


def argv_of(params: list[tuple[str, str]]) -> list[str]:
    """The CLI's option tokens for the request's parameters: ``name=value`` is ``-name value``, a
    bare ``name`` (no value) a bare ``-name`` (true, for a true/false option). ``json`` is implied."""
    argv: list[str] = []
    for name, value in params:
        if name.lower() == "json":
            continue
        argv += [f"-{name}", value] if value != "" else [f"-{name}"]
    return argv


def refusal(error: StreamrepError) -> RestError:
    return RestError(http_status(error), str(error))


def execute(cmd: Command, options: list[str], hook: StreamrepHook, identity: Identity) -> Rows:
    """Parse ``options`` with the command's grammar and run its handler as ``identity``, on the
    clusters ``hook`` resolves."""
    try:
        values, _ = cmd.parse(options)
    except InvalidArgument as error:
        raise RestError(400, str(error)) from None
    try:
        hook.discover_clusters()  # a connection that defines no cluster is refused here
        admin = StreamAdmin(hook.clusters, identity)
        rows = cmd.handler(Context(io.StringIO(), io.StringIO(), io.StringIO(), admin), **values)
    except StreamrepError as error:
        raise refusal(error) from None
    except OSError as error:  # the server's environment (a file, a disk), as the CLI says it
        where = f": {error.filename}" if error.filename else ""
        raise RestError(500, f"{reason(error)}{where}") from None
    return rows or []


def hidden(hook: StreamrepHook) -> Callable[[Any], Any]:
    """What hides the clusters' locations from a caller who may not read Airflow connections, as
    the page hides them (``page_access.location_scrubber``)."""
    try:
        urls = [info.url for info in hook.clusters.list()]
    except StreamrepError:  # a registry that cannot be read: file paths are hidden all the same
        urls = []
    return location_scrubber(urls, hook.clusters.home)


def answer(status: int, body: dict[str, Any]) -> Any:
    from fastapi.responses import JSONResponse

    return JSONResponse(body, status_code=status)


def create_rest_app(
    hook_factory: Callable[[], StreamrepHook] = StreamrepHook,
    access: Callable[[Request], Awaitable[PageAccess]] = airflow_access,
) -> FastAPI:
    """The FastAPI app of the REST form, its routes under ``PREFIX``.

    :param hook_factory: makes the hook that resolves the clusters (as the page's).
    :param access: authenticates the caller through Airflow's auth manager (as the page's).
    """
    from fastapi import FastAPI, HTTPException
    from starlette.concurrency import run_in_threadpool

    app = FastAPI(title="streamrep: maprcli's REST form", docs_url=None, redoc_url=None, openapi_url=None)

    def run_as(caller: PageAccess, cmd: Command, options: list[str]) -> Rows:
        hook = hook_factory()
        try:
            try:
                rows = execute(cmd, options, hook, caller.identity)
            except RestError as error:
                if caller.sees_locations:
                    raise
                raise RestError(error.status, hidden(hook)(str(error))) from None
            if caller.sees_locations:
                return rows
            scrub = hidden(hook)
            return [{key: scrub(value) for key, value in row.items()} for row in rows]
        finally:
            hook.close()

    @app.api_route(PREFIX + "/{words:path}", methods=["GET", "POST"])
    async def rest(words: str, request: Request) -> Any:
        try:
            try:
                caller = await access(request)
            except HTTPException as refused:
                raise RestError(refused.status_code, str(refused.detail)) from None
            cmd = command_of([w for w in words.split("/") if w])
            if not reads(cmd) and request.method != "POST":
                # A link on another site is followed with the UI's session cookie (SameSite=Lax sends
                # it on a top-level GET, never on a cross-site POST): a change must be a POST.
                raise RestError(405, f"'{' '.join(cmd.words)}' changes streams or clusters: send it as a POST")
            if not reads(cmd) and not caller.may_control:
                raise RestError(
                    403,
                    f"'{' '.join(cmd.words)}' changes streams or clusters: it needs the right to trigger "
                    "the stream_gateway_service DAG",
                )
            params = list(request.query_params.multi_items())
            if request.method == "POST":
                params += [(k, v) for k, v in (await request.form()).multi_items() if isinstance(v, str)]
            rows = await run_in_threadpool(run_as, caller, cmd, argv_of(params))
        except RestError as error:
            return answer(error.status, error_envelope(one_line(str(error))))
        return answer(200, envelope(rows))

    return app


class RestRoutes:
    """Root middleware of the API server: ``PREFIX/...`` goes to the REST app, all else on."""

    def __init__(self, app: Any, rest_app: Any = None):
        self.app = app
        self.rest_app = rest_app if rest_app is not None else create_rest_app()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        target = self.rest_app if path.startswith(PREFIX + "/") else self.app
        await target(scope, receive, send)


class RestPlugin(AirflowPlugin):
    """Serves maprcli's REST form under ``/streamrep/rest``."""

    name = "streamrep_rest"
    fastapi_root_middlewares = [{"middleware": RestRoutes, "args": [], "kwargs": {}, "name": "streamrep REST form"}]
