#!/usr/bin/env bash
# Builds everything and runs every test (ctest labels: unit, integration).
#   deploy/test.sh                 # all tests
#   deploy/test.sh -L unit         # extra arguments go to ctest
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${VAULT_BUILD_DIR:-$root/build}
"$root/deploy/build.sh"
cd "$build"
ctest --output-on-failure --timeout 600 -j "$(nproc)" "$@"
