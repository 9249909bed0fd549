"""The connection form's Test button for streamrep connections, as Airflow's UI sends it.

The connections list's Test button posts the stored connection with ``port: Number(port)``, which
is ``0`` for a connection without a port, and a streamrep connection has none (the form hides the
field). Airflow 3.3.2's ``POST /api/v2/connections/test`` compares that 0 with the stored NULL,
takes it for another destination and answers 400 ("The host or port to test differs from the
stored connection") before any hook runs; Airflow 3.2.2 does not compare. Upstream fixed it after
3.3.2 (apache/airflow#73298, 0 counts as blank), so this middleware does the same for streamrep's
connections only: nothing of a streamrep cluster addresses a port.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from streamrep.airflow.provider import CONN_TYPE

if TYPE_CHECKING:  # Airflow's API server brings Starlette; only its ASGI types are named here
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

TEST_PATH = re.compile(r"/api/v2/connections/test/?$")  # under any [api] base_url


class PortlessConnectionTest:
    """ASGI middleware of the API server: a connection test of a streamrep connection whose body
    says ``"port": 0`` reaches Airflow without that port. Other requests pass as they are."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or not TEST_PATH.search(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = without_port_zero(b"".join(chunks))
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
        scope = {**scope, "headers": [*headers, (b"content-length", str(len(body)).encode())]}
        await self.app(scope, replay, send)


def without_port_zero(body: bytes) -> bytes:
    """A connection-test body without ``"port": 0`` if it tests a streamrep connection."""
    try:
        data = json.loads(body)
    except ValueError:
        return body
    if not isinstance(data, dict) or data.get("conn_type") != CONN_TYPE or data.get("port") != 0:
        return body
    del data["port"]
    return json.dumps(data).encode()


MIDDLEWARE = {"middleware": PortlessConnectionTest, "args": [], "kwargs": {}, "name": "streamrep connection test"}
