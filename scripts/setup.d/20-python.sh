#!/usr/bin/env bash
# uv and the project's virtual environment (Python 3.11+, locked dependencies).
# uv is the one on PATH, or else installed from PyPI into its own venv, .tools/uv, made by
# the python3 on PATH: distribution Pythons (Debian 12, Ubuntu 24.04) refuse
# `pip install --user` (PEP 668), a venv of their own is always allowed (Debian needs
# python3-venv, which 10-system.sh installs). That uv is linked into ~/.local/bin (unless
# one is there) so the README's `uv run ...` lines work in a new shell.
set -euo pipefail
uv=$(command -v uv || true)
if [ -z "$uv" ]; then
  uv=$PWD/.tools/uv/bin/uv
  if ! "$uv" --version >/dev/null 2>&1; then
    rm -rf .tools/uv
    python3 -m venv .tools/uv
    .tools/uv/bin/python -m pip install --quiet --disable-pip-version-check uv
  fi
  mkdir -p "$HOME/.local/bin"
  if [ ! -e "$HOME/.local/bin/uv" ]; then
    ln -sfn "$uv" "$HOME/.local/bin/uv"
  fi
fi
"$uv" sync --quiet --frozen
