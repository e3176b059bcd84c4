#!/usr/bin/env bash
# Installs every build and test dependency from Debian 12 packages. Idempotent; prints nothing
# when everything is already installed.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev libgrpc-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev
  librocksdb-dev libabsl-dev libssl-dev libseccomp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev libspdlog-dev
  python3 iproute2 procps coreutils hyperfine
  # Only the baselines of bench/migration_bench and bench/replication_bench.
  rsync
  # Only the comparison run of bench/sandbox_bench (a sandbox launcher to measure against).
  bubblewrap
  # The Python agent SDK (sdk/python) and Python agents inside the sandbox.
  python3-protobuf
  # Only the independent verifier of integration-tests/interop_test.cc (Go's sumdb note/tlog).
  golang-go golang-golang-x-mod-dev
  # Prometheus metrics of vaultd (replaces a hand-written exposition format and HTTP server).
  prometheus-cpp-dev
  # Scheme agents: Guile 3.0 embedded in vault-scheme-runner (sandbox/scheme/), not an interpreter
  # of our own.
  guile-3.0-dev
  # wasm agents: wabt's interpreter (its libwabt.a and headers) in vault-wasm-runner (sandbox/wasm/),
  # not an interpreter of our own; lld, wasi-libc and clang's wasm32 runtime build the wasm test
  # agents and examples; binaryen's wasm-opt only bench/wasm_bench (the Asyncify comparison).
  wabt lld wasi-libc libclang-rt-dev-wasm32 binaryen
  # The http_get host call: the vault fetches URLs for agents (replaces a hand-written HTTP client).
  libcurl4-openssl-dev
  # Tests only: the independent Python gRPC client of CAS and Audit, and the deploy/ YAML checks.
  python3-grpcio python3-yaml python3-cryptography
  # Container agents (sandbox/container/): runc, Debian's OCI runtime, runs them; libarchive reads
  # image archives and layer tars (tar, pax, gzip, zstd) for the vault's own confined unpacker
  # (replaces a hand-written tar reader and decompressors).
  runc libarchive-dev
  # Only deploy/check-thread-safety.sh: clang checks the code's lock annotations (-Wthread-safety).
  clang
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
