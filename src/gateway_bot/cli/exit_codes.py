"""Every exit code of ``gateway-bot``, in one place, so scripts and the docs agree.

0 done; 1 the command ran and was refused (a state copy onto a non-empty target, an
approval code that is not waiting); 2 the config or the set-up is wrong, nothing was
started; 3 (``status``, ``approvals``) no state at all for this config; 4 (``approve``,
``deny``) no daemon answers on the control socket.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_CONFIG = 2
EXIT_NO_STATE = 3
EXIT_NO_DAEMON = 4
