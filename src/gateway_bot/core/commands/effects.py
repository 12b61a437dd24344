"""The shared chat commands' effects: /stop, /status, /new, /model, /diff, /approve, /deny,
/revoke, /mail, /help.

Parsing lives in ``commands.py``; this module acts on the scheduler's running tasks, the
gate (``approvals.py``) and the store, and returns the text to answer with.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

from gateway_bot.config.repo import MODEL_NAME
from gateway_bot.core.actions.approvals import ActionApprovals
from gateway_bot.core.admission.gate import Gatekeeper
from gateway_bot.core.commands.mail import ConversationMailer
from gateway_bot.core.commands.parse import (
    HELP_TEXT,
    ArgumentError,
    Command,
    CommandName,
    command_words,
    free_text,
    leading_words,
)
from gateway_bot.core.commands.schedule import SCHEDULE_COMMANDS, ScheduleCommands
from gateway_bot.core.conversations.lanes import RunningTask
from gateway_bot.core.schedules.proposals import ScheduleProposals
from gateway_bot.core.status.answer import describe_model, describe_status
from gateway_bot.core.workspaces.reports import WorkspaceReports
from gateway_bot.domain.lifecycle import TaskState
from gateway_bot.domain.messages import InboundMessage, Reply
from gateway_bot.domain.records import ConversationRecord
from gateway_bot.state.store import Store

NewConversation = Callable[[str, str], Awaitable[ConversationRecord]]


class ChatCommands:
    def __init__(
        self,
        store: Store,
        gate: Gatekeeper,
        running: Mapping[str, RunningTask],
        new_conversation: NewConversation,
        workspaces: WorkspaceReports | None = None,
        schedules: ScheduleCommands | None = None,
        proposals: ScheduleProposals | None = None,
        mail: ConversationMailer | None = None,
        agent_names: Sequence[str] = (),
    ) -> None:
        """``agent_names``: the agent CLIs /agent may choose, the default first."""
        self._schedules = schedules
        self._proposals = proposals
        self._mail = mail
        self._agent_names = list(agent_names)
        self._store = store
        self._gate = gate
        self._running = running
        self._new_conversation = new_conversation
        self._workspaces = workspaces
        self.action_approvals: ActionApprovals | None = None
        """Set by the service when action approvals are on (decision 0087)."""

    async def reply(
        self,
        conversation: ConversationRecord,
        message: InboundMessage,
        command: Command,
        task_id: str,
    ) -> Reply:
        """The reply to ``command``: /diff may carry a file (in the task's sent/)."""
        if command.name is CommandName.DIFF:
            if self._workspaces is None:
                return Reply(text="/diff is not available here.")
            return await self._workspaces.diff(conversation.id, task_id)
        if command.name is CommandName.MAIL:
            if self._mail is None:
                return Reply(text="/mail is not available here.")
            return Reply(text=await self._mail.command(conversation, message, task_id))
        return Reply(text=await self.answer(conversation, message, command))

    async def answer(
        self, conversation: ConversationRecord, message: InboundMessage, command: Command
    ) -> str:
        """The text answering ``command``, sent in ``message``'s conversation."""
        try:
            return await self._answer(conversation, message, command)
        except ArgumentError as exc:
            return f"/{command.name.value}: {exc}"

    async def _answer(
        self, conversation: ConversationRecord, message: InboundMessage, command: Command
    ) -> str:
        if command.name is CommandName.STOP:
            text = self._request_stop(conversation.id)
        elif command.name is CommandName.STATUS:
            text = await self._status_text(conversation)
        elif command.name is CommandName.NEW:
            created = await self._new_conversation(message.channel, message.conversation_key)
            text = f"Started a new conversation ({created.id}). The next message starts afresh."
        elif command.name is CommandName.MODEL:
            text = await self._set_model(conversation, _one_name(command.argument))
        elif command.name is CommandName.AGENT:
            text = await self._set_agent(conversation, _one_name(command.argument))
        elif command.name in (CommandName.ALLOW, CommandName.ANSWER, CommandName.RULES) or (
            command.name in (CommandName.APPROVE, CommandName.DENY)
            and self.action_approvals is not None
            and await self.action_approvals.knows(_code_of(command.argument))
        ):
            text = await self._action_command(conversation, message, command)
        elif command.name in (CommandName.APPROVE, CommandName.DENY):
            choice = "allow" if command.name is CommandName.APPROVE else "deny"
            decider = (message.channel, message.sender_id, message.sender_name)
            # The code is the first word: "/deny CODE spammer" gives a reason these cards
            # do not keep, which used to make "CODE spammer" the code (no such approval).
            code = _code_of(command.argument)
            if not code:
                return f"Usage: /{command.name.value} CODE (the code on the card)."
            # Refused (only ever someone who is no owner or admin here), the answer is one
            # line whatever the code is: it must not tell whether a request has that code.
            if self._proposals is not None and await self._proposals.knows(code):
                decided = await self._proposals.decide(*decider, code, choice)
            else:
                decided = await self._gate.decide(*decider, code, choice)
            text = decided or not_yours(code)
        elif command.name in SCHEDULE_COMMANDS:
            if self._schedules is None:
                text = "Schedules are not available here."
            else:
                text = await self._schedules.answer(message, command)
        elif command.name is CommandName.REVOKE:
            text = await self._gate.revoke(
                message.channel, message.sender_id, message.room, command.argument
            )
        else:
            text = HELP_TEXT
        return text

    async def _action_command(
        self, conversation: ConversationRecord, message: InboundMessage, command: Command
    ) -> str:
        """/allow CODE [always], /deny CODE [REASON], /answer CODE TEXT, /rules."""
        approvals = self.action_approvals
        if approvals is None:
            return "Action approvals are not on here."
        if command.name is CommandName.RULES:
            rules = await approvals.always_rules(conversation.id)
            if not rules:
                return "This conversation has no rules of its own (Always adds one)."
            lines = [f"- {rule.signature} (by {rule.added_by})" for rule in rules]
            return "Allowed always in this conversation:\n" + "\n".join(lines)
        words, rest = leading_words(command.argument, 1)
        code, rest = (words[0] if words else ""), free_text(rest)
        if not code:
            return f"Usage: /{command.name.value} CODE …"
        if command.name is CommandName.ANSWER:
            if not rest:
                return "Usage: /answer CODE TEXT (your answer in words)."
            choice = "text"
        elif command.name is CommandName.DENY:
            choice = "deny"
        elif rest.lower() not in ("", "always"):
            # "/allow CODE always please" used to allow once, silently: an allow that is
            # not exactly what was asked for decides nothing.
            return f"Usage: /allow {code} (once) or /allow {code} always. Nothing was decided."
        else:
            choice = "always" if rest.lower() == "always" else "once"
        if not self._gate.may_decide(message.channel, message.sender_id) and not (
            await approvals.knows(code)
        ):
            return not_yours(code)  # as for a request they may not decide: no "no such code"
        decided = await approvals.decide(
            message.channel, message.sender_id, message.sender_name, code, choice, rest
        )
        return decided or not_yours(code)

    def _request_stop(self, conversation_id: str) -> str:
        running = self._running.get(conversation_id)
        if running is None:
            return "Nothing is running in this conversation."
        running.request_stop()
        return f"Stopping task {running.task_id}…"

    async def _status_text(self, conversation: ConversationRecord) -> str:
        waiting = await self._store.conversation_tasks(conversation.id, [TaskState.PENDING])
        running = self._running.get(conversation.id)
        text = describe_status(
            conversation,
            running.task_id if running else None,
            running.body if running else None,
            running.progress.steps if running and running.progress else (),
            time.monotonic() - running.started if running else 0.0,
            [
                t.parsed.body if t.parsed else ""
                for t in waiting
                if not running or t.id != running.task_id
            ],
        )
        if running is not None and running.waiting_for is not None:
            text += f"\nWaiting for approval: {running.waiting_for}"
        if running is not None and running.host_down is not None:
            text += (
                f"\nWaiting for the agent's host {running.host_down} (unreachable): it runs "
                "when the host is back; /stop drops it."
            )
        if self._workspaces is not None:
            text += f"\n{await self._workspaces.location(conversation.id)}"
        return text

    async def _set_agent(self, conversation: ConversationRecord, name: str) -> str:
        """Like /model: the agent CLI of the next new session (a session stays with the
        CLI that made it: another cannot resume it)."""
        offered = ", ".join(self._agent_names) or "none"
        if not name:
            current = (
                conversation.agent_backend
                if conversation.agent_session_id
                else conversation.next_agent
            )
            current = current or (self._agent_names[0] if self._agent_names else "the default")
            return f"Usage: /agent NAME (offered: {offered}). This conversation uses {current}."
        if name not in self._agent_names:
            return f"No agent {name!r} here. Offered: {offered}."
        await self._store.update_conversation(conversation.id, next_agent=name)
        if conversation.agent_session_id is None:
            return f"Agent set to {name}."
        return f"Agent {name} will be used from the next new session (/new)."

    async def _set_model(self, conversation: ConversationRecord, name: str) -> str:
        if not name:
            return f"Usage: /model NAME. This conversation uses {describe_model(conversation)}."
        if (problem := model_name_problem(name)) is not None:
            return problem
        await self._store.update_conversation(conversation.id, next_model=name)
        if conversation.agent_session_id is None:
            return f"Model set to {name}."
        return f"Model {name} will be used from the next new session (/new)."


def not_yours(code: str) -> str:
    """The answer to a decision someone may not make, the same whether or not ``code``
    exists: an owner's or admin's answers (no such code, already decided) stay theirs."""
    return (
        f"Nothing was decided: there is no request {code} that you may decide. (Owners and "
        "admins decide approvals; the person the agent was answering, its own requests.)"
    )


def _code_of(argument: str) -> str:
    """The code a decision names: its first word (quotes read; a reason may follow)."""
    words, _ = leading_words(argument, 1)
    return words[0] if words else ""


def _one_name(argument: str) -> str:
    """The name /model or /agent is given, without quotes; several words stay as typed
    (no model or agent is called that: the answer says so)."""
    words = command_words(argument)
    return words[0] if len(words) == 1 else argument


_MODEL_NAME = re.compile(MODEL_NAME)


def model_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a model name, or None. It becomes the agent CLI's ``--model``
    argument: a leading ``-`` would read as another option of the CLI, and spaces, quotes or
    a very long text are no model's name."""
    if _MODEL_NAME.fullmatch(name):
        return None
    return (
        "Not a model name: use letters, digits and . _ - : / @ [ ] (at most 128, starting "
        "with a letter or digit), e.g. /model claude-sonnet-4-5."
    )
