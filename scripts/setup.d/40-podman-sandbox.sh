#!/usr/bin/env bash
# The Podman sandbox: podman and its helpers (apt, when root), then the images it runs:
# a Debian base made with debootstrap (no registry needed), the agent image (the default
# Containerfile plus the pinned Claude Code from .tools) and the egress proxy image.
# Idempotent and quick when everything is in place: images are tagged by a hash of their
# inputs, and `gateway-bot image build` skips what is up to date.
set -euo pipefail
export PATH="$PWD/.tools/node_modules/.bin:$PWD/.tools/uv/bin:$HOME/.local/bin:$PATH"
need=()
# iptables: Debian's podman only suggests it, and without it netavark fails every container
# start with a bare "netavark: No such file or directory (os error 2)".
for tool in podman runc conmon slirp4netns fuse-overlayfs newuidmap debootstrap setsid iptables; do
  command -v "$tool" >/dev/null || need+=("$tool")
done
# The agent containers' init (containers.INIT_COMMAND, sandbox/podman/init.c) is built
# here, static, and mounted read-only from the host: gcc and the static libc.
command -v gcc >/dev/null || need+=(gcc)
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || [ -f /usr/lib/aarch64-linux-gnu/libc.a ] || need+=(libc6-dev)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    # runc named explicitly: podman then takes it instead of crun, which fails on
    # cgroup-hybrid hosts. catatonit, netavark and aardvark-dns come with podman.
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      podman runc conmon slirp4netns fuse-overlayfs uidmap debootstrap util-linux \
      netavark aardvark-dns iptables gcc libc6-dev \
      >/dev/null
  else
    echo "missing for the podman sandbox: ${need[*]} (install them, or use sandbox: {kind: none})" >&2
    exit 1
  fi
fi
if [ "$(id -u)" -eq 0 ]; then
  # Built each time (a fraction of a second), then put in place whole.
  init_dir=/usr/local/libexec/gateway-bot
  mkdir -p "$init_dir"
  gcc -static -Os -Wall -Wextra -Werror -o "$init_dir/init.partial" src/gateway_bot/sandbox/podman/init.c
  chmod 0755 "$init_dir/init.partial"
  mv -f "$init_dir/init.partial" "$init_dir/init"
  uv run --frozen gateway-bot image bootstrap
fi
uv run --frozen gateway-bot image build
