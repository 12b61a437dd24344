#!/usr/bin/env bash
# Set up (the first run takes a few minutes) and chat with the agent in this terminal.
# The agent works on the git repo you run this from, or on a sample repo outside one.
# Needs model credentials: ANTHROPIC_API_KEY (plus ANTHROPIC_BASE_URL for another
# Anthropic-compatible endpoint) in the environment or in .env at the project root (the
# environment wins). Arguments go to `gateway-bot chat` (--new, --config FILE,
# --conversation NAME).
set -euo pipefail
here=$PWD
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/.tools"
if [ "$(cat "$root/.tools/setup-done" 2>/dev/null)" = "$(bash "$root/scripts/setup.sh" --fingerprint)" ]; then
  echo "Checking the set-up (log: .tools/setup.log)…" >&2
elif [ -f "$root/.tools/setup-done" ]; then
  echo "Setting up what changed since the last run (log: .tools/setup.log)…" >&2
else
  echo "Setting up (the first run takes a few minutes; log: .tools/setup.log)…" >&2
fi
if ! (cd "$root" && GATEWAY_BOT_SETUP=run bash scripts/setup.sh >"$root/.tools/setup.log" 2>&1); then
  cat "$root/.tools/setup.log" >&2
  echo "set-up failed (log: .tools/setup.log)" >&2
  exit 1
fi
# What set-up asks the person to do (a PATH line for the launcher) goes on screen.
grep '^note: ' "$root/.tools/setup.log" >&2 || true
cd "$root" && source scripts/env.sh
if [ -f "$root/.env" ]; then
  # .env fills in what the environment lacks; exported variables win, as in the config
  # loader. .env is read in a subshell; only names not set here are taken from it.
  while IFS= read -r -d '' pair; do
    name=${pair%%=*}
    [[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || continue
    [ -n "${!name+set}" ] || export "$pair"
  done < <(set -a && source "$root/.env" >/dev/null && env -0)
fi
cd "$here"
exec uv run --project "$root" --frozen gateway-bot chat "$@"
