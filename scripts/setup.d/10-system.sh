#!/usr/bin/env bash
# System packages: git for workspaces, node/npm to install the Claude Code CLI, and
# python3 with venv (Debian's python3-venv) when 20-python.sh has to install uv itself.
set -euo pipefail
need=()
command -v git >/dev/null || need+=(git)
command -v npm >/dev/null || need+=(nodejs npm)
command -v setpriv >/dev/null || need+=(util-linux)
if ! command -v uv >/dev/null && ! [ -x .tools/uv/bin/uv ]; then
  command -v python3 >/dev/null || need+=(python3)
  python3 -c 'import ensurepip' 2>/dev/null || need+=(python3-venv)
fi
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
else
  echo "missing system packages: ${need[*]} (install them, then run this again)" >&2
  exit 1
fi
