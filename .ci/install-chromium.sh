#!/usr/bin/env bash
# Install what the web UI browser tests need (tests/webui/test_browser.py, marker "browser"):
# Debian's Chromium at /usr/bin/chromium, and the `playwright` Python package in VENV_DIR to
# drive it. No browser is downloaded by Playwright: the tests launch /usr/bin/chromium.
#
#   bash .ci/install-chromium.sh VENV_DIR
#
# Idempotent: skips apt when /usr/bin/chromium exists and pip when playwright imports.
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 VENV_DIR" >&2
    exit 2
fi
VENV_DIR="$1"
PY="$VENV_DIR/bin/python"
PLAYWRIGHT_SPEC="${PLAYWRIGHT_SPEC:-playwright>=1.40}"

if [[ -x /usr/bin/chromium ]]; then
    echo "install-chromium: /usr/bin/chromium present ($(/usr/bin/chromium --version 2>/dev/null | head -1))"
else
    SUDO=""
    if [[ "$(id -u)" -ne 0 ]]; then
        SUDO="sudo"
    fi
    echo "install-chromium: installing Debian's chromium package"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium
fi

if [[ ! -x "$PY" ]]; then
    echo "install-chromium: no python at $PY (create the venv first)" >&2
    exit 2
fi
if "$PY" -c "import playwright.sync_api" >/dev/null 2>&1; then
    echo "install-chromium: playwright already installed in $VENV_DIR"
else
    echo "install-chromium: pip install '$PLAYWRIGHT_SPEC' into $VENV_DIR (no browser download)"
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 "$PY" -m pip install -q "$PLAYWRIGHT_SPEC"
fi
"$PY" -c "import playwright.sync_api" && echo "install-chromium: ok"
