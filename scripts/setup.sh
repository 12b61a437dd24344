#!/usr/bin/env bash
# Installs everything gateway-bot and its tests need, idempotently: system packages (when
# root with apt), uv and the Python environment, the Claude Code CLI, and whatever each
# scripts/setup.d/NN-*.sh step adds (container images, test servers). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
for step in scripts/setup.d/*.sh; do
  echo "== setup: ${step##*/}" >&2
  bash "$step"
done
