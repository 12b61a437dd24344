#!/usr/bin/env bash
# Installs everything gateway-bot and its tests need, idempotently: system packages (when
# root with apt), uv and the Python environment, the Claude Code CLI, and whatever each
# scripts/setup.d/NN-*.sh step adds (container images, test servers). Safe to run again.
# With GATEWAY_BOT_SETUP=run (scripts/chat.sh sets it) the steps only the tests need (a
# `# setup: tests only` line in the step) are skipped: a newcomer's first chat installs
# no mail server or browser.
# When every step has passed, .tools/setup-done holds the fingerprint of what set-up is
# made of (`--fingerprint` prints it): scripts/chat.sh says "the first run takes a few
# minutes" only when set-up has not yet passed as it is now.
set -euo pipefail
cd "$(dirname "$0")/.."
fingerprint() {
  for file in scripts/setup.sh scripts/setup.d/*.sh uv.lock; do
    [ -f "$file" ] && printf '%s\n' "$file" && cat "$file"
  done | sha256sum | cut -d' ' -f1
}
if [ "${1:-}" = --fingerprint ]; then
  fingerprint
  exit 0
fi
for step in scripts/setup.d/*.sh; do
  if [ "${GATEWAY_BOT_SETUP:-all}" = run ] && grep -q '^# setup: tests only' "$step"; then
    continue
  fi
  echo "== setup: ${step##*/}" >&2
  bash "$step"
done
mkdir -p .tools
fingerprint >.tools/setup-done
