#!/usr/bin/env bash
# Builds the project into build/ (or $VAULT_BUILD_DIR), installing Debian packages when missing.
# Extra arguments go to cmake's configure step, e.g. -DVAULT_SANITIZE=address,undefined.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/deploy/install-deps.sh"
build=${VAULT_BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" "$@" >/dev/null
ninja -C "$build" ${VAULT_BUILD_TARGETS:-}
