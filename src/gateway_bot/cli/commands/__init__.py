"""One module per verb of ``gateway-bot``; importing this package registers them all."""

from gateway_bot.cli.commands import (  # noqa: F401
    approvals,
    check,
    image,
    install_service,
    matrix,
    serve,
    state,
    status,
)
