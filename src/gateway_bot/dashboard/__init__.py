"""The web dashboard: server-rendered pages over the application API (``core/application``)
and live updates from the change feed (``core/feed``), behind a token login.

A front end like the CLI's ``status``: it imports the core, never a channel."""
