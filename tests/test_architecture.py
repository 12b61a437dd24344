"""The layering rules hold: the core never imports a channel, channels never import each
other, the sandbox knows nothing of chat (contracts in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_contracts_are_kept() -> None:
    lint_imports = shutil.which("lint-imports")
    assert lint_imports is not None, "import-linter must be installed (dev dependency)"
    result = subprocess.run([lint_imports], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
