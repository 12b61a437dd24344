#!/usr/bin/env bash
# Set up, then lint, type-check and run every test (real CLI, real servers).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
uv run --frozen ruff check src tests bench
uv run --frozen ruff format --check src tests bench
uv run --frozen mypy
uv run --frozen lint-imports
uv run --frozen pytest "$@"
