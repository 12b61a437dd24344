"""Real mail servers for the email channel's tests: Dovecot (IMAP, with LMTP to deliver the
users' mail) from a temp config on 127.0.0.1, one per session, and an aiosmtpd server that
catches what the bot sends (``tests/support/smtp_catcher.py``), plus the mail the tests write.

Dovecot runs from ``dovecot -c CONF -F`` and reads nothing under /etc. Its passdb is
static (any user, password ``secret``), so each test takes a fresh mailbox
(``bot-<hex>@example.test``) without touching the server. Its unix sockets live under
its base dir, which must stay short (about 55 characters in all), so the server works in
``/tmp/dvXXXXXX`` rather than pytest's deep temp dir, and removes it when it stops.
"""

from __future__ import annotations

import contextlib
import email
import email.policy
import os
import re
import shutil
import signal
import smtplib
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from email.message import EmailMessage
from email.utils import make_msgid
from pathlib import Path
from typing import Any

import pytest
from imapclient import IMAPClient

from tests.conftest import write_config
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.smtp_catcher import SmtpCatcher, free_port

PASSWORD = "secret"
DOMAIN = "example.test"
TRUSTED_ID = "mx.example.test"
"""The authserv-id the tests' "MX" writes into Authentication-Results."""


def _passdb(base: Path, introspection_url: str | None) -> str:
    """Any user with PASSWORD, or (OAuth2) a bearer token the introspection URL vouches for
    as that user's (the token's ``email``)."""
    if introspection_url is None:
        return f"""auth_mechanisms = plain login
passdb {{
  driver = static
  args = password={PASSWORD} nopenalty
}}"""
    (base / "oauth2.conf.ext").write_text(
        f"introspection_url = {introspection_url}\nintrospection_mode = post\n"
        "force_introspection = yes\nusername_attribute = email\n"
        "active_attribute = active\nactive_value = true\n"
    )
    return f"""auth_mechanisms = xoauth2 oauthbearer
passdb {{
  driver = oauth2
  mechanisms = xoauth2 oauthbearer
  args = {base}/oauth2.conf.ext
}}"""


def _config(base: Path, imap_port: int, lmtp_port: int, passdb: str) -> str:
    root = os.geteuid() == 0
    users = "default_login_user = dovenull\ndefault_internal_user = dovecot\n" if root else ""
    uid = "uid=dovecot gid=dovecot " if root else ""
    return f"""
base_dir = {base}/run
state_dir = {base}/state
log_path = {base}/dovecot.log
info_log_path = {base}/dovecot.log
listen = 127.0.0.1
protocols = imap lmtp
ssl = no
disable_plaintext_auth = no
auth_failure_delay = 0
first_valid_uid = 1
first_valid_gid = 1
recipient_delimiter = +
lmtp_save_to_detail_mailbox = no
mail_location = maildir:{base}/mail/%u
{users}
{passdb}
userdb {{
  driver = static
  args = {uid}home={base}/home/%u allow_all_users=yes
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {imap_port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service lmtp {{
  inet_listener lmtp {{
    address = 127.0.0.1
    port = {lmtp_port}
  }}
}}
protocol imap {{
  mail_max_userip_connections = 100
}}
"""


class Dovecot:
    """One Dovecot master process; ``restart`` stops every process of it (an outage)."""

    def __init__(self, introspection_url: str | None = None) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="dv", dir="/tmp"))
        self.base.chmod(0o755)
        for name in ("mail", "home"):
            (self.base / name).mkdir()
            if os.geteuid() == 0:
                shutil.chown(self.base / name, "dovecot", "dovecot")
        self.imap_port = free_port()
        self.lmtp_port = free_port()
        self.conf = self.base / "dovecot.conf"
        passdb = _passdb(self.base, introspection_url)
        self.conf.write_text(_config(self.base, self.imap_port, self.lmtp_port, passdb))
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["dovecot", "-c", str(self.conf), "-F"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"dovecot exited: {self.log()}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.imap_port), timeout=2) as conn,
            ):
                if conn.recv(100).startswith(b"* OK"):
                    return
            time.sleep(0.05)
        raise RuntimeError(f"dovecot did not start: {self.log()}")

    def stop(self) -> None:
        """Stop the master and every process of its group: clients lose their connections
        at once, as in a real outage (the master alone leaves IMAP processes serving)."""
        if self.process is None:
            return
        group = self.process.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
        self.process.wait(30)
        self.process = None
        # Its children die too, but on a busy machine not by the time the master is reaped:
        # one still holding the LMTP port or a socket makes the next start fail ("Socket
        # already exists"). Wait until the group is empty.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.killpg(group, 0)
            except ProcessLookupError:
                return
            time.sleep(0.02)
        raise RuntimeError(f"dovecot's processes outlived SIGKILL for 30 s (group {group})")

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)

    def log(self) -> str:
        path = self.base / "dovecot.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # -- what a test does with mailboxes ---------------------------------------------

    def deliver(self, recipient: str, message: bytes | EmailMessage) -> None:
        """Deliver over LMTP, as the MX would."""
        data = (
            message.as_bytes(policy=email.policy.SMTP)
            if isinstance(message, EmailMessage)
            else message
        )
        data = data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
        with smtplib.LMTP("127.0.0.1", self.lmtp_port) as lmtp:
            lmtp.sendmail("mx@example.test", [recipient], data)

    @contextlib.contextmanager
    def imap(self, user: str) -> Iterator[IMAPClient]:
        client = IMAPClient("127.0.0.1", port=self.imap_port, ssl=False, timeout=30)
        try:
            client.login(user, PASSWORD)
            yield client
        finally:
            with contextlib.suppress(Exception):
                client.logout()

    def folder_uids(self, user: str, folder: str = "INBOX") -> list[int]:
        with self.imap(user) as client:
            if not client.folder_exists(folder):
                return []
            client.select_folder(folder, readonly=True)
            return sorted(client.search("ALL"))


# -- mail as the tests write it -------------------------------------------------------

ALICE = f"alice@{DOMAIN}"
OUR_ID = re.compile(r"^<gwb\.([0-9a-f]{8})\.\d+@example\.test>$")


def passed(domain: str = DOMAIN) -> str:
    return f"{TRUSTED_ID}; spf=pass smtp.mailfrom={domain}; dmarc=pass header.from={domain}"


def mail(
    subject: str,
    body: str,
    *,
    sender: str = ALICE,
    to: str = "",
    auth: list[str] | None = None,
    in_reply_to: str = "",
    references: str = "",
    html: str = "",
) -> EmailMessage:
    message = EmailMessage()
    for value in auth if auth is not None else [passed(sender.rpartition("@")[2])]:
        message["Authentication-Results"] = value
    message["From"] = sender
    message["To"] = to
    message["Subject"] = subject
    message["Message-ID"] = make_msgid(domain=DOMAIN)
    if in_reply_to:
        message["In-Reply-To"] = in_reply_to
    if references:
        message["References"] = references
    message.set_content(body)
    if html:
        message.add_alternative(html, subtype="html")
    return message


def email_config(
    tmp_path: Path,
    repo: Path,
    api: FakeAnthropic,
    dovecot: Dovecot,
    smtp: SmtpCatcher,
    address: str,
    *,
    extra_channels: dict[str, Any] | None = None,
    access: dict[str, Any] | None = None,
    sections: dict[str, Any] | None = None,
    **email: Any,
) -> Path:
    """A daemon config with the email channel on ``address`` (and no console);
    ``sections``: other top-level keys (``agent``, ``execution``...)."""
    settings = {
        "address": address,
        "imap_host": "127.0.0.1",
        "imap_port": dovecot.imap_port,
        "imap_tls": "none",
        "imap_password": PASSWORD,
        "smtp_host": "127.0.0.1",
        "smtp_port": smtp.port,
        "smtp_tls": "none",
        "trusted_authserv_id": TRUSTED_ID,
        "allowed_senders": [ALICE],
        "reconnect_delays_seconds": [0.2, 0.5],
        **email,
    }
    channels = {"console": None, "email": settings, **(extra_channels or {})}
    extra = {"access": access} if access else {}
    return write_config(tmp_path, repo, api, channels=channels, **extra, **(sections or {}))


def text_of(message: EmailMessage) -> str:
    part = message.get_body(preferencelist=("plain",))
    assert part is not None
    return str(part.get_content())


@pytest.fixture(scope="session")
def dovecot() -> Iterator[Dovecot]:
    server = Dovecot()
    server.start()
    yield server
    server.close()


@pytest.fixture
def mailbox() -> str:
    """A fresh mailbox for the bot (any user logs in with PASSWORD)."""
    return f"bot-{uuid.uuid4().hex[:8]}@{DOMAIN}"


@pytest.fixture
def smtp_catcher() -> Iterator[SmtpCatcher]:
    catcher = SmtpCatcher()
    catcher.start()
    yield catcher
    catcher.stop()
