#!/usr/bin/env bash
# PostgreSQL for the tests of the PostgreSQL state engine (state.url): the Debian server
# binaries only. The tests run their own throw-away server from a temp directory on
# 127.0.0.1 (tests/support/pg_fixtures.py), as the postgres user when run as root; nothing here
# starts a server. Idempotent: nothing to do when the binaries are there.
# setup: tests only
set -euo pipefail
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
else
  echo "missing for the PostgreSQL state tests: postgresql (install it)" >&2
  exit 1
fi
