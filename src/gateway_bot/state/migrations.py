"""The core's versioned schema: each entry moves owner "core" one version up.

Append only. Never edit a migration that has shipped; add the next one. Versions are kept
per owner in ``schema_versions`` (``state/database.py``); databases made before that kept
the core's version in ``PRAGMA user_version``, which the store adopts once at open.
New migrations stay portable where that is cheap (decision 0085: what a PostgreSQL backend
translates): DOUBLE PRECISION rather than REAL, ON CONFLICT rather than INSERT OR ....
"""

from __future__ import annotations

OWNER = "core"

MIGRATIONS: tuple[str, ...] = (
    # 1: conversations, tasks, inbound de-duplication.
    """
    CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        channel TEXT NOT NULL,
        channel_key TEXT NOT NULL,
        model TEXT,
        agent_session_id TEXT,
        last_reply TEXT,
        next_model TEXT,
        active INTEGER NOT NULL DEFAULT 1,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE UNIQUE INDEX conversations_active_key
        ON conversations(channel, channel_key) WHERE active = 1;

    CREATE TABLE tasks (
        id TEXT PRIMARY KEY,
        channel TEXT NOT NULL,
        message_id TEXT NOT NULL,
        conversation_id TEXT REFERENCES conversations(id),
        state TEXT NOT NULL,
        completion_reason TEXT,
        raw_json TEXT NOT NULL,
        parsed_json TEXT,
        reply_json TEXT,
        reply_delivered INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        started_at REAL,
        completed_at REAL,
        cost_usd REAL NOT NULL DEFAULT 0,
        num_turns INTEGER NOT NULL DEFAULT 0,
        error TEXT,
        attempts INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX tasks_state ON tasks(state, created_at);
    CREATE INDEX tasks_conversation ON tasks(conversation_id, created_at);

    CREATE TABLE inbound_messages (
        channel TEXT NOT NULL,
        message_id TEXT NOT NULL,
        task_id TEXT NOT NULL REFERENCES tasks(id),
        received_at REAL NOT NULL,
        PRIMARY KEY (channel, message_id)
    );
    """,
    # 2: approvals of unknown senders, approved room members, accumulated context.
    """
    CREATE TABLE approvals (
        code TEXT PRIMARY KEY,
        channel TEXT NOT NULL,
        room TEXT NOT NULL,
        room_title TEXT NOT NULL,
        sender_id TEXT NOT NULL,
        sender_name TEXT NOT NULL,
        preview TEXT NOT NULL,
        state TEXT NOT NULL,
        card_channel TEXT,
        card_context TEXT,
        card_ref TEXT,
        created_at REAL NOT NULL,
        expires_at REAL NOT NULL,
        decided_by TEXT,
        decided_at REAL
    );
    CREATE UNIQUE INDEX approvals_one_pending
        ON approvals(channel, room, sender_id) WHERE state = 'pending';

    CREATE TABLE approval_tasks (
        code TEXT NOT NULL REFERENCES approvals(code),
        task_id TEXT NOT NULL REFERENCES tasks(id),
        held_at REAL NOT NULL,
        PRIMARY KEY (code, task_id)
    );

    CREATE TABLE room_members (
        channel TEXT NOT NULL,
        room TEXT NOT NULL,
        sender_id TEXT NOT NULL,
        added_by TEXT NOT NULL,
        added_at REAL NOT NULL,
        PRIMARY KEY (channel, room, sender_id)
    );

    CREATE TABLE context_messages (
        channel TEXT NOT NULL,
        conversation_key TEXT NOT NULL,
        sender_name TEXT NOT NULL,
        body TEXT NOT NULL,
        received_at REAL NOT NULL
    );
    CREATE INDEX context_messages_key ON context_messages(channel, conversation_key);
    """,
    # 3: approvals also cover invitations into unknown rooms.
    """
    ALTER TABLE approvals ADD COLUMN kind TEXT NOT NULL DEFAULT 'sender';
    """,
    # 4: which held messages the owner saw on the card (Allow runs only those). A card sent
    # before this version quoted only its first message.
    """
    ALTER TABLE approval_tasks ADD COLUMN shown INTEGER NOT NULL DEFAULT 0;
    UPDATE approval_tasks SET shown = 1
        WHERE rowid IN (SELECT MIN(rowid) FROM approval_tasks GROUP BY code);
    """,
    # 5: why a task's stored reply could not be sent yet (state 'undelivered'); cleared
    # when it goes out.
    """
    ALTER TABLE tasks ADD COLUMN delivery_error TEXT;
    """,
    # 6: retention. When a completed task's raw payload and parsed message were emptied
    # (older than state.retention_days); the row and its outcome stay.
    """
    ALTER TABLE tasks ADD COLUMN payload_pruned_at DOUBLE PRECISION;
    CREATE INDEX tasks_completed ON tasks(completed_at);
    """,
    # 7: which agent CLI a conversation's session belongs to (NULL: the server's default
    # backend, as before), and the one /agent chose for its next new session.
    """
    ALTER TABLE conversations ADD COLUMN agent_backend TEXT;
    ALTER TABLE conversations ADD COLUMN next_agent TEXT;
    """,
    # 8: commands apart from agent tasks (lists, charts, metrics). Rows from before are
    # taken for what they most likely were: answered at once (no agent turn, no cost, done
    # within a second of starting) with a body that reads as a command, or a card's decision
    # (completed without ever starting, no conversation, no reply).
    """
    ALTER TABLE tasks ADD COLUMN kind TEXT NOT NULL DEFAULT 'agent';
    CREATE INDEX tasks_kind ON tasks(kind, state, created_at);
    UPDATE tasks SET kind = 'command'
        WHERE (started_at IS NOT NULL AND completed_at IS NOT NULL
               AND completed_at - started_at < 1 AND num_turns = 0 AND cost_usd = 0
               AND (parsed_json LIKE '%"body": "/%' OR parsed_json LIKE '%"body": "!%'))
           OR (completion_reason = 'success' AND started_at IS NULL AND reply_json IS NULL);
    """,
    # 9: the dashboard's lists (state/task_lists.py) at 100,000 tasks: newest first among
    # agent tasks, or one channel's, read in index order (a page stops after its rows); a
    # period's totals and run times, and a conversation's count, cost and newest task, read
    # from an index alone.
    """
    CREATE INDEX tasks_listed
        ON tasks(kind, created_at, state, completion_reason, cost_usd, started_at, completed_at);
    CREATE INDEX tasks_channel_listed ON tasks(kind, channel, created_at);
    CREATE INDEX tasks_conversation_totals ON tasks(conversation_id, kind, created_at, cost_usd);
    """,
    # 10: when the sender was shown the task's acknowledgement (the task's waterfall).
    """
    ALTER TABLE tasks ADD COLUMN acknowledged_at DOUBLE PRECISION;
    """,
)
