#!/bin/sh
# Prints the Secrets and the member list the vault StatefulSet needs, as YAML for kubectl apply:
#   vault-keys (Secret)       vault-N.key, each vault's Ed25519 signing key
#   vault-tls (Secret)        vault-N.crt, vault-N.key, issued by the federation CA; ca.crt
#   vault-members (ConfigMap) members: vault-N=vault-N.SERVICE:7701=ed25519:HEX, one per line
#
#   deploy/k8s/make-secrets.sh [--ca-dir DIR] [--replicas N] [--service NAME] [--port P] \
#       | kubectl apply -f -
#
# The federation CA stays outside the cluster, in --ca-dir (default ./vault-federation-ca),
# created there when absent (vaultctl federation create-ca). Keys are made in a private
# temporary directory, removed afterwards. vaultctl is taken from $VAULTCTL or PATH.
set -eu
VAULTCTL=${VAULTCTL:-vaultctl}
ca_dir=./vault-federation-ca replicas=3 service=vault port=7701
while [ $# -gt 0 ]; do
  case "$1" in
    --ca-dir) ca_dir=$2; shift ;;
    --replicas) replicas=$2; shift ;;
    --service) service=$2; shift ;;
    --port) port=$2; shift ;;
    -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "make-secrets: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
case "$replicas" in '' | *[!0-9]*) echo "make-secrets: --replicas must be a number" >&2; exit 2 ;; esac

[ -f "$ca_dir/ca.crt" ] ||
  "$VAULTCTL" federation create-ca --dir "$ca_dir" --name "$service-federation" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 700 "$work"

indent() { sed 's/^/    /'; }

members=""
i=0
while [ "$i" -lt "$replicas" ]; do
  name="$service-$i"
  "$VAULTCTL" key generate --out "$work/$name.key" >/dev/null
  "$VAULTCTL" federation issue-cert --ca "$ca_dir" --name "$name" --out "$work/tls" >/dev/null
  key=$("$VAULTCTL" key show "$work/$name.key" | head -n 1)
  members="$members$name=$name.$service:$port=$key
"
  i=$((i + 1))
done

echo "apiVersion: v1"
echo "kind: Secret"
echo "metadata:"
echo "  name: $service-keys"
echo "type: Opaque"
echo "stringData:"
i=0
while [ "$i" -lt "$replicas" ]; do
  echo "  $service-$i.key: |"
  indent <"$work/$service-$i.key"
  i=$((i + 1))
done
echo "---"
echo "apiVersion: v1"
echo "kind: Secret"
echo "metadata:"
echo "  name: $service-tls"
echo "type: Opaque"
echo "stringData:"
echo "  ca.crt: |"
indent <"$ca_dir/ca.crt"
i=0
while [ "$i" -lt "$replicas" ]; do
  echo "  $service-$i.crt: |"
  indent <"$work/tls/$service-$i.crt"
  echo "  $service-$i.key: |"
  indent <"$work/tls/$service-$i.key"
  i=$((i + 1))
done
echo "---"
echo "apiVersion: v1"
echo "kind: ConfigMap"
echo "metadata:"
echo "  name: $service-members"
echo "data:"
echo "  members: |"
printf '%s' "$members" | indent
