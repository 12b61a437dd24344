"""The first day of a deployment of several replicas: started at the same moment on an empty
deployment (no egress proxy yet, no CA), and the first messages arrive at once, each
conversation's first task on whichever replica claimed it.

Each replica of a host's egress proxy used to guard its creation with an in-process lock
only: every replica found no proxy and created one, and all but the first task answered
"could not create the egress proxy: ... the container name gwb-proxy-... is already in use"
(2 of 5 users, three replicas); two of them made the proxy's CA in one directory at once.

Each replica is a sandbox object of its own on one state directory and config, with its own
in-process locks as separate daemons have (``tests/integration/replicas/
test_replicas_shared_files.py`` does the same for the git mirror): what keeps them apart is
the proxy's ``flock``, which two opens in one process contend for as two processes do."""

from __future__ import annotations

import asyncio

from gateway_bot.config.server import load_server_config
from gateway_bot.runtime.agent_setup import agent_image_files
from gateway_bot.sandbox.podman.sandbox import PodmanSandbox
from tests.integration.sandbox.test_sandbox_stdin import make_context
from tests.integration.state.test_sandbox_known_state import _run, _within_deadline
from tests.support.sandbox_fixtures import SandboxSetup, current_image, podman, podman_run_flags

REPLICAS = 3
FIRST_MESSAGES = 5


def test_three_replicas_started_together_on_an_empty_deployment_answer_every_first_message(
    sandbox: SandboxSetup,
) -> None:
    config = load_server_config(sandbox.config())
    replicas = [
        PodmanSandbox(config.sandbox, config.state_dir, agent_image_files(config))
        for _ in range(REPLICAS)
    ]
    contexts = [
        make_context(sandbox.tmp_path / "contexts", f"first-{n}") for n in range(FIRST_MESSAGES)
    ]

    async def known(context_id: str) -> bool:
        return True

    async def steps() -> None:
        try:
            await asyncio.gather(*(replica.open(known) for replica in replicas))
            # Five users' first messages at once, spread over the replicas as claims do.
            answers = await asyncio.gather(
                *(
                    _run(replicas[n % REPLICAS], context, f"echo answered {context.id}")
                    for n, context in enumerate(contexts)
                ),
                return_exceptions=True,
            )
            assert answers == [f"answered {c.id}\n" for c in contexts]
            # The proxy must be made again (removed behind the replicas' backs): again all
            # at once.
            podman("rm", "-f", "-t", "0", f"gwb-proxy-{sandbox.deployment}")
            again = await asyncio.gather(
                *(
                    _run(replicas[(n + 1) % REPLICAS], context, f"echo again {context.id}")
                    for n, context in enumerate(contexts)
                ),
                return_exceptions=True,
            )
            assert again == [f"again {c.id}\n" for c in contexts]
        finally:
            for replica in replicas:
                await replica.close()

    _within_deadline(steps)

    proxies = podman(
        "ps", "-a", "--format", "{{.Names}}",
        "--filter", f"label=gateway-bot.deployment={sandbox.deployment}",
        "--filter", "label=gateway-bot.role=proxy",
    ).stdout.split()  # fmt: skip
    assert proxies == [f"gwb-proxy-{sandbox.deployment}"], "one proxy for the host, running"
    ca = config.state_dir / "sandbox" / "egress" / "ca"
    check = podman(
        "run", "--rm", *podman_run_flags(), "--network=none",
        "--label", f"gateway-bot.deployment={sandbox.deployment}",
        "--label", "gateway-bot.role=test", "--entrypoint", "/opt/mitmproxy/bin/python3",
        "-v", f"{ca}:/ca:ro", current_image("localhost/gateway-bot/proxy"), "-c",
        "from cryptography import x509; from cryptography.hazmat.primitives import serialization;"
        "key = serialization.load_pem_private_key(open('/ca/mitmproxy-ca.pem','rb').read(), None);"
        "cert = x509.load_pem_x509_certificate(open('/ca/mitmproxy-ca-cert.pem','rb').read());"
        "print(cert.public_key().public_numbers() == key.public_key().public_numbers())",
        check=False,
    )  # fmt: skip
    assert check.stdout.strip() == "True", f"the CA's key and certificate match: {check}"
