#!/usr/bin/env bash
# The optional agent CLIs beside Claude Code, pinned, into .tools/ (agent.backend /
# agent.enabled pick them): Gemini CLI (a node bundle, ~96 MB) and Codex CLI (a static
# musl binary in a platform package, ~400 MB with its optional voice libraries).
# Versions are read from the installed package.json files: `gemini --version` alone
# takes seconds (node loads the whole bundle, then lingers).
# Skipped by scripts/chat.sh's set-up (the default agent is Claude Code: a newcomer's first
# chat need not fetch ~500 MB); `bash scripts/setup.sh` installs them for agent.enabled.
# setup: tests only
set -euo pipefail
gemini_version=0.61.0
codex_version=0.169.0
modules=.tools/node_modules
installed() {
  node -p "require('./$modules/$1/package.json').version" 2>/dev/null || true
}
if [ -x "$modules/.bin/gemini" ] && [ -x "$modules/.bin/codex" ] \
  && [ "$(installed @google/gemini-cli)" = "$gemini_version" ] \
  && [ "$(installed @openai/codex)" = "$codex_version" ]; then
  exit 0
fi
npm install --prefix .tools --no-audit --no-fund --loglevel=error \
  "@google/gemini-cli@$gemini_version" "@openai/codex@$codex_version" >/dev/null
"$modules/.bin/codex" --version >/dev/null
[ "$(installed @google/gemini-cli)" = "$gemini_version" ]
