#!/usr/bin/env bash
# Builds the vault (installing Debian packages when missing) and runs a local federation of
# vaults on loopback: each its own vaultd with its own RocksDB, mutual TLS between them, every
# vault a member of the others and mirroring their audit logs. Then it shows a mobile agent at
# work (the RFC's pattern 4): it gathers a shopping list at home (vault-a), visits every other
# vault to price it there, and comes home with the report; you watch its journey as it happens.
#
#   deploy/quickstart.sh [up|down|status] [--dir DIR] [--vaults N] [--base-port P] [--reset]
#                        [--no-demo] [--output json]
#
#   up      create what is missing, start every vaultd not running, run the demo (default)
#   down    stop them (SIGTERM: calls in flight drain)
#   status  each vault: name, running, admin socket, gRPC address, config, administrator key
#   --dir        where the federation lives (default: <checkout>/run/quickstart)
#   --vaults     how many vaults, 1..9 (default 3); vault-a, vault-b, ... (fixed by the first up)
#   --base-port  vault-a's port; the others follow (default 7701; fixed by the first up)
#   --reset      with up: stop and wipe DIR first
#   --no-demo    with up: do not run the mobile agent
#   --output json  up and status: print the vaults as JSON on stdout (the demo talks on stderr)
#
# Re-running up is safe: it starts what is stopped and runs the demo again with a new agent.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
action=up dir="$root/run/quickstart" vaults="" base_port="" reset=0 output=text demo=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    up|down|status) action=$1 ;;
    --dir) dir=$2; shift ;;
    --vaults) vaults=$2; shift ;;
    --base-port) base_port=$2; shift ;;
    --reset) reset=1 ;;
    --no-demo) demo=0 ;;
    --output) output=$2; shift ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "quickstart: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
build=${VAULT_BUILD_DIR:-$root/build}
vaultctl="$build/vaultctl/vaultctl"
vaultd="$build/node/vaultd"
if [[ $reset == 1 && $action == up ]]; then
  :  # the counts of the wiped federation do not carry over
elif [[ -f "$dir/vaults" ]]; then
  kept=$(cat "$dir/vaults")
  if [[ -n "$vaults" && "$vaults" != "$kept" && $action == up ]]; then
    echo "quickstart: $dir holds $kept vaults; use --reset to make $vaults" >&2; exit 2
  fi
  vaults=$kept
fi
if [[ -f "$dir/base-port" && ! ($reset == 1 && $action == up) ]]; then
  kept=$(cat "$dir/base-port")
  if [[ -n "$base_port" && "$base_port" != "$kept" && $action == up ]]; then
    echo "quickstart: $dir uses base port $kept; use --reset to change it" >&2; exit 2
  fi
  base_port=$kept
fi
vaults=${vaults:-3}
base_port=${base_port:-7701}
[[ "$vaults" =~ ^[1-9]$ ]] || { echo "quickstart: --vaults must be 1..9" >&2; exit 2; }
[[ "$base_port" =~ ^[0-9]+$ && $base_port -ge 1024 && $base_port -le 65526 ]] ||
  { echo "quickstart: --base-port must be 1024..65526" >&2; exit 2; }
[[ $output == text || $output == json ]] || { echo "quickstart: --output is text or json" >&2; exit 2; }
names=()
for i in $(seq 1 "$vaults"); do names+=("vault-$(printf "\\x$(printf %x $((96 + i)))")"); done

metrics_of() {  # the metrics address of a running vaultd for vault dir $1, or nothing
  local ready="$1/data/vaultd.ready"
  [[ -f "$ready" ]] && sed -n 's/.*"metrics_address": *"\([^"]*\)".*/\1/p' "$ready"
  return 0
}

pid_of() {  # prints the pid of the running vaultd of vault dir $1, or nothing
  local ready="$1/data/vaultd.ready" pid cmdline
  [[ -f "$ready" ]] || return 0
  pid=$(sed -n 's/.*"pid": \([0-9]*\).*/\1/p' "$ready")
  [[ -n "$pid" ]] || return 0
  # A ready file left by a killed vaultd may name a pid reused since: only a vaultd started with
  # this vault's config counts.
  cmdline=$(tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null) || return 0
  grep -qxF "$1/vault.conf" <<<"$cmdline" || return 0
  echo "$pid"
}

stop_all() {  # SIGTERM to each running vaultd, then wait until it is gone (exit 1 if one stays)
  local left=0
  for v in "$dir"/vault-*; do
    [[ -d "$v" ]] || continue
    pid=$(pid_of "$v")
    [[ -n "$pid" ]] || continue
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 1200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "quickstart: $(basename "$v") (pid $pid) is still stopping after 120 s; see $v/vaultd.log" >&2
      left=1
    else
      echo "stopped $(basename "$v") (pid $pid)" >&2
    fi
  done
  return $left
}

status() {
  local first=1
  [[ $output == json ]] && printf '['
  for i in "${!names[@]}"; do
    n=${names[$i]} v="$dir/${names[$i]}" pid=$(pid_of "$dir/${names[$i]}")
    port=$((base_port + i))
    if [[ $output == json ]]; then
      [[ $first == 1 ]] || printf ','
      first=0
      metrics=""
      [[ -n $pid ]] && metrics=$(metrics_of "$v")
      printf '{"name":"%s","running":%s,"pid":%s,"admin_socket":"%s","grpc_address":"127.0.0.1:%s","metrics_url":%s,"config":"%s","vault_key":"%s","admin_key":"%s","log":"%s"}' \
        "$n" "$([[ -n $pid ]] && echo true || echo false)" "${pid:-null}" "$v/data/vault.sock" "$port" \
        "$([[ -n $metrics ]] && echo "\"http://$metrics/metrics\"" || echo null)" \
        "$v/vault.conf" "$v/vault.key" "$v/admin.key" "$v/vaultd.log"
    else
      metrics=""
      [[ -n $pid ]] && metrics=$(metrics_of "$v")
      printf '%-8s %-8s admin %s  grpc 127.0.0.1:%s  metrics %s  config %s\n' "$n" \
        "$([[ -n $pid ]] && echo running || echo stopped)" "$v/data/vault.sock" "$port" \
        "${metrics:+http://$metrics/metrics}" "$v/vault.conf"
    fi
  done
  [[ $output == json ]] && printf ']\n'
  return 0
}

case "$action" in
  down) stop_all; exit $? ;;
  status) status; exit 0 ;;
esac

if [[ $reset == 1 ]]; then
  stop_all || { echo "quickstart: not wiping $dir while a vault still runs" >&2; exit 1; }
  rm -rf "${dir:?}"/vault-* "$dir/ca" "$dir/vaults" "$dir/base-port" "$dir/demo"
fi
# VAULT_QUICKSTART_NO_BUILD=1: use the binaries already in VAULT_BUILD_DIR (the tests do).
# Only what the vaults run (the target vault-runtime): the tests and benchmarks are deploy/test.sh's.
[[ ${VAULT_QUICKSTART_NO_BUILD:-0} == 1 ]] ||
  VAULT_BUILD_TARGETS=${VAULT_BUILD_TARGETS:-vault-runtime} "$root/deploy/build.sh" >&2
[[ -x $vaultd && -x $vaultctl ]] || { echo "quickstart: no vaultd/vaultctl in $build" >&2; exit 1; }
echo "$vaults" > "$dir/vaults"
echo "$base_port" > "$dir/base-port"

# The federation: one CA, every vault a member of every other.
[[ -f "$dir/ca/ca.crt" ]] || "$vaultctl" federation create-ca --dir "$dir/ca" --name quickstart >&2
for i in "${!names[@]}"; do
  v="$dir/${names[$i]}"
  [[ -f "$v/vault.conf" ]] || "$vaultctl" init --name "${names[$i]}" --dir "$v" --ca "$dir/ca" \
      --listen "127.0.0.1:$((base_port + i))" >&2
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
  # Prometheus metrics on a port the kernel picks (status shows it).
  "$vaultd" --config "$v/vault.conf" --metrics-listen 127.0.0.1:0 >>"$v/vaultd.log" 2>&1 </dev/null &
  disown
  for _ in $(seq 1 100); do [[ -n $(pid_of "$v") ]] && break; sleep 0.1; done
  [[ -n $(pid_of "$v") ]] || { echo "quickstart: $n did not start; see $v/vaultd.log" >&2; tail -5 "$v/vaultd.log" >&2; exit 1; }
done

if [[ $output == json ]]; then
  status
  [[ $demo == 1 ]] && { "$root/deploy/quickstart-demo.sh" --dir "$dir" --vaults "$vaults" >&2 || exit $?; }
  exit 0
fi
status
if [[ $demo == 1 ]]; then
  echo
  "$root/deploy/quickstart-demo.sh" --dir "$dir" --vaults "$vaults" || exit $?
fi
a="$dir/${names[0]}"
cat <<MSG

The federation is up. Drive it with vaultctl ($vaultctl), here as vault-a's operator:
  export VAULT_ADDR='$a/data/vault.sock'
  vaultctl status                               # this vault: key, listener, objects, members
  vaultctl federation status                    # every member: reachable, lags, agents hosted
  vaultctl cas put README.md                    # prints sha256:<hex>/<size>  README.md
  vaultctl cas get sha256:<hex>/<size> --out copy  # verified against the digest
  vaultctl cas replicate --to vault-b --all     # copy what a member lacks
  vaultctl agent spawn sdk/python/examples/reactive.scm --as $a/admin.key   # prints <agent id>
  vaultctl agent ls                             # the agents here
  vaultctl --vault $dir/vault-b/data/vault.sock policy trust $a/admin.key --ceiling read-write
                                                # vault-b runs vault-a's administrator's agents
  vaultctl migrate <agent id> --to vault-b      # hand an agent to a member
  vaultctl agent where <agent id>               # where it runs now, asked of the federation
  vaultctl audit verify --all                   # this vault's log and every mirrored log
  vaultctl --vault $dir/vault-b/data/vault.sock status   # another vault's operator socket
Every command has --help and --output json. Administrator keys: $dir/vault-*/admin.key
Stop it:  deploy/quickstart.sh down --dir $dir      Wipe it:  deploy/quickstart.sh up --reset --dir $dir
MSG
