"""Where the project's files are, for tests at any depth of tests/."""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SRC = PROJECT_ROOT / "src"
EXAMPLES = PROJECT_ROOT / "examples"
CORPUS = PROJECT_ROOT / "tests" / "corpus"
