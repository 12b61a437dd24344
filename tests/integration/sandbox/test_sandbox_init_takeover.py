"""Written as the attack: the agent, root in its container with init's own capabilities,
takes over the container's PID 1 (ptrace it, or write its memory through /proc/1/mem) to
run a program of its own as init, which every sweep spares and which then outlives every
task, /stop and restart. Init (``sandbox/podman/init.c``) is not dumpable: both are
refused, and a container made with another init is recreated."""

from __future__ import annotations

import platform

import pytest

from gateway_bot.sandbox.podman import containers
from tests.integration.sandbox.test_sandbox_stdin import make_context
from tests.integration.state.test_sandbox_known_state import _run, _sandbox, _within_deadline
from tests.support.sandbox_fixtures import SandboxSetup, podman

TAKE_OVER_INIT = r"""perl -e '
  my $attached = syscall(101, 16, 1, 0, 0);  # ptrace(PTRACE_ATTACH, 1), x86_64 numbers
  print "ptrace: ", ($attached == -1 ? "refused" : "attached"), "\n";
  print "mem: ", (open(my $mem, "+<", "/proc/1/mem") ? "opened" : "refused"), "\n";
'"""


@pytest.mark.skipif(platform.machine() != "x86_64", reason="ptrace's x86_64 syscall number")
def test_the_agent_cannot_trace_or_write_its_containers_init(sandbox: SandboxSetup) -> None:
    context = make_context(sandbox.tmp_path / "contexts", "init-takeover")
    podman_sandbox = _sandbox(sandbox)

    async def steps() -> None:
        try:
            said = await _run(podman_sandbox, context, TAKE_OVER_INIT)
            assert said == "ptrace: refused\nmem: refused\n", said
            # For contrast, the same calls on a process of the agent's own: they work.
            own = TAKE_OVER_INIT.replace("16, 1,", "16, $ENV{P} + 0,").replace(
                "/proc/1/", "/proc/$ENV{P}/"
            )
            said = await _run(podman_sandbox, context, f"sleep 30 & export P=$!; {own}; kill $P")
            assert said == "ptrace: attached\nmem: opened\n", said
        finally:
            await podman_sandbox.close()

    _within_deadline(steps)


def test_a_container_made_with_another_init_is_recreated(
    sandbox: SandboxSetup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container an older gateway-bot made (catatonit's ``-P`` as init's argument: that
    init was dumpable) is not taken over as it is, at a start-up or by a task."""
    context = make_context(sandbox.tmp_path / "contexts", "old-init")
    name = containers.container_name(context.id)
    with monkeypatch.context() as older:
        older.setattr(containers, "INIT_COMMAND", [containers.INIT_IN_CONTAINER, "-P"])
        before = _sandbox(sandbox)

        async def made_by_the_older_one() -> None:
            try:
                assert await _run(before, context, "echo old") == "old\n"
            finally:
                await before.close()

        _within_deadline(made_by_the_older_one)
    old_id = podman("inspect", "--format", "{{.Id}}", name).stdout.strip()
    after = _sandbox(sandbox)

    async def steps() -> None:
        await after.open(lambda context_id: _yes())
        try:
            assert after._contexts[context.id].known is None, "not learned at start-up"
            assert await _run(after, context, TAKE_OVER_INIT) == "ptrace: refused\nmem: refused\n"
        finally:
            await after.close()

    _within_deadline(steps)
    assert podman("inspect", "--format", "{{.Id}}", name).stdout.strip() != old_id


async def _yes() -> bool:
    return True
