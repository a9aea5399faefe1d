#!/usr/bin/env bash
# Installs, from the machine's configured Debian sources, what the local stack's node needs
# beyond the binaries built from Go: the OCI runtime, the CNI plugins, the tools kubelet and
# kube-proxy call, and what builds images without a registry. Needs root (apt-get); does
# nothing when everything is already there. Nothing installed here starts a daemon.
#
#   hack/install-node-packages.sh           # the node's
#   hack/install-node-packages.sh browser   # the headless Chromium the dashboard's browser
#                                           # tests and benchmark drive (tests/cdp.py), any stack
set -euo pipefail

if [ "${1:-}" = browser ]; then
  purpose="the dashboard's browser tests"
  packages=(
    chromium-headless-shell  # Debian's headless Chromium: --headless, --remote-debugging-port
    fonts-dejavu-core        # the page's text in screenshots
  )
else
purpose="the local node"
packages=(
  runc                         # the OCI runtime containerd's shim calls
  containernetworking-plugins  # bridge, host-local, portmap in /usr/lib/cni
  iptables conntrack socat ethtool iproute2 kmod  # kubelet and kube-proxy call these
  busybox-static               # the busybox image, built without a registry
  gcc libc6-dev                # compiles the pause image's static binary
  debootstrap                  # the Debian base image for Python images
  buildah                      # builds the repository's Dockerfiles into local images
  nginx-light                  # the TLS / API-key front for the Temporal dev server
  redis-server git             # Argo CD's cache and the git daemon serving it a repository
                               # (tests/integration/test_argocd_live.py)
)
fi

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "error: $purpose needs these Debian packages: ${missing[*]}" >&2
  echo "       run as root: apt-get install --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
echo ">> installing Debian packages for $purpose: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
# Packages such as redis-server start their service on install unless policy-rc.d says no;
# the stack starts its own on loopback ports, so a machine without one gets a temporary one.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 0755 "$policy"
  trap 'rm -f "$policy"' EXIT
fi
apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
