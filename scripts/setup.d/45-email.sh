#!/usr/bin/env bash
# The email channel's test servers: Dovecot (IMAP, with LMTP to deliver test mail), run by
# the tests from a temp config on 127.0.0.1 (tests/support/email_fixtures.py). The SMTP side is
# aiosmtpd, a Python dev dependency. Idempotent: nothing to do when dovecot is there.
# setup: tests only
set -euo pipefail
command -v dovecot >/dev/null && [ -x /usr/lib/dovecot/lmtp ] && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dovecot-imapd dovecot-lmtpd >/dev/null
else
  echo "missing for the email tests: dovecot-imapd dovecot-lmtpd (install them)" >&2
  exit 1
fi
