"""The Slack channel: a Slack app (slack-bolt, asyncio) where a thread is a conversation.

One module per step of a message's path:

- ``listener``: Bolt app, Socket Mode (``socket_mode``) or HTTP Events API
  (``http_events``) transport, submits what engages (``events``: the pure rules);
- ``adapter``: authenticates (``access``) and parses what was stored, answers in the
  thread: acknowledgement edited into progress, reply in mrkdwn (``render``), files
  (``files``), approval cards;
- ``posts``: each post for a task made exactly once (``records``: what was already
  posted, so restarts never post twice).
"""

from gateway_bot.channels.slack.adapter import SlackAdapter

__all__ = ["SlackAdapter"]
