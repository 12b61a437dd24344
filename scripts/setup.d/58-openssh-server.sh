#!/usr/bin/env bash
# OpenSSH's server and client, for the tests of an agent host reached over ssh://
# (tests/support/ssh_podman_host.py runs its own sshd on 127.0.0.1 from a temp config; no
# system sshd is started or enabled). Idempotent: nothing to do when both are there.
# setup: tests only
set -euo pipefail
command -v /usr/sbin/sshd >/dev/null && command -v ssh >/dev/null && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  apt-get update -qq
  # The package's postinst would start a system sshd on every address: policy-rc.d
  # refuses service starts for the length of the install (only when none is in place).
  policy=/usr/sbin/policy-rc.d
  placed=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && placed=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    openssh-server openssh-client >/dev/null
  if [ "$placed" -eq 1 ]; then rm -f "$policy"; fi
else
  echo "missing for the ssh host tests: sshd and ssh (install openssh-server openssh-client)" >&2
  exit 1
fi
