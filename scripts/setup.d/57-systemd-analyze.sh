#!/usr/bin/env bash
# `systemd-analyze verify`, which the install-service tests run on every unit they write
# (tests/integration/cli/test_install_service.py): Debian's systemd package. No user manager
# needs to run. Idempotent: nothing to do when it is there.
# setup: tests only
set -euo pipefail
command -v systemd-analyze >/dev/null && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >/dev/null
else
  echo "missing for the install-service tests: systemd-analyze (install systemd)" >&2
  exit 1
fi
