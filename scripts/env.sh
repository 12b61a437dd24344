# Sourced by the scripts: puts the project's tools (uv, the pinned Claude Code CLI) on PATH.
export PATH="$PWD/.tools/node_modules/.bin:$PWD/.tools/uv/bin:$HOME/.local/bin:$PATH"
