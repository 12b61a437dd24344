#!/usr/bin/env bash
# The egress proxy's differential tests route every odd request target through the real proxy
# to real servers, one of them git's own `git http-backend` behind lighttpd from Debian
# (tests/support/egress_rig.py runs it from a temp config on the egress network's gateway).
# Idempotent: nothing to do when lighttpd is there.
# setup: tests only
set -euo pipefail
command -v lighttpd >/dev/null && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lighttpd >/dev/null
else
  echo "missing for the egress proxy tests: lighttpd (install it)" >&2
  exit 1
fi
