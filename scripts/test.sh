#!/usr/bin/env bash
# Set up, then lint, type-check and run every test (real CLI, real servers).
#
# With arguments, one session runs exactly what they name.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
uv run --frozen ruff check src tests bench
uv run --frozen ruff format --check src tests bench
uv run --frozen mypy
uv run --frozen lint-imports
bash scripts/docs-check.sh  # the docs site, strictly: a broken link or anchor fails
if [ "$#" -gt 0 ]; then
  exec uv run --frozen pytest "$@"
fi
# Without arguments: the whole suite in parallel pytest-xdist workers (each a session of its
# own: its temp dir, podman service socket, Synapse, Dovecot and fake APIs; every fixture
# picks free ports and names its podman objects per process). Most of a test's time is spent
# waiting on servers and containers, so more workers than cores pays. Whole files go to one
# worker (module fixtures stay shared); tests/conftest.py orders the files so those marked
# `slow` start first, then by tier (faults, integration, security, ...), none left for the end.
workers=$(( $(nproc) + 1 ))
if [ "$workers" -lt 3 ]; then workers=3; fi
if [ "$workers" -gt 6 ]; then workers=6; fi
# A run cut short (or a container storage a test mounted) can leave a mount in the temp dir:
# pytest cannot remove a mount point and stops before the first test. Unmount what is left,
# deepest first, and if the directory still cannot go, take a new one.
basetemp=/tmp/gateway-bot-tests
if [ -e "$basetemp" ]; then
  awk -v base="$basetemp/" 'index($5, base) == 1 { print $5 }' /proc/self/mountinfo \
    | sort -r | while read -r mounted; do umount -l "$mounted" || true; done
  rm -rf "$basetemp" 2>/dev/null || basetemp=$(mktemp -d /tmp/gateway-bot-tests.XXXXXX)
fi
exec uv run --frozen pytest -n "${GATEWAY_BOT_TEST_WORKERS:-$workers}" --dist loadfile \
  --basetemp="$basetemp" tests
