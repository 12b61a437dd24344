#!/usr/bin/env bash
# axe-core, pinned, into .tools/: the dashboard's browser tests (tests/browser/
# test_dashboard_look.py) inject its axe.min.js into every page and fail on a serious or
# critical accessibility violation. A single file with no dependencies (~0.5 MB).
# setup: tests only
set -euo pipefail
version=4.14.1
modules=.tools/node_modules
installed() {
  node -p "require('./$modules/axe-core/package.json').version" 2>/dev/null || true
}
if [ -f "$modules/axe-core/axe.min.js" ] && [ "$(installed)" = "$version" ]; then
  exit 0
fi
npm install --prefix .tools --no-audit --no-fund --loglevel=error "axe-core@$version" >/dev/null
[ "$(installed)" = "$version" ]
