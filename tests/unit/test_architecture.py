"""The layering rules hold: the core never imports a channel, channels never import each
other, the sandbox knows nothing of chat (contracts in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess

from tests.support.paths import PROJECT_ROOT

ROOT = PROJECT_ROOT


def test_import_contracts_are_kept() -> None:
    lint_imports = shutil.which("lint-imports")
    assert lint_imports is not None, "import-linter must be installed (dev dependency)"
    result = subprocess.run([lint_imports], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


MAX_MODULE_LINES = 420
"""A module past ~400 lines is asking to be split (AGENTS.md, Conventions)."""


def test_no_module_imports_itself_through_others() -> None:
    """No import cycle between modules, lazy (function-level) and TYPE_CHECKING imports
    included: a cycle is two modules that cannot be read, or moved, apart."""
    import grimp

    graph = grimp.build_graph("gateway_bot", include_external_packages=False)
    cycles = [sorted(c) for c in _strongly_connected(graph) if len(c) > 1]
    assert cycles == []


def test_no_module_is_past_the_size_limit() -> None:
    too_long = {
        str(path.relative_to(ROOT)): lines
        for path in (ROOT / "src").rglob("*.py")
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert too_long == {}


def _strongly_connected(graph: object) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the package has a few hundred modules)."""
    imports = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}  # type: ignore[attr-defined]
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(imports):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            targets = imports[node]
            if child < len(targets):
                work.append((node, child + 1))
                target = targets[child]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return components
