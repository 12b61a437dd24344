#!/usr/bin/env bash
# OpenSSH's server and client, for the tests of an agent host reached over ssh://
# (tests/support/ssh_podman_host.py runs its own sshd on 127.0.0.1 from a temp config; no
# system sshd is started or enabled). Idempotent: nothing to do when both are there.
# setup: tests only
set -euo pipefail
command -v /usr/sbin/sshd >/dev/null && command -v ssh >/dev/null && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    openssh-server openssh-client >/dev/null
else
  echo "missing for the ssh host tests: sshd and ssh (install openssh-server openssh-client)" >&2
  exit 1
fi
