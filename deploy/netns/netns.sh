#!/usr/bin/env bash
# A private network of N "hosts" on one Linux machine, for testing a federation of vaults as if
# each ran on its own host: every host is a network namespace of its own with one interface
# (eth0) and one private IPv4 address, plugged by a veth pair into a Linux bridge that lives in a
# "switch" namespace of its own. Nothing is created in, or changed of, the machine's own network:
# no interface, address, route or rule outside the namespaces this script makes.
#
#   netns.sh up    --name NAME --hosts N|H1,H2,... [--subnet 10.X.Y.0/24]
#   netns.sh down  --name NAME [--kill]
#   netns.sh exec  --name NAME HOST CMD [ARG...]
#   netns.sh cut   --name NAME HOST
#   netns.sh heal  --name NAME HOST
#   netns.sh netem --name NAME HOST delay 50ms [loss 5%] ...   |   netem --name NAME HOST clear
#   netns.sh addr  --name NAME HOST
#   netns.sh status --name NAME
#   netns.sh list
#
#   up      create the topology NAME: namespaces vnet.NAME.switch (the bridge) and vnet.NAME.HOST
#           for each host; hosts are h1..hN (--hosts N) or the names given (lowercase letters,
#           digits, '_' and '-', at most 12 characters); host i gets the i-th address of the
#           subnet (default 10.213.0.0/24: .1, .2, ...). Prints "HOST ADDRESS" per host.
#           Refuses (exit 4) when NAME, or any namespace it would create, exists already.
#   down    delete every namespace NAME's `up` created (recorded under /run/vault-netns/NAME):
#           the bridge and the veth pairs go with them. Safe to run again, and after a failed
#           `up`. A process still running in a host namespace keeps it alive until it exits:
#           down names those pids; with --kill it sends them SIGTERM (then SIGKILL after 5 s).
#   exec    run CMD in HOST's network namespace only (nsenter --net): unlike `ip netns exec`,
#           mounts are untouched, so /sys/fs/cgroup stays visible (vaultd's agent sandbox needs
#           it). The script execs, so CMD keeps the script's pid.
#   cut     unplug HOST's cable: its switch port goes down. Frames to and from HOST are dropped
#           silently (as with a pulled cable; connections time out, nothing is refused). HOST's
#           own interface and address stay as they are.
#   heal    plug it back in (idempotent, as is cut).
#   netem   tc netem on HOST's link, both directions (HOST's eth0 and its switch port), so a
#           round trip through HOST gains twice the delay. "clear" removes it. Exit 6 when the
#           kernel has no netem (sch_netem): nothing is changed then.
#   addr    print HOST's address.
#   status  each host: address, link (up / cut) and queueing discipline.
#   list    the topologies that exist (one NAME a line).
#
# NAME: letters, digits, '_' and '-', at most 32 characters; make it unique per run (tests use
# their pid and a random suffix) so runs in parallel never share a namespace.
# Exit codes: 0 ok, 1 failure, 2 usage, 3 no such topology or host, 4 exists already,
# 5 not root or no network namespaces here, 6 netem not available in this kernel.
set -euo pipefail

readonly STATE_ROOT=${VAULT_NETNS_STATE_DIR:-/run/vault-netns}
readonly NETNS_DIR=/run/netns
readonly DEFAULT_SUBNET=10.213.0.0/24

EXIT_FAILURE=1 EXIT_USAGE=2 EXIT_NOT_FOUND=3 EXIT_EXISTS=4 EXIT_UNSUPPORTED=5 EXIT_NO_NETEM=6

die() {  # die CODE MESSAGE...
  local code=$1
  shift
  echo "netns: $*" >&2
  exit "$code"
}

usage() { awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; }

run() {  # runs a command; on failure says which and exits 1
  local err
  if ! err=$("$@" 2>&1); then
    die "$EXIT_FAILURE" "'$*' failed: $err"
  fi
}

need_root() {
  [[ $(id -u) -eq 0 ]] || die "$EXIT_UNSUPPORTED" "must run as root (network namespaces)"
  command -v ip >/dev/null || die "$EXIT_UNSUPPORTED" "ip (iproute2) is not installed"
  command -v nsenter >/dev/null || die "$EXIT_UNSUPPORTED" "nsenter (util-linux) is not installed"
}

valid_name() { [[ $1 =~ ^[A-Za-z0-9_-]{1,32}$ ]]; }
valid_host() { [[ $1 =~ ^[a-z0-9_-]{1,12}$ && $1 != switch ]]; }

# The namespaces and interfaces of a topology. '.' never occurs in a NAME or a HOST, so the
# namespaces of two topologies can never have the same name.
switch_ns() { echo "vnet.$1.switch"; }
host_ns() { echo "vnet.$1.$2"; }
port_of() { echo "p-$1"; }  # HOST's port on the bridge (in the switch namespace)
# The bridge, named after the topology (a hash: interface names have at most 15 characters).
bridge_of() { echo "vbr$(printf '%s' "$1" | sha256sum | cut -c1-8)"; }

# --- IPv4 arithmetic ------------------------------------------------------------------------
ip_to_int() {
  local IFS=. a b c d
  read -r a b c d <<<"$1"
  echo $(((a << 24) | (b << 16) | (c << 8) | d))
}
int_to_ip() { echo "$((($1 >> 24) & 255)).$((($1 >> 16) & 255)).$((($1 >> 8) & 255)).$(($1 & 255))"; }

# Checks SUBNET (a.b.c.d/len, 16 <= len <= 29, inside 10/8, 172.16/12 or 192.168/16, the
# network address itself) and prints "NETWORK_INT LEN".
parse_subnet() {
  local subnet=$1 addr len octet
  [[ $subnet =~ ^([0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3})/([0-9]{1,2})$ ]] ||
    die "$EXIT_USAGE" "--subnet $subnet: expected a.b.c.d/len"
  addr=${BASH_REMATCH[1]} len=${BASH_REMATCH[2]}
  for octet in ${addr//./ }; do
    ((10#$octet <= 255)) || die "$EXIT_USAGE" "--subnet $subnet: not an IPv4 address"
  done
  ((len >= 16 && len <= 29)) || die "$EXIT_USAGE" "--subnet $subnet: the length must be 16..29"
  local n mask
  n=$(ip_to_int "$addr")
  mask=$(((0xffffffff << (32 - len)) & 0xffffffff))
  ((n & ~mask & 0xffffffff)) && die "$EXIT_USAGE" "--subnet $subnet: host bits are set"
  if ! (((n & 0xff000000) == 0x0a000000 || (n & 0xfff00000) == 0xac100000 ||
    (n & 0xffff0000) == 0xc0a80000)); then
    die "$EXIT_USAGE" "--subnet $subnet: only private addresses (10/8, 172.16/12, 192.168/16)"
  fi
  echo "$n $len"
}

# --- state ----------------------------------------------------------------------------------
# /run/vault-netns/NAME/: subnet (a.b.c.d/len), hosts ("HOST ADDRESS/LEN" a line, in order),
# namespaces (one a line: each written right after `ip netns add` made it, so down removes
# exactly what up made, even after a failed up).
state_dir() { echo "$STATE_ROOT/$1"; }

need_topology() {
  [[ -d $(state_dir "$1") ]] || die "$EXIT_NOT_FOUND" "no topology named $1 (see: netns.sh list)"
}

host_line() {  # prints "HOST ADDRESS/LEN" of HOST in NAME, or exits 3
  local name=$1 host=$2 line
  need_topology "$name"
  while read -r line; do
    [[ ${line%% *} == "$host" ]] && { echo "$line"; return 0; }
  done <"$(state_dir "$name")/hosts"
  die "$EXIT_NOT_FOUND" "topology $name has no host $host (hosts: $(cut -d' ' -f1 \
    "$(state_dir "$name")/hosts" | tr '\n' ' '))"
}

add_ns() {  # add_ns NAME NS: creates NS and records it
  local err
  if ! err=$(ip netns add "$2" 2>&1); then
    [[ -e $NETNS_DIR/$2 ]] && die "$EXIT_EXISTS" "namespace $2 exists already (not made by this run)"
    [[ $err == *"not permitted"* || $err == *"ermission denied"* ]] &&
      die "$EXIT_UNSUPPORTED" "network namespaces cannot be made here: $err"
    die "$EXIT_FAILURE" "ip netns add $2 failed: $err"
  fi
  echo "$2" >>"$(state_dir "$1")/namespaces"
}

# --- commands -------------------------------------------------------------------------------
cmd_up() {
  local name=$1 hosts_arg=$2 subnet=$3
  local -a hosts=()
  if [[ $hosts_arg =~ ^[0-9]+$ ]]; then
    ((hosts_arg >= 1 && hosts_arg <= 250)) || die "$EXIT_USAGE" "--hosts must be 1..250"
    for ((i = 1; i <= hosts_arg; i++)); do hosts+=("h$i"); done
  else
    IFS=, read -r -a hosts <<<"$hosts_arg"
    ((${#hosts[@]} >= 1)) || die "$EXIT_USAGE" "--hosts: no host named"
    local h seen=" "
    for h in "${hosts[@]}"; do
      valid_host "$h" || die "$EXIT_USAGE" "host name '$h': 1..12 of [a-z0-9_-], not 'switch'"
      [[ $seen == *" $h "* ]] && die "$EXIT_USAGE" "host $h is named twice"
      seen+="$h "
    done
  fi
  local parsed net len
  parsed=$(parse_subnet "$subnet")
  read -r net len <<<"$parsed"
  ((${#hosts[@]} <= (1 << (32 - len)) - 2)) ||
    die "$EXIT_USAGE" "--subnet $subnet has room for $(((1 << (32 - len)) - 2)) hosts, not ${#hosts[@]}"
  need_root
  ip netns list >/dev/null 2>&1 || die "$EXIT_UNSUPPORTED" "ip netns does not work here"

  mkdir -p "$STATE_ROOT"
  local dir
  dir=$(state_dir "$name")
  mkdir "$dir" 2>/dev/null || die "$EXIT_EXISTS" "topology $name exists already (netns.sh down --name $name)"
  # From here on, a failure removes what was made.
  # shellcheck disable=SC2064  # NAME is expanded now (it is checked: no quotes, no spaces)
  trap "if ((\$? != 0)); then cmd_down '$name' 0 >/dev/null 2>&1 || true; fi" EXIT
  echo "$subnet" >"$dir/subnet"
  : >"$dir/namespaces"
  : >"$dir/hosts"

  local sw br
  sw=$(switch_ns "$name")
  br=$(bridge_of "$name")
  add_ns "$name" "$sw"
  run ip -n "$sw" link add "$br" type bridge
  run ip -n "$sw" link set "$br" up
  local i=0 h ns port addr
  for h in "${hosts[@]}"; do
    i=$((i + 1))
    ns=$(host_ns "$name" "$h")
    port=$(port_of "$h")
    addr=$(int_to_ip $((net + i)))
    add_ns "$name" "$ns"
    # Both ends are made inside namespaces of ours: the machine's own namespace never sees them.
    run ip -n "$sw" link add "$port" type veth peer name eth0 netns "$ns"
    run ip -n "$sw" link set "$port" master "$br"
    run ip -n "$sw" link set "$port" up
    run ip -n "$ns" link set lo up
    run ip -n "$ns" addr add "$addr/$len" dev eth0
    run ip -n "$ns" link set eth0 up
    echo "$h $addr/$len" >>"$dir/hosts"
  done
  trap - EXIT
  local cidr
  while read -r h cidr; do echo "$h ${cidr%/*}"; done <"$dir/hosts"
}

cmd_down() {
  local name=$1 kill=$2 dir ns pids left=0
  dir=$(state_dir "$name")
  [[ -d $dir ]] || return 0
  if [[ -f $dir/namespaces ]]; then
    # Hosts first, the switch last (tac: reverse order of creation).
    while read -r ns; do
      [[ -n $ns && -e $NETNS_DIR/$ns ]] || continue
      pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ' || true)
      if [[ -n ${pids// /} ]]; then
        if ((kill)); then
          # shellcheck disable=SC2086
          kill -TERM $pids 2>/dev/null || true
          for _ in $(seq 1 50); do
            [[ -z $(ip netns pids "$ns" 2>/dev/null) ]] && break
            sleep 0.1
          done
          pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ' || true)
          if [[ -n ${pids// /} ]]; then
            # shellcheck disable=SC2086
            kill -KILL $pids 2>/dev/null || true
          fi
        else
          echo "netns: processes still run in $ns (pids ${pids% }): it lives on until they" \
            "exit (down --kill ends them)" >&2
          left=1
        fi
      fi
      ip netns delete "$ns" 2>/dev/null || [[ ! -e $NETNS_DIR/$ns ]] ||
        die "$EXIT_FAILURE" "ip netns delete $ns failed"
    done < <(tac "$dir/namespaces")
  fi
  rm -rf "$dir"
  ((left == 0)) || echo "netns: topology $name removed (some namespaces live on in processes)" >&2
  return 0
}

cmd_exec() {
  local name=$1 host=$2
  shift 2
  (($# > 0)) || die "$EXIT_USAGE" "exec: no command"
  host_line "$name" "$host" >/dev/null
  local ns
  ns=$(host_ns "$name" "$host")
  [[ -e $NETNS_DIR/$ns ]] || die "$EXIT_NOT_FOUND" "namespace $ns is gone"
  exec nsenter --net="$NETNS_DIR/$ns" -- "$@"
}

cmd_link() {  # cmd_link NAME HOST up|down
  host_line "$1" "$2" >/dev/null
  run ip -n "$(switch_ns "$1")" link set "$(port_of "$2")" "$3"
}

cmd_netem() {
  local name=$1 host=$2
  shift 2
  (($# > 0)) || die "$EXIT_USAGE" "netem: say what (e.g. delay 50ms loss 5%), or clear"
  host_line "$name" "$host" >/dev/null
  local ns sw port
  ns=$(host_ns "$name" "$host")
  sw=$(switch_ns "$name")
  port=$(port_of "$host")
  command -v tc >/dev/null || die "$EXIT_UNSUPPORTED" "tc (iproute2) is not installed"
  if [[ $1 == clear ]]; then
    tc -n "$ns" qdisc del dev eth0 root 2>/dev/null || true
    tc -n "$sw" qdisc del dev "$port" root 2>/dev/null || true
    return 0
  fi
  local err
  if ! err=$(tc -n "$ns" qdisc replace dev eth0 root netem "$@" 2>&1); then
    if [[ $err == *"qdisc kind is unknown"* ]]; then
      die "$EXIT_NO_NETEM" "this kernel has no netem (sch_netem is not built in or loadable:" \
        "'$err'): delay, loss and rate cannot be emulated here; cut and heal still work"
    fi
    die "$EXIT_FAILURE" "tc netem $* on $host: $err"
  fi
  if ! err=$(tc -n "$sw" qdisc replace dev "$port" root netem "$@" 2>&1); then
    tc -n "$ns" qdisc del dev eth0 root 2>/dev/null || true
    die "$EXIT_FAILURE" "tc netem $* on $host's switch port: $err"
  fi
}

cmd_status() {
  local name=$1 h cidr ns state qdisc
  need_topology "$name"
  echo "topology $name  subnet $(cat "$(state_dir "$name")/subnet")  bridge $(bridge_of "$name")" \
    "in $(switch_ns "$name")"
  while read -r h cidr; do
    ns=$(host_ns "$name" "$h")
    state="cut"
    ip -n "$(switch_ns "$name")" -o link show "$(port_of "$h")" 2>/dev/null |
      grep -q '[<,]UP[,>]' && state=up
    qdisc=$(tc -n "$ns" qdisc show dev eth0 2>/dev/null | head -1 | cut -d' ' -f2)
    echo "$h  ${cidr%/*}  link $state  qdisc ${qdisc:-?}  netns $ns"
  done <"$(state_dir "$name")/hosts"
}

cmd_list() {
  [[ -d $STATE_ROOT ]] || return 0
  local d
  for d in "$STATE_ROOT"/*/; do
    [[ -d $d ]] && basename "$d"
  done
  return 0
}

# --- arguments ------------------------------------------------------------------------------
main() {
  (($# > 0)) || { usage >&2; exit "$EXIT_USAGE"; }
  local cmd=$1
  shift
  case $cmd in
    -h | --help | help) usage; exit 0 ;;
    up | down | exec | cut | heal | netem | addr | status | list) ;;
    *) die "$EXIT_USAGE" "unknown command '$cmd' (see --help)" ;;
  esac
  local name="" hosts_arg="" subnet=$DEFAULT_SUBNET kill=0
  local -a rest=()
  while (($# > 0)); do
    case $1 in
      --name) (($# >= 2)) || die "$EXIT_USAGE" "--name needs a value"; name=$2; shift 2 ;;
      --hosts) (($# >= 2)) || die "$EXIT_USAGE" "--hosts needs a value"; hosts_arg=$2; shift 2 ;;
      --subnet) (($# >= 2)) || die "$EXIT_USAGE" "--subnet needs a value"; subnet=$2; shift 2 ;;
      --kill) kill=1; shift ;;
      -h | --help) usage; exit 0 ;;
      *) rest=("$@"); break ;;  # HOST and, for exec/netem, what follows it, verbatim
    esac
  done
  if [[ $cmd == list ]]; then
    cmd_list
    return
  fi
  [[ -n $name ]] || die "$EXIT_USAGE" "$cmd: --name NAME is required"
  valid_name "$name" || die "$EXIT_USAGE" "--name '$name': 1..32 of [A-Za-z0-9_-]"
  case $cmd in
    up)
      [[ -n $hosts_arg ]] || die "$EXIT_USAGE" "up: --hosts N or --hosts H1,H2,... is required"
      ((${#rest[@]} == 0)) || die "$EXIT_USAGE" "up: unexpected '${rest[*]}'"
      cmd_up "$name" "$hosts_arg" "$subnet"
      ;;
    down)
      ((${#rest[@]} == 0)) || die "$EXIT_USAGE" "down: unexpected '${rest[*]}'"
      need_root
      cmd_down "$name" "$kill"
      ;;
    status)
      ((${#rest[@]} == 0)) || die "$EXIT_USAGE" "status: unexpected '${rest[*]}'"
      cmd_status "$name"
      ;;
    *)
      ((${#rest[@]} >= 1)) || die "$EXIT_USAGE" "$cmd: HOST is required"
      local host=${rest[0]}
      valid_host "$host" || die "$EXIT_USAGE" "host name '$host' is not valid"
      case $cmd in
        exec) need_root; cmd_exec "$name" "$host" "${rest[@]:1}" ;;
        cut | heal)
          ((${#rest[@]} == 1)) || die "$EXIT_USAGE" "$cmd: unexpected '${rest[*]:1}'"
          need_root
          if [[ $cmd == cut ]]; then cmd_link "$name" "$host" down; else cmd_link "$name" "$host" up; fi
          ;;
        netem) need_root; cmd_netem "$name" "$host" "${rest[@]:1}" ;;
        addr)
          ((${#rest[@]} == 1)) || die "$EXIT_USAGE" "addr: unexpected '${rest[*]:1}'"
          local line
          line=$(host_line "$name" "$host")
          line=${line#* }
          echo "${line%/*}"
          ;;
      esac
      ;;
  esac
}

main "$@"
