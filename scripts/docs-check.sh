#!/usr/bin/env bash
# Build the docs site strictly (mkdocs.yml): a broken link or anchor, or a page left out of
# the navigation, fails. The site goes to a temp dir, removed afterwards. Not --quiet: it
# hides the warnings that strict mode counts, and the build then passes.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
export NO_MKDOCS_2_WARNING=1   # Material's notice about its successor, printed every build
uv run --frozen mkdocs build --strict --site-dir "$site"
