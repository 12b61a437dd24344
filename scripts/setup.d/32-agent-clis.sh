#!/usr/bin/env bash
# The optional agent CLIs beside Claude Code, pinned, into .tools/ (agent.backend /
# agent.enabled pick them): Gemini CLI (a node bundle, ~96 MB) and Codex CLI (a static
# musl binary in a platform package, ~400 MB with its optional voice libraries).
set -euo pipefail
gemini_version=0.61.0
codex_version=0.169.0
bin=.tools/node_modules/.bin
if [ -x "$bin/gemini" ] && [ -x "$bin/codex" ] \
  && "$bin/gemini" --version 2>/dev/null | grep -qx "$gemini_version" \
  && "$bin/codex" --version 2>/dev/null | grep -q " $codex_version$"; then
  exit 0
fi
npm install --prefix .tools --no-audit --no-fund --loglevel=error \
  "@google/gemini-cli@$gemini_version" "@openai/codex@$codex_version" >/dev/null
"$bin/gemini" --version >/dev/null
"$bin/codex" --version >/dev/null
