"""A stand-in for Microsoft's identity platform, on 127.0.0.1: what msal's client-credentials
flow calls (OpenID discovery and the token endpoint, over HTTPS with a certificate made
here, trusted through REQUESTS_CA_BUNDLE), and a plain-HTTP introspection endpoint that
Dovecot's oauth2 passdb and the test SMTP server ask whether a bearer token is valid.

Tokens are opaque (``tok-N``); each is valid for the mailbox its client was granted, until
``expires_in`` seconds after it was issued.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.smtp_catcher import free_port

TENANT = "test-tenant"


@dataclass
class Issued:
    token: str
    mailbox: str
    expires_at: float


def _certificate(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "oauth-cert.pem", directory / "oauth-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


class FakeOAuth:
    def __init__(self, directory: Path) -> None:
        self.cert_path, self._key_path = _certificate(directory)
        self.https_port = free_port()
        self.http_port = free_port()
        self.clients: dict[tuple[str, str], str] = {}
        """(client id, secret) -> the mailbox its tokens open."""
        self.expires_in = 3600
        self.issued: list[Issued] = []
        self.token_requests: list[dict[str, str]] = []
        self.introspected: list[str] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()

    @property
    def authority(self) -> str:
        return f"https://127.0.0.1:{self.https_port}/{TENANT}"

    @property
    def introspection_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/introspect"

    def grant(self, client_id: str, secret: str, mailbox: str) -> None:
        self.clients[(client_id, secret)] = mailbox

    def valid(self, token: str) -> str | None:
        """The mailbox a live token opens, or None."""
        for issued in self.issued:
            if issued.token == token and issued.expires_at > time.time():
                return issued.mailbox
        return None

    # -- server ---------------------------------------------------------------------------

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True).start()
        if not self._ready.wait(30):
            raise RuntimeError("the fake OAuth server did not start")

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self._serve())
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_get(f"/{TENANT}/v2.0/.well-known/openid-configuration", self._discovery)
        app.router.add_post(f"/{TENANT}/oauth2/v2.0/token", self._token)
        app.router.add_post("/introspect", self._introspect)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(self.cert_path, self._key_path)
        await web.TCPSite(self._runner, "127.0.0.1", self.https_port, ssl_context=tls).start()
        await web.TCPSite(self._runner, "127.0.0.1", self.http_port).start()

    def stop(self) -> None:
        loop = self._loop
        if loop is None or self._runner is None:
            return
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)

    async def _discovery(self, request: web.Request) -> web.Response:
        base = f"https://127.0.0.1:{self.https_port}/{TENANT}"
        return web.json_response(
            {
                "issuer": f"{base}/v2.0",
                "authorization_endpoint": f"{base}/oauth2/v2.0/authorize",
                "token_endpoint": f"{base}/oauth2/v2.0/token",
            }
        )

    async def _token(self, request: web.Request) -> web.Response:
        form: Any = await request.post()
        fields = {key: str(value) for key, value in form.items()}
        self.token_requests.append(fields)
        mailbox = self.clients.get((fields.get("client_id", ""), fields.get("client_secret", "")))
        if fields.get("grant_type") != "client_credentials" or mailbox is None:
            return web.json_response(
                {"error": "invalid_client", "error_description": "unknown client"}, status=401
            )
        issued = Issued(f"tok-{len(self.issued) + 1}", mailbox, time.time() + self.expires_in)
        self.issued.append(issued)
        return web.json_response(
            {"token_type": "Bearer", "expires_in": self.expires_in, "access_token": issued.token}
        )

    async def _introspect(self, request: web.Request) -> web.Response:
        form: Any = await request.post()
        token = str(form.get("token") or "")
        self.introspected.append(token)
        mailbox = self.valid(token)
        if mailbox is None:
            return web.json_response({"active": False})
        return web.json_response({"active": True, "email": mailbox})
