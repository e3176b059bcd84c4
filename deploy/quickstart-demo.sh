#!/usr/bin/env bash
# The quickstart's demo (run by deploy/quickstart.sh up): the mobile agent of
# sdk/python/examples/mobile.py on the federation the quickstart made.
#
#   deploy/quickstart-demo.sh --dir DIR --vaults N [--timeout SECONDS]
#
# vault-a holds a shopping list, every other vault a price list of its own. The agent is spawned
# on vault-a by a demo owner whom every vault trusts with a ceiling of exactly what the agent
# needs (read /vault/pub, cas-write, migrate within the federation). It gathers the list, hops to
# vault-b, vault-c, ... pricing it at each, and hops home with the report, which it stores in
# vault-a's CAS as its result. Each hop is printed as it happens (from `vaultctl agent where`,
# asked of the federation), then the report and the journey as the audit logs record it.
#
# Writes DIR/demo/agent (the agent's id) and DIR/demo/report.txt (the report). Exit 0 when the
# agent came home with a report; 1 otherwise, with what went wrong; 0 with a note when this
# machine cannot run agents (the federation itself is up).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir="" vaults="" timeout=90
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) dir=$2; shift ;;
    --vaults) vaults=$2; shift ;;
    --timeout) timeout=$2; shift ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "quickstart-demo: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ -n "$dir" && "$vaults" =~ ^[1-9]$ ]] || { echo "quickstart-demo: need --dir and --vaults 1..9" >&2; exit 2; }
build=${VAULT_BUILD_DIR:-$root/build}
vaultctl="$build/vaultctl/vaultctl"
names=()
for i in $(seq 1 "$vaults"); do names+=("vault-$(printf "\\x$(printf %x $((96 + i)))")"); done
home=${names[0]}
if [[ $vaults -lt 2 ]]; then
  echo "demo: a mobile agent needs two vaults or more (up --reset --vaults 3); skipped"
  exit 0
fi
ctl() {  # ctl VAULT args...: vaultctl on VAULT's admin socket
  local v=$1; shift
  "$vaultctl" --vault "$dir/$v/data/vault.sock" "$@"
}
field() {  # field NAME < json: a top-level field of a JSON object ("" when absent or not JSON)
  python3 -c '
import json, sys
try:
    v = json.load(sys.stdin).get(sys.argv[1], "")
except (ValueError, AttributeError):
    v = ""
print(str(v).lower() if isinstance(v, bool) else v)' "$1"
}

enabled=$(ctl "$home" -o json status 2>/dev/null | field agents_enabled)
if [[ -z $enabled ]]; then
  echo "demo: $home does not answer on $dir/$home/data/vault.sock" >&2
  exit 1
fi
if [[ $enabled != true ]]; then
  echo "demo: skipped, agents are disabled on this machine: $(ctl "$home" -o json status | field agents_disabled_reason)"
  echo "      (the federation is up; docs/sandbox.md says what the sandbox needs)"
  exit 0
fi

demo="$dir/demo"
mkdir -p "$demo"
owner="$demo/owner.key"
[[ -f "$owner" ]] || "$vaultctl" key generate --out "$owner" >/dev/null
members=$(IFS=,; echo "${names[*]}")
remotes=("${names[@]:1}")

# The data: a shopping list at home; at each other vault a price list (each its own prices).
mkdir -p "$dir/$home/data/files/pub/mobile"
printf 'apples 3\nbread 1\nplums 2\n' > "$dir/$home/data/files/pub/mobile/list.txt"
for i in "${!remotes[@]}"; do
  v=${remotes[$i]}
  mkdir -p "$dir/$v/data/files/pub/mobile"
  printf 'apples %d\nbread %d\nplums %d\n' $((120 - 10 * i)) $((250 + 5 * i)) $((60 - 4 * i)) \
    > "$dir/$v/data/files/pub/mobile/prices.txt"
done
for v in "${names[@]}"; do
  ctl "$v" policy trust "$owner" --ceiling read:/vault/pub cas-write "migrate:$members" >/dev/null
done

# The agent's spec: the example's code, with the federation's vaults in its migrate grant and
# one hop per vault visited plus the way home.
cp "$root/sdk/python/examples/mobile.py" "$demo/mobile.py"
cat > "$demo/mobile.scm" <<SCM
(agent (purpose "quickstart: price vault-a's shopping list at every other vault, bring the report home")
       (code-file "mobile.py")
       (capabilities (read (path "/vault/pub/mobile")) (cas-write)
                     (migrate (vaults ${names[*]})))
       (constraints (max-runtime 120) (max-migrations $vaults)))
SCM
python3 -c 'import json,sys; print(json.dumps({"remotes": sys.argv[1:]}))' "${remotes[@]}" > "$demo/state.json"

id=$(ctl "$home" agent spawn "$demo/mobile.scm" --state "$demo/state.json" --as "$owner")
echo "$id" > "$demo/agent"
echo "demo: spawned mobile agent $id on $home; its journey (home -> ${remotes[*]} -> home):"

# Watch it: where it runs now, asked of the federation; one line per change.
last="" state="" deadline=$((SECONDS + timeout))
while (( SECONDS < deadline )); do
  if where=$(ctl "$home" -o json agent where "$id" 2>/dev/null); then
    vault=$(field vault <<<"$where") state=$(field state <<<"$where") hop=$(field hop <<<"$where")
    now="$vault $state $hop"
    if [[ $now != "$last" ]]; then
      printf '  hop %s  %-8s %s\n' "$hop" "$vault" "$state"
      last=$now
    fi
    case $state in completed|failed|terminated) break ;; esac
  fi
  sleep 0.2
done
status=$(ctl "$home" -o json agent status "$id" 2>/dev/null || true)
final=$(field state <<<"$status")
if [[ $final != completed ]]; then
  echo "demo: the agent did not come home with a report (state: ${final:-unknown} after ${timeout}s):" >&2
  ctl "$home" agent status "$id" >&2 || true
  ctl "$home" agent logs "$id" >&2 || true
  exit 1
fi
result=$(field result <<<"$status")
if [[ -z $result ]]; then
  echo "demo: the agent completed without a result" >&2
  exit 1
fi
ctl "$home" cas get "$result" --out "$demo/report.txt" >/dev/null
echo
echo "demo: home after $(field hop <<<"$status") hops; the report ($result in $home's CAS):"
sed 's/^/  /' "$demo/report.txt"
echo
# The hops are entries of the logs of the vaults it arrived at; vault-a sees them once its mirrors
# of those logs have caught up (a checkpoint interval or so).
hops=0
for _ in $(seq 1 100); do
  hops=$(ctl "$home" -o json agent journey "$id" 2>/dev/null |
         python3 -c 'import json,sys; print(len(json.load(sys.stdin)["hops"]))' 2>/dev/null || echo 0)
  [[ $hops -ge $vaults ]] && break
  sleep 0.2
done
echo "demo: its journey, from the audit logs of the vaults it visited (vaultctl agent journey $id):"
ctl "$home" agent journey "$id" | sed 's/^/  /'
