#!/usr/bin/env bash
# The Claude Code CLI, pinned, into .tools/ (scripts/env.sh puts it on PATH).
set -euo pipefail
version=2.1.197
bin=.tools/node_modules/.bin/claude
if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "^$version "; then
  exit 0
fi
npm install --prefix .tools --no-audit --no-fund --loglevel=error \
  "@anthropic-ai/claude-code@$version" >/dev/null
"$bin" --version >/dev/null
