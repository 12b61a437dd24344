#!/usr/bin/env bash
# uv and the project's virtual environment (Python 3.11+, locked dependencies).
set -euo pipefail
if ! command -v uv >/dev/null; then
  python3 -m pip install --quiet --user uv 2>/dev/null || python3 -m pip install --quiet uv
fi
export PATH="$HOME/.local/bin:$PATH"
uv sync --quiet --frozen
