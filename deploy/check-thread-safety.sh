#!/usr/bin/env bash
# Compiles the vault's own code with clang and -Wthread-safety as an error: every ABSL_GUARDED_BY
# field is touched with its mutex held, every ABSL_EXCLUSIVE_LOCKS_REQUIRED function is called with
# it, and locks are released where they are taken. GCC ignores the annotations, so this is the
# only build that checks them. Tests and benchmarks are left out (the production code is what the
# annotations describe). Run by .ci/run after the tests; about as long as a build without tests.
#   deploy/check-thread-safety.sh             # into build-tsa/ (or $VAULT_TSA_BUILD_DIR)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/deploy/install-deps.sh"
build=${VAULT_TSA_BUILD_DIR:-$root/build-tsa}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
  -DVAULT_THREAD_SAFETY=ON -DVAULT_BUILD_TESTS=OFF -DVAULT_BUILD_BENCH=OFF "${launcher[@]}" >/dev/null
ninja -C "$build"
echo "thread-safety check: every annotated lock is used as annotated (clang -Wthread-safety)"
