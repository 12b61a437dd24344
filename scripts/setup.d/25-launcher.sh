#!/usr/bin/env bash
# `gateway-bot` on PATH: a launcher in ~/.local/bin that runs this checkout's virtual
# environment from any directory, so the README's `gateway-bot ...` lines work in a new
# shell (Debian's and Ubuntu's ~/.profile put ~/.local/bin on PATH at login once it exists).
# A gateway-bot there that this script did not write is left alone, with a warning.
set -euo pipefail
venv=${UV_PROJECT_ENVIRONMENT:-$PWD/.venv}
case $venv in /*) ;; *) venv=$PWD/$venv ;; esac
target=$HOME/.local/bin/gateway-bot
marker="# gateway-bot launcher written by scripts/setup.sh"
quoted="'${venv//\'/\'\\\'\'}/bin/gateway-bot'"
launcher="#!/bin/sh
$marker of $PWD (run it again to update)
exec $quoted \"\$@\""
if [ -e "$target" ] && ! grep -qF "$marker" "$target"; then
  echo "warning: $target exists and was not written by set-up; left alone" >&2
  exit 0
fi
if [ "$(cat "$target" 2>/dev/null)" != "$launcher" ]; then
  mkdir -p "${target%/*}"
  printf '%s\n' "$launcher" >"$target.tmp"
  chmod 755 "$target.tmp"
  mv -f "$target.tmp" "$target"
fi
case ":$PATH:" in
  *":$HOME/.local/bin:"*) ;;
  *) echo "note: add ~/.local/bin to PATH to run gateway-bot from any shell" >&2 ;;
esac
