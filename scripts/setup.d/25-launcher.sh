#!/usr/bin/env bash
# `gateway-bot` on PATH: a launcher that runs this checkout's virtual environment from any
# directory, so the README's `gateway-bot ...` lines work in a new shell. It goes where this
# user's login shell looks: ~/.local/bin (Debian's and Ubuntu's ~/.profile for a user put it
# on PATH at login once it exists), else, for root, whose login shell on Debian never adds
# ~/.local/bin, /usr/local/bin. When this shell cannot find it yet, a `note:` says the one
# line to run (scripts/chat.sh shows set-up's notes on screen).
# A gateway-bot there that this script did not write is left alone, with a warning.
# Why: docs/decisions/0125-launcher-where-the-login-shell-looks.md.
set -euo pipefail
venv=${UV_PROJECT_ENVIRONMENT:-$PWD/.venv}
case $venv in /*) ;; *) venv=$PWD/$venv ;; esac
marker="# gateway-bot launcher written by scripts/setup.sh"
quoted="'${venv//\'/\'\\\'\'}/bin/gateway-bot'"
launcher="#!/bin/sh
$marker of $PWD (run it again to update)
exec $quoted \"\$@\""

mkdir -p "$HOME/.local/bin"
# The PATH a new login shell of this user gets (its profile may print: the last line counts).
login_path=$(env -i HOME="$HOME" USER="$(id -un)" LOGNAME="$(id -un)" TERM=dumb \
  "${SHELL:-/bin/sh}" -lc 'printf "\n%s\n" "$PATH"' </dev/null 2>/dev/null | tail -n 1) || true
on_login_path() { case ":$login_path:" in *":$1:"*) return 0 ;; *) return 1 ;; esac; }
dir=$HOME/.local/bin
if ! on_login_path "$dir" && [ "$(id -u)" -eq 0 ] && on_login_path /usr/local/bin; then
  dir=/usr/local/bin
fi
target=$dir/gateway-bot

if [ -e "$target" ] && ! grep -qF "$marker" "$target"; then
  echo "warning: $target exists and was not written by set-up; left alone" >&2
  exit 0
fi
if [ "$(cat "$target" 2>/dev/null)" != "$launcher" ]; then
  printf '%s\n' "$launcher" >"$target.tmp"
  chmod 755 "$target.tmp"
  mv -f "$target.tmp" "$target"
fi
case ":$PATH:" in
  *":$dir:"*) ;;
  *)
    if on_login_path "$dir"; then
      echo "note: gateway-bot is in $dir, on PATH in a new login shell; in this one run: export PATH=\"$dir:\$PATH\"" >&2
    else
      echo "note: gateway-bot is in $dir, which your shell does not search; run (and add to ~/.profile): export PATH=\"$dir:\$PATH\"" >&2
    fi
    ;;
esac
