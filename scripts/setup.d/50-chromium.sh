#!/usr/bin/env bash
# The dashboard's browser tests (tests/browser/test_dashboard_browser.py): Debian's chromium, driven
# headless by the playwright dev dependency (`playwright install` cannot download browsers
# here; the tests point it at /usr/bin/chromium). Idempotent: nothing to do when it is there.
# setup: tests only
set -euo pipefail
command -v chromium >/dev/null && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
else
  echo "missing for the dashboard browser tests: chromium (install it)" >&2
  exit 1
fi
