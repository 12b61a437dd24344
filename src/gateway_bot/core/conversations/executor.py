"""Runs one task: workspace, repo config, attachments, prompt, agent, reply.

Returns the reply and its completion reason instead of sending anything, so the scheduler
can store the reply before it is delivered (a crash then re-sends, never re-runs).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from gateway_bot.agents.base import AgentEvent, AgentOutcome, AgentRequest, OnEvent
from gateway_bot.agents.enabled import AgentSet
from gateway_bot.agents.event_log import EventLog
from gateway_bot.agents.stall_watch import Stalled, StallWatch
from gateway_bot.config.action_rules import ActionApprovalSettings
from gateway_bot.config.repo import REPO_CONFIG_PATH, RepoConfig, parse_repo_config
from gateway_bot.config.server import ExecutionSettings
from gateway_bot.config.yaml_tags import ConfigError
from gateway_bot.core.actions.approvals import AskAction
from gateway_bot.core.actions.budget import budget_request, spent_and_last
from gateway_bot.core.actions.policy import merge_repo_policy
from gateway_bot.core.actions.tool_permissions import ConversationToolPermissions
from gateway_bot.core.channel import AttachmentDownloads
from gateway_bot.core.conversations.prompts import build_prompt, context_lost_prompt
from gateway_bot.core.fault_points import reached
from gateway_bot.core.schedules.request_file import RequestFile, take_request_file
from gateway_bot.core.workspaces.directories import GitError, Workspaces
from gateway_bot.core.workspaces.disk_quota import MB, DiskLimit
from gateway_bot.core.workspaces.inbox_files import InboxWriter, candidate_names
from gateway_bot.domain.lifecycle import CompletionReason
from gateway_bot.domain.messages import InboundMessage, Reply, Usage
from gateway_bot.domain.records import ConversationRecord
from gateway_bot.sandbox.base import REPO_CONTAINERFILE_PATH, Sandbox, SandboxPreparationFailed
from gateway_bot.sandbox.context_files import ContextFiles, WorkspaceSetupFailed
from gateway_bot.sandbox.disk_usage import DiskUsage, combined, measure
from gateway_bot.sandbox.egress.allowlist import ALLOWLIST_PATH, parse_allowlist
from gateway_bot.state.store import Store

log = logging.getLogger(__name__)

PREPARE_ATTEMPTS = 3
PREPARE_WAIT_S = 1.0
"""A sandbox that failed to get ready in a way nobody foresaw (``SandboxPreparationFailed``:
nothing of the task ran) is tried again after 1 s, then 2 s, before the failure is shown: a
container another task stopped or changed a moment earlier is found as it is now."""


@dataclass(frozen=True)
class AgentDefaults:
    """What applies to every agent CLI (each CLI's own default model is in ``AgentSet``)."""

    timeout_s: float
    env: Mapping[str, str]
    timezone: str
    secrets: Mapping[str, str]
    stall_s: float = 600.0
    """A run silent this long is stopped as stuck (``agents/stall_watch.py``)."""


@dataclass(frozen=True)
class TaskResult:
    reply: Reply
    reason: CompletionReason
    schedule_request: RequestFile | None = None
    """What the agent left in ``outbox/schedule.json`` (read and removed before the outbox
    files are taken): a schedule to propose, or why it cannot be."""


class TaskExecutor:
    def __init__(
        self,
        store: Store,
        workspaces: Workspaces,
        sandbox: Sandbox,
        agents: AgentSet,
        defaults: AgentDefaults,
        limits: ExecutionSettings | None = None,
    ) -> None:
        """``agents``: the agent CLIs on offer. The chosen one's backend says which model
        API the allowlist opens and which credentials the sandbox's egress proxy holds,
        read from ``defaults.env`` at each task (the daemon may point that env at a relay
        after start-up); its runner runs the CLI."""
        self._store = store
        self._workspaces = workspaces
        self._sandbox = sandbox
        self._agents = agents
        self._defaults = defaults
        self._limits = limits or ExecutionSettings()
        self.action_settings: ActionApprovalSettings | None = None
        self.ask_action: AskAction | None = None
        self.budget_usd: float | None = None
        """``agent.budget_usd``: ask (through ``ask_action``) before a turn past it."""
        """Action approvals (decision 0087): set by the daemon once the service that cards the
        conversations exists; with both, the agent's tool calls are asked of the daemon."""

    async def execute(
        self,
        task_id: str,
        conversation: ConversationRecord,
        message: InboundMessage,
        adapter: AttachmentDownloads,
        on_event: OnEvent,
    ) -> TaskResult:
        started = time.monotonic()
        try:
            await self._workspaces.refresh_mirror()
            context = self._workspaces.execution_context(conversation.id)
            files = self._sandbox.files(context)
            disk_bytes = int(self._limits.conversation_disk_limit_mb * MB)
            # The workspace's clone and the repo's three files (a git process or two each)
            # at once, not one after another (issue 33: a new conversation's first turn and
            # each task of a restart waited on them in turn). A read that failed meanwhile
            # (a mirror the clone repaired) is read again once the clone is done.
            prepared, *read = await asyncio.gather(
                self._workspaces.prepare(conversation.id, files, disk_bytes),
                self._read_repo_files(),
                return_exceptions=True,
            )
            if isinstance(prepared, BaseException):
                raise prepared
            dirs = prepared
            repo_files = read[0]
            if isinstance(repo_files, BaseException):
                repo_files = await self._read_repo_files()
            repo_text, allowlist_text, containerfile = repo_files
            repo_config = parse_repo_config(repo_text)
            agent_name, conversation = await self._choose_agent(conversation, repo_config)
            agent = self._agents.agents[agent_name]
            agent_env = self._agents.env_for(agent_name, self._defaults.env)
            container_env = repo_config.resolved_env(self._defaults.secrets)
            allowlist = parse_allowlist(allowlist_text, agent.backend.model_api_rules(agent_env))
        except ConfigError as exc:
            return _failure(
                f"The repo config {exc.source} has problems:\n"
                + "\n".join(f"- {p}" for p in exc.problems),
                CompletionReason.INTERNAL_ERROR,
            )
        except (GitError, WorkspaceSetupFailed) as exc:
            return _failure(
                f"Could not prepare the workspace: {exc}", CompletionReason.INTERNAL_ERROR
            )

        async def measure_usage() -> DiskUsage:
            sent = await asyncio.to_thread(measure, {"sent": dirs.sent})  # the daemon's own
            return combined(await files.measure(), sent)

        disk = DiskLimit(
            measure_usage,
            int(self._limits.conversation_disk_limit_mb * MB),
            self._limits.disk_check_interval_seconds,
        )
        if (usage := await disk.over_limit()) is not None:
            return _failure(disk.explain(usage, stopped=False), CompletionReason.REJECTED)
        context = replace(
            context,
            env=dict(container_env),
            allowlist=allowlist,
            containerfile=containerfile,
            # The model credentials stay out of a filtering sandbox: the proxy adds them.
            credentials=agent.backend.injected_credentials(agent_env),
        )
        saved = (
            await adapter.save_attachments(message, InboxWriter(dirs.root, files=files))
            if message.attachments
            else []
        )
        prompt = build_prompt(message, self._sandbox.paths(context), saved, self._defaults.timezone)
        model = (
            conversation.model
            if conversation.agent_session_id
            else (message.model_hint or conversation.next_model or repo_config.model or agent.model)
        )
        timeout_s = repo_config.timeout_seconds or self._defaults.timeout_s
        event_log = EventLog(dirs.events, int(self._limits.events_log_limit_mb * MB))

        if (refused := await self._within_budget(conversation.id, task_id)) is not None:
            return refused
        request = AgentRequest(prompt, conversation.agent_session_id, model, timeout_s, agent_env)
        policy = self._approvals_policy(repo_config)

        async def on_agent_event(event: AgentEvent) -> None:
            reached("agent_running")
            await on_event(event)

        async def run_agent(request: AgentRequest) -> AgentOutcome | Stalled | DiskUsage:
            for attempt in range(1, PREPARE_ATTEMPTS + 1):
                try:
                    return await run_once(request)
                except SandboxPreparationFailed as exc:
                    if attempt == PREPARE_ATTEMPTS:
                        raise
                    log.warning(
                        "task %s: %s; trying again (%d of %d)",
                        task_id, exc, attempt + 1, PREPARE_ATTEMPTS,
                    )  # fmt: skip
                    await asyncio.sleep(PREPARE_WAIT_S * attempt)
            raise AssertionError("unreachable")

        async def run_once(request: AgentRequest) -> AgentOutcome | Stalled | DiskUsage:
            watch = StallWatch(self._defaults.stall_s)
            if policy is not None and self.ask_action is not None:
                permissions = ConversationToolPermissions(
                    policy,
                    self.ask_action,
                    conversation.id,
                    task_id,
                    self._sandbox.paths(context).workspace,
                    hold=watch.hold,
                    release=watch.release,
                )
                request = replace(request, permissions=permissions)
            run = agent.runner.run(
                request, self._sandbox, context, event_log, watch.wrap(on_agent_event)
            )
            return await disk.run_within(watch.run_within(run))

        reached("sandbox_starting")
        outcome = await run_agent(request)
        if isinstance(outcome, AgentOutcome) and outcome.unresumable:
            log.warning(
                "conversation %s: session %s cannot be resumed, starting a fresh one",
                conversation.id,
                conversation.agent_session_id,
            )
            await self._store.update_conversation(conversation.id, clear_session=True)
            retry_prompt = context_lost_prompt(prompt, conversation.last_reply)
            request = AgentRequest(retry_prompt, None, model, timeout_s, agent_env)
            outcome = await run_agent(request)
        if isinstance(outcome, Stalled):
            log.warning(
                "conversation %s: the agent was silent for %.0f s and was stopped (last step: %s)",
                conversation.id, outcome.silent_s, outcome.last_step,
            )  # fmt: skip
            reply = Reply(text=outcome.explain(), is_error=True, stopped=True)
            return TaskResult(reply, CompletionReason.TIMEOUT)
        if isinstance(outcome, DiskUsage):
            text = disk.explain(outcome, stopped=True)
            return TaskResult(
                Reply(text=text, is_error=True, stopped=True), CompletionReason.CANCELLED
            )
        return await self._conclude(
            task_id, conversation, model, agent_name, outcome, started, files
        )

    async def _read_repo_files(self) -> tuple[str | None, str | None, str | None]:
        """The repo's config, allowlist and Containerfile on its default branch, at once."""
        read = self._workspaces.read_default_branch_file
        config, allowlist, containerfile = await asyncio.gather(
            read(REPO_CONFIG_PATH), read(ALLOWLIST_PATH), read(REPO_CONTAINERFILE_PATH)
        )
        return config, allowlist, containerfile

    async def _within_budget(self, conversation_id: str, task_id: str) -> TaskResult | None:
        """None to run the turn; a refusal when a person said no to going past the
        conversation's budget (or nobody answered)."""
        if self.budget_usd is None or self.ask_action is None:
            return None
        tasks = await self._store.list_tasks(conversation_id=conversation_id, limit=10_000)
        spent, last = spent_and_last(tasks)
        question = budget_request(conversation_id, task_id, self.budget_usd, spent, last)
        if question is None:
            return None
        decision = await self.ask_action(question)
        if decision.allowed:
            return None
        return _failure(
            f"Not run: this conversation has spent ${spent:.4f} of its "
            f"${self.budget_usd:.2f} budget and going past it was not allowed "
            f"({decision.reason}).",
            CompletionReason.REJECTED,
        )

    def _approvals_policy(self, repo_config: RepoConfig) -> ActionApprovalSettings | None:
        """The server's policy made stricter by the repo's (read from the default branch,
        never the workspace); None when action approvals are off."""
        if self.action_settings is None:
            return None
        return merge_repo_policy(self.action_settings, repo_config.approvals)

    async def _choose_agent(
        self, conversation: ConversationRecord, repo_config: RepoConfig
    ) -> tuple[str, ConversationRecord]:
        """The agent CLI for this task: a session keeps its own; a new session takes
        /agent's choice, else the repo's, else the server's default. A repo naming one the
        server does not offer is a repo config problem (the file is the repo's, not the
        operator's). A session whose agent is no longer offered is dropped (a fresh session
        with the default, the history lost) rather than handed to another CLI."""
        if conversation.agent_session_id:
            stored = conversation.agent_backend or self._agents.default
            if self._agents.get(stored) is not None:
                return stored, conversation
            log.warning(
                "conversation %s: its session's agent %s is no longer enabled; starting afresh",
                conversation.id,
                stored,
            )
            conversation = await self._store.update_conversation(
                conversation.id, clear_session=True
            )
        if self._agents.get(conversation.next_agent) is not None:
            assert conversation.next_agent is not None
            return conversation.next_agent, conversation
        if repo_config.agent is not None:
            if self._agents.get(repo_config.agent) is None:
                offered = ", ".join(self._agents.names())
                raise ConfigError(
                    REPO_CONFIG_PATH,
                    [f"agent: {repo_config.agent!r} is not offered here (offered: {offered})"],
                )
            return repo_config.agent, conversation
        return self._agents.default, conversation

    async def _conclude(
        self,
        task_id: str,
        conversation: ConversationRecord,
        model: str | None,
        agent_name: str,
        outcome: AgentOutcome,
        started: float,
        files: ContextFiles,
    ) -> TaskResult:
        result = outcome.result
        usage = Usage(
            cost_usd=result.cost_usd if result else 0.0,
            num_turns=result.num_turns if result else 0,
            duration_s=time.monotonic() - started,
            input_tokens=result.input_tokens if result else 0,
            output_tokens=result.output_tokens if result else 0,
        )
        if outcome.session_id and not outcome.timed_out:
            await self._store.update_conversation(
                conversation.id,
                agent_session_id=outcome.session_id,
                model=model,
                agent_backend=agent_name,
            )
        if not outcome.succeeded or result is None:
            reason = (
                CompletionReason.TIMEOUT if outcome.timed_out else CompletionReason.EXECUTION_FAILED
            )
            reply = Reply(
                text=outcome.error_text(), usage=usage, is_error=True, stopped=outcome.timed_out
            )
            return TaskResult(reply, reason)
        text = result.text.strip() or "(The agent finished without a reply.)"
        limit = self._limits.reply_limit_chars
        await self._store.update_conversation(conversation.id, last_reply=text[:limit])
        schedule_request = await take_request_file(files)
        taken = await self._workspaces.take_outbox(conversation.id, task_id, files)
        sent_files = tuple(str(p) for p in taken)
        if len(text) > limit:
            sent = self._workspaces.dirs(conversation.id).sent / task_id
            whole = await asyncio.to_thread(_write_reply_file, sent, text)
            text = _shortened(text, limit, whole.name)
            sent_files = (*sent_files, str(whole))
        reply = Reply(text=text, files=sent_files, usage=usage)
        return TaskResult(reply, CompletionReason.SUCCESS, schedule_request)


def _failure(text: str, reason: CompletionReason) -> TaskResult:
    return TaskResult(Reply(text=text, is_error=True), reason)


_REPLY_START_CHARS = 3000
"""How much of an over-long reply is sent as text, ahead of the file with all of it."""


def _shortened(text: str, limit: int, file_name: str) -> str:
    """The start of a reply too long to post (channels must never post megabytes), cut at a
    line end where one is near, and a note that the whole reply is attached."""
    keep = min(_REPLY_START_CHARS, limit)
    start = text[:keep]
    if (line_end := start.rfind("\n")) > keep // 2:
        start = start[:line_end]
    return (
        f"{start.rstrip()}\n\n[The reply has {len(text):,} characters, more than the "
        f"{limit:,} sent as a message: all of it is attached as {file_name}.]"
    )


def _write_reply_file(directory: Path, text: str) -> Path:
    """Write ``text`` to a new reply.md (reply-2.md... when the agent sent one) in the task's
    sent/ directory, beside its outbox files, never through a link."""
    directory.mkdir(parents=True, exist_ok=True)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for name in candidate_names("reply.md")[:99]:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                fd = os.open(name, flags, 0o644, dir_fd=dir_fd)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            return directory / name
    finally:
        os.close(dir_fd)
    raise FileExistsError(f"no free reply file name in {directory}")
