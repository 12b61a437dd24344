"""Sending over SMTP (smtplib, blocking, in threads), split so the caller can record the
moment the message itself goes out.

``open_transaction`` dials, greets, secures, logs in and names sender and recipient;
``send_content`` issues DATA and hands over the whole message except its end-of-data line.
Nothing is delivered yet: a server keeps nothing of a transaction whose data never ended
(RFC 5321 4.1.1.4, 3.8), so a crash up to there is safe to repeat. ``finish`` writes the
end-of-data line; from that moment the server may have accepted the mail even if we never
hear its answer (RFC 1047's window), which is why the adapter records ``sending`` between
``send_content`` and ``finish``.
"""

from __future__ import annotations

import contextlib
import re
import smtplib
import ssl
from email.message import EmailMessage
from email.policy import SMTP

from gateway_bot.channels.email.oauth import TokenError, TokenSource, xoauth2
from gateway_bot.config.channels import EmailChannelSettings


class SmtpError(Exception):
    """An SMTP failure; ``transient`` (connection trouble, a 4xx answer) is retried by the
    core's policy, a 5xx refusal is not."""

    def __init__(self, message: str, *, transient: bool, uncertain: bool = False) -> None:
        super().__init__(message)
        self.transient = transient
        self.uncertain = uncertain
        """The connection broke after the end-of-data line went out: the server may have
        accepted the mail."""


class SmtpTransaction:
    def __init__(self, connection: smtplib.SMTP, recipient: str) -> None:
        self._connection = connection
        self.recipient = recipient

    def send_content(self, mail: EmailMessage) -> None:
        """DATA, then the message, dot-stuffed, without the end-of-data line. A failure here
        delivered nothing (the connection is closed; the caller may send again)."""
        try:
            self._connection.putcmd("data")
            code, answer = self._connection.getreply()
            if code != 354:
                raise SmtpError(_said(code, answer), transient=code < 500)
            content = _LINE_START_DOT.sub(b"..", mail.as_bytes(policy=SMTP))
            if not content.endswith(b"\r\n"):
                content += b"\r\n"
            self._connection.send(content)
        except SmtpError:
            self.close()
            raise
        except (OSError, smtplib.SMTPException) as exc:
            self.close()
            raise SmtpError(
                f"SMTP connection lost before the mail was complete: {exc}", transient=True
            ) from exc

    def finish(self) -> None:
        """The end-of-data line and the server's answer. Once the line is written the
        server may have the mail: a broken connection from here on is ``uncertain``."""
        try:
            self._connection.send(b".\r\n")
            code, answer = self._connection.getreply()
        except (OSError, smtplib.SMTPException) as exc:
            raise SmtpError(
                f"SMTP connection lost while sending: {exc}", transient=True, uncertain=True
            ) from exc
        finally:
            self.close()
        if code != 250:
            raise SmtpError(_said(code, answer), transient=code < 500)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._connection.quit()
        with contextlib.suppress(Exception):
            self._connection.close()


def open_transaction(
    settings: EmailChannelSettings, sender: str, recipient: str, tokens: TokenSource | None = None
) -> SmtpTransaction:
    context = ssl.create_default_context()
    try:
        if settings.smtp_tls == "tls":
            connection: smtplib.SMTP = smtplib.SMTP_SSL(
                settings.smtp_host, settings.smtp_port, timeout=60, context=context
            )
        else:
            connection = smtplib.SMTP(settings.smtp_host, settings.smtp_port, timeout=60)
    except OSError as exc:
        raise SmtpError(f"cannot reach the SMTP server: {exc}", transient=True) from exc
    try:
        connection.ehlo()
        if settings.smtp_tls == "starttls":
            connection.starttls(context=context)
            connection.ehlo()
        if tokens is not None:
            response = xoauth2(settings.smtp_user or settings.address, tokens.bearer())
            connection.auth("XOAUTH2", lambda challenge=None: "" if challenge else response)
        elif settings.smtp_user:
            connection.login(settings.smtp_user, settings.smtp_password or "")
        code, answer = connection.mail(sender)
        if code != 250:
            raise SmtpError(_said(code, answer), transient=code < 500)
        code, answer = connection.rcpt(recipient)
        if code not in (250, 251):
            raise SmtpError(_said(code, answer), transient=code < 500)
    except (SmtpError, TokenError):
        SmtpTransaction(connection, recipient).close()
        raise
    except smtplib.SMTPResponseException as exc:
        SmtpTransaction(connection, recipient).close()
        raise SmtpError(
            _said(exc.smtp_code, exc.smtp_error), transient=exc.smtp_code < 500
        ) from exc
    except (OSError, smtplib.SMTPException) as exc:
        SmtpTransaction(connection, recipient).close()
        raise SmtpError(f"SMTP failed: {exc}", transient=True) from exc
    return SmtpTransaction(connection, recipient)


_LINE_START_DOT = re.compile(rb"(?m)^\.")
"""A line of the message starting with a dot gets a second one (RFC 5321 4.5.2), so none
reads as the end of the data."""


def _said(code: int, answer: bytes | str) -> str:
    text = answer.decode(errors="replace") if isinstance(answer, bytes) else answer
    return f"the SMTP server answered {code} {text}"
