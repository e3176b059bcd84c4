#!/usr/bin/env bash
# Builds the vault (installing Debian packages when missing) and runs a local federation of
# vaults on loopback, each with its own RocksDB and mutual TLS between them.
#
#   deploy/quickstart.sh [up|down|status] [--dir DIR] [--vaults N] [--reset] [--output json]
#
#   up      create what is missing, start every vaultd not running (default)
#   down    stop them (SIGTERM: calls in flight drain)
#   status  show each vault: name, running, admin socket, gRPC address, config
#   --dir     where the federation lives (default: <checkout>/run/quickstart)
#   --vaults  how many vaults, 1..9 (default 1); vault-a, vault-b, ... on 127.0.0.1:7701, 7702, ...
#   --reset   with up: stop and wipe DIR first
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
action=up dir="$root/run/quickstart" vaults="" reset=0 output=text
while [[ $# -gt 0 ]]; do
  case "$1" in
    up|down|status) action=$1 ;;
    --dir) dir=$2; shift ;;
    --vaults) vaults=$2; shift ;;
    --reset) reset=1 ;;
    --output) output=$2; shift ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "quickstart: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
build=${VAULT_BUILD_DIR:-$root/build}
vaultctl="$build/vaultctl/vaultctl"
vaultd="$build/node/vaultd"
if [[ -z "$vaults" ]]; then
  vaults=$(cat "$dir/vaults" 2>/dev/null || echo 1)
fi
[[ "$vaults" =~ ^[1-9]$ ]] || { echo "quickstart: --vaults must be 1..9" >&2; exit 2; }
names=()
for i in $(seq 1 "$vaults"); do names+=("vault-$(printf "\\x$(printf %x $((96 + i)))")"); done

pid_of() {  # prints the pid of a running vaultd for vault dir $1, or nothing
  local ready="$1/data/vaultd.ready" pid
  [[ -f "$ready" ]] || return 0
  pid=$(sed -n 's/.*"pid": \([0-9]*\).*/\1/p' "$ready")
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
  return 0
}

stop_all() {
  for v in "$dir"/vault-*; do
    [[ -d "$v" ]] || continue
    pid=$(pid_of "$v")
    [[ -n "$pid" ]] || continue
    kill -TERM "$pid"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    echo "stopped $(basename "$v") (pid $pid)" >&2
  done
}

status() {
  local first=1
  [[ $output == json ]] && printf '['
  for i in "${!names[@]}"; do
    n=${names[$i]} v="$dir/${names[$i]}" pid=$(pid_of "$dir/${names[$i]}")
    port=$((7701 + i))
    if [[ $output == json ]]; then
      [[ $first == 1 ]] || printf ','
      first=0
      printf '{"name":"%s","running":%s,"pid":%s,"admin_socket":"%s","grpc_address":"127.0.0.1:%s","config":"%s","vault_key":"%s"}' \
        "$n" "$([[ -n $pid ]] && echo true || echo false)" "${pid:-null}" "$v/data/vault.sock" "$port" \
        "$v/vault.conf" "$v/vault.key"
    else
      printf '%-8s %-8s admin %s  grpc 127.0.0.1:%s  config %s\n' "$n" \
        "$([[ -n $pid ]] && echo running || echo stopped)" "$v/data/vault.sock" "$port" "$v/vault.conf"
    fi
  done
  [[ $output == json ]] && printf ']\n'
  return 0
}

case "$action" in
  down) stop_all; exit 0 ;;
  status) status; exit 0 ;;
esac

if [[ $reset == 1 ]]; then
  stop_all
  rm -rf "${dir:?}"/vault-* "$dir/ca" "$dir/vaults"
fi
"$root/deploy/build.sh" >&2
echo "$vaults" > "$dir/vaults"

# The federation: one CA, every vault a member of every other.
[[ -f "$dir/ca/ca.crt" ]] || "$vaultctl" federation create-ca --dir "$dir/ca" --name quickstart >&2
for i in "${!names[@]}"; do
  v="$dir/${names[$i]}"
  [[ -f "$v/vault.conf" ]] || "$vaultctl" init --name "${names[$i]}" --dir "$v" --ca "$dir/ca" \
      --listen "127.0.0.1:$((7701 + i))" >&2
done
for a in "${names[@]}"; do
  for b in "${names[@]}"; do
    [[ $a == "$b" ]] || "$vaultctl" federation add-member --config "$dir/$a/vault.conf" \
        --peer-config "$dir/$b/vault.conf" >/dev/null
  done
done
for n in "${names[@]}"; do
  v="$dir/$n"
  [[ -n $(pid_of "$v") ]] && continue
  "$vaultd" --config "$v/vault.conf" >>"$v/vaultd.log" 2>&1 </dev/null &
  disown
  for _ in $(seq 1 100); do [[ -n $(pid_of "$v") ]] && break; sleep 0.1; done
  [[ -n $(pid_of "$v") ]] || { echo "quickstart: $n did not start; see $v/vaultd.log" >&2; tail -5 "$v/vaultd.log" >&2; exit 1; }
done

status
[[ $output == json ]] && exit 0
a="$dir/${names[0]}"
cat <<MSG

The federation is up. Drive it with vaultctl ($vaultctl):
  export VAULT_ADDR=$a/data/vault.sock
  vaultctl status
  vaultctl cas put README.md          # prints sha256:<hex>/<size>  README.md
  vaultctl cas ls
  vaultctl cas get sha256:<hex>/<size> -o copy
Over mutual TLS, as a member:  vaultctl --config $a/vault.conf --vault 127.0.0.1:7701 cas ls
Stop it:  deploy/quickstart.sh down --dir $dir      Wipe it:  deploy/quickstart.sh up --reset --dir $dir
MSG
