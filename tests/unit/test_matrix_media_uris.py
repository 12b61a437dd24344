"""A sender's content URI never leaves the media download path (an attack test).

Before: ``mxc://../config`` passed the check (it has a "server" and a "media id"), and the
dot segment in the server part was resolved by the HTTP client, so the bot asked its
homeserver for ``/_matrix/client/v1/media/config`` with its own access token: one segment
of the attacker's choosing under the media API. Now a URI must have the spec's shape, and
nothing is requested otherwise.
"""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from nio import AsyncClient

from gateway_bot.channels.matrix.api import MatrixApi, MatrixError


@pytest.mark.parametrize(
    "uri",
    [
        "mxc://../config",
        "mxc://../../client/v3/account/whoami",
        "mxc://hs/../../config",
        "mxc://hs/a/b",
        "mxc://hs/a%2F..",
        "mxc://hs/a?x=1",
        "http://169.254.169.254/latest",
        "mxc://hs/",
    ],
)
async def test_a_content_uri_outside_the_spec_requests_nothing(uri: str) -> None:
    requested: list[str] = []

    async def anything(request: web.Request) -> web.Response:
        requested.append(request.raw_path)
        return web.Response(body=b"secret")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", anything)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    client = AsyncClient(f"http://127.0.0.1:{server.port}", "@bot:hs")
    client.access_token = "bot-token"
    received: list[bytes] = []

    async def write(chunk: bytes) -> None:
        received.append(chunk)

    try:
        with pytest.raises(MatrixError, match="not an mxc"):
            await MatrixApi(client).download(uri, write, 1000)
        ok = await MatrixApi(client).download("mxc://hs/AbC_12-x", write, 1000)
    finally:
        await client.close()
        await server.close()
    assert requested == ["/_matrix/client/v1/media/download/hs/AbC_12-x"]
    assert ok == len(b"secret")
