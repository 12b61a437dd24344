"""Microsoft OAuth2 for the mailbox: msal's client-credentials flow against a local stand-in
for Microsoft's identity platform (HTTPS, found by authority URL), XOAUTH2 logins to a
Dovecot that checks each bearer token with that stand-in, and to an SMTP server that does
the same; tokens refreshed before they expire."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway_bot.channels.email.oauth import TokenError, TokenSource
from gateway_bot.config.channels import EmailChannelSettings
from tests.support.email_fixtures import ALICE, Dovecot, SmtpCatcher, email_config, mail, text_of
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_oauth import FakeOAuth

CLIENT_ID, SECRET = "client-1", "client-secret-1"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS"),
]


@pytest.fixture
def oauth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOAuth]:
    server = FakeOAuth(tmp_path)
    server.start()
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(server.cert_path))
    yield server
    server.stop()


def settings_for(oauth: FakeOAuth, mailbox: str, secret: str = SECRET) -> EmailChannelSettings:
    return EmailChannelSettings(
        address=mailbox,
        imap_host="127.0.0.1",
        smtp_host="127.0.0.1",
        trusted_authserv_id="mx.example.test",
        auth="oauth2",
        oauth2_authority=oauth.authority,
        oauth2_client_id=CLIENT_ID,
        oauth2_client_secret=secret,
    )


def test_a_token_is_reused_until_it_nears_expiry_then_refreshed_before_it_expires(
    oauth: FakeOAuth, mailbox: str
) -> None:
    oauth.grant(CLIENT_ID, SECRET, mailbox)
    tokens = TokenSource(settings_for(oauth, mailbox))

    oauth.expires_in = 3600
    first = tokens.bearer()
    assert tokens.bearer() == first, "a fresh token is reused"
    assert len(oauth.token_requests) == 1

    oauth.issued[-1].expires_at = 0  # make the next token short-lived instead:
    oauth.expires_in = 120  # within msal's five-minute refresh margin
    tokens = TokenSource(settings_for(oauth, mailbox))
    short = tokens.bearer()
    renewed = tokens.bearer()
    assert renewed != short, "a token about to expire is replaced before it does"
    assert oauth.valid(renewed) == mailbox
    assert oauth.token_requests[-1]["grant_type"] == "client_credentials"
    assert oauth.token_requests[-1]["client_id"] == CLIENT_ID


def test_a_refused_client_is_a_clear_error(oauth: FakeOAuth, mailbox: str) -> None:
    oauth.grant(CLIENT_ID, SECRET, mailbox)
    with pytest.raises(TokenError, match="unknown client"):
        TokenSource(settings_for(oauth, mailbox, secret="wrong")).bearer()


def test_mail_is_read_and_answered_with_xoauth2_tokens(
    gateway,
    tmp_path: Path,
    target_repo: Path,
    fake_api: FakeAnthropic,
    smtp_catcher: SmtpCatcher,
    mailbox: str,
    oauth: FakeOAuth,
) -> None:
    oauth.grant(CLIENT_ID, SECRET, mailbox)
    dovecot = Dovecot(introspection_url=oauth.introspection_url)
    dovecot.start()
    smtp_catcher.stop()
    smtp_catcher.check_token = oauth.valid
    smtp_catcher.start()
    daemons: list[Any] = []
    try:
        config = email_config(
            tmp_path,
            target_repo,
            fake_api,
            dovecot,
            smtp_catcher,
            mailbox,
            imap_password=None,
            auth="oauth2",
            oauth2_authority=oauth.authority,
            oauth2_client_id=CLIENT_ID,
            oauth2_client_secret=SECRET,
        )
        daemons.append(gateway("run", "--config", str(config)))
        dovecot.deliver(mailbox, mail("OAuth", "OAUTH-MAIL hello", to=mailbox))

        [reply] = smtp_catcher.wait_for(ALICE)
        assert "Echo: OAUTH-MAIL hello" in text_of(reply)
        assert [(user, ok) for user, _, ok in smtp_catcher.logins] == [(mailbox, True)]
        assert set(oauth.introspected) <= {issued.token for issued in oauth.issued}
        assert oauth.introspected, "Dovecot checked the IMAP login's token"
        assert f"user=<{mailbox}>, method=XOAUTH2" in dovecot.log()
    finally:
        for daemon in daemons:
            print(f"--- daemon stderr ---\n{daemon.stderr}")
        dovecot.close()
