#!/usr/bin/env bash
# Set up (the first run takes a minute) and chat with the agent in this terminal.
# The agent works on the git repo you run this from, or on a sample repo outside one.
# Needs model credentials: ANTHROPIC_API_KEY (plus ANTHROPIC_BASE_URL for another
# Anthropic-compatible endpoint) in the environment or in .env. Arguments go to
# `gateway-bot chat` (--new, --config FILE, --conversation NAME).
set -euo pipefail
here=$PWD
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/.tools"
echo "Setting up (the first run takes a few minutes; log: .tools/setup.log)…" >&2
if ! (cd "$root" && bash scripts/setup.sh >"$root/.tools/setup.log" 2>&1); then
  cat "$root/.tools/setup.log" >&2
  echo "set-up failed (log: .tools/setup.log)" >&2
  exit 1
fi
cd "$root" && source scripts/env.sh
if [ -f "$root/.env" ]; then set -a; source "$root/.env"; set +a; fi
cd "$here"
exec uv run --project "$root" --frozen gateway-bot chat "$@"
