#!/bin/sh
# The vault image's entrypoint: creates the vault on first start, keeps its member list in step
# with the environment, checks the config, then execs vaultd. See docs/deployment.md.
#
#   entrypoint.sh [vaultd] [VAULTD FLAGS...]   create if needed, then exec vaultd (the default)
#   entrypoint.sh init                         create if needed and add members, then exit
#                                              (a Kubernetes init container)
#   entrypoint.sh COMMAND ...                  exec COMMAND (e.g. vaultctl status)
#
# Environment (only VAULT_NAME is needed, and only to create the vault):
#   VAULT_NAME             the vault's name ([a-z0-9-], its TLS identity)
#   VAULT_DIR              where the vault lives (default /var/lib/vault/node; its parent must
#                          be writable: the vault is built beside it and renamed into place)
#   VAULT_ADVERTISE        host:port the members reach it at (default $VAULT_NAME:7701); written
#                          into the config as listen_address and as its own member address
#   VAULT_LISTEN           host:port vaultd binds (vaultd --listen; default 0.0.0.0:7701;
#                          empty: the config's listen_address)
#   VAULT_CA_DIR           federation CA directory (ca.crt, ca.key) to issue its certificate
#                          from (vaultctl init --ca); without it and without VAULT_TLS_* the
#                          vault gets a CA of its own (a federation of one)
#   VAULT_TLS_CERT_FILE, VAULT_TLS_KEY_FILE, VAULT_TLS_CA_FILE
#                          TLS material issued elsewhere (vaultctl federation issue-cert), used
#                          instead of issuing: all three or none
#   VAULT_KEY_FILE         the vault's Ed25519 signing key (PKCS#8 PEM) instead of a new one
#   VAULT_MEMBERS          members known in advance: NAME=HOST:PORT=ed25519:HEX, separated by
#                          spaces, commas or newlines (the vault's own entry is skipped)
#   VAULT_FEDERATION_DIR   a directory shared by the federation's vaults: this vault publishes
#                          its config (no secrets: paths and public keys) as members/NAME.conf
#   VAULT_PEERS            names whose members/NAME.conf to wait for there and add as members
#   VAULT_PEER_WAIT_SECONDS  how long to wait for each peer (default 300)
#   VAULTCTL, VAULTD       the binaries (default: vaultctl and vaultd on PATH)
set -eu

VAULTCTL=${VAULTCTL:-vaultctl}
VAULTD=${VAULTD:-vaultd}
VAULT_DIR=${VAULT_DIR:-/var/lib/vault/node}
VAULT_LISTEN=${VAULT_LISTEN-0.0.0.0:7701}
conf="$VAULT_DIR/vault.conf"

log() { echo "entrypoint: $*" >&2; }
die() {
  log "$*"
  exit 1
}

# Copies $1 to $2 with mode 0600: vault and vaultctl refuse keys that group or other may read.
copy_private() {
  rm -f "$2"
  (umask 077 && cp "$1" "$2") || die "cannot copy $1"
  chmod 600 "$2"
}

principal_of() { "$VAULTCTL" key show "$1" | head -n 1; }

# Builds the vault in $VAULT_DIR.entrypoint (vaultctl init, then the material given in the
# environment) and renames it into place: a failure leaves no half-made vault behind.
create_vault() {
  [ -n "${VAULT_NAME:-}" ] || die "VAULT_NAME is required to create a vault in $VAULT_DIR"
  advertise=${VAULT_ADVERTISE:-$VAULT_NAME:7701}
  work="$VAULT_DIR.entrypoint"
  rm -rf "$work"
  mkdir -p "$(dirname "$VAULT_DIR")"
  if [ -n "${VAULT_CA_DIR:-}" ]; then
    "$VAULTCTL" init --name "$VAULT_NAME" --dir "$work" --listen "$advertise" \
      --ca "$VAULT_CA_DIR" >&2
  else
    "$VAULTCTL" init --name "$VAULT_NAME" --dir "$work" --listen "$advertise" >&2
  fi
  if [ -n "${VAULT_KEY_FILE:-}" ]; then
    copy_private "$VAULT_KEY_FILE" "$work/vault.key.new"
    old=$(principal_of "$work/vault.key")
    new=$(principal_of "$work/vault.key.new")
    [ -n "$old" ] && [ -n "$new" ] || die "cannot read the key $VAULT_KEY_FILE"
    mv "$work/vault.key.new" "$work/vault.key"
    sed "s|public_key: \"$old\"|public_key: \"$new\"|" "$work/vault.conf" >"$work/vault.conf.new"
    grep -q "public_key: \"$new\"" "$work/vault.conf.new" || die "cannot set the key in vault.conf"
    chmod 600 "$work/vault.conf.new"
    mv "$work/vault.conf.new" "$work/vault.conf"
    log "signing key from $VAULT_KEY_FILE: $new"
  fi
  if [ -n "${VAULT_TLS_CERT_FILE:-}${VAULT_TLS_KEY_FILE:-}${VAULT_TLS_CA_FILE:-}" ]; then
    [ -n "${VAULT_TLS_CERT_FILE:-}" ] && [ -n "${VAULT_TLS_KEY_FILE:-}" ] &&
      [ -n "${VAULT_TLS_CA_FILE:-}" ] ||
      die "VAULT_TLS_CERT_FILE, VAULT_TLS_KEY_FILE and VAULT_TLS_CA_FILE go together"
    copy_private "$VAULT_TLS_KEY_FILE" "$work/tls/vault.key"
    cp "$VAULT_TLS_CERT_FILE" "$work/tls/vault.crt"
    cp "$VAULT_TLS_CA_FILE" "$work/tls/ca.crt"
    chmod 644 "$work/tls/vault.crt" "$work/tls/ca.crt"
    # The CA init made for a federation of one is not this federation's: drop it.
    [ -n "${VAULT_CA_DIR:-}" ] || rm -rf "$work/ca"
    log "TLS material from $VAULT_TLS_CERT_FILE"
  fi
  [ ! -d "$VAULT_DIR" ] || rmdir "$VAULT_DIR" 2>/dev/null ||
    die "$VAULT_DIR exists without a vault.conf and is not empty; refusing to touch it"
  mv "$work" "$VAULT_DIR"
  log "created vault $VAULT_NAME in $VAULT_DIR (members reach it at $advertise)"
}

add_members() {
  self=$(sed -n 's/^name: "\(.*\)"$/\1/p' "$conf")
  [ -n "$self" ] || die "$conf names no vault"
  for m in $(printf '%s\n' "${VAULT_MEMBERS:-}" | tr ',' ' '); do
    name=${m%%=*}
    rest=${m#*=}
    addr=${rest%%=*}
    key=${rest#*=}
    [ -n "$name" ] && [ "$rest" != "$m" ] && [ "$key" != "$rest" ] && [ -n "$addr" ] ||
      die "VAULT_MEMBERS: \"$m\" is not NAME=HOST:PORT=ed25519:HEX"
    [ "$name" = "$self" ] && continue
    "$VAULTCTL" federation add-member --config "$conf" --name "$name" --address "$addr" \
      --public-key "$key" >/dev/null
  done
  [ -n "${VAULT_FEDERATION_DIR:-}" ] || return 0
  mkdir -p "$VAULT_FEDERATION_DIR/members"
  cp "$conf" "$VAULT_FEDERATION_DIR/members/.$self.conf.tmp"
  chmod 644 "$VAULT_FEDERATION_DIR/members/.$self.conf.tmp"
  mv "$VAULT_FEDERATION_DIR/members/.$self.conf.tmp" "$VAULT_FEDERATION_DIR/members/$self.conf"
  for peer in $(printf '%s\n' "${VAULT_PEERS:-}" | tr ',' ' '); do
    [ "$peer" = "$self" ] && continue
    peer_conf="$VAULT_FEDERATION_DIR/members/$peer.conf"
    waited=0
    while [ ! -f "$peer_conf" ]; do
      [ "$waited" -lt "${VAULT_PEER_WAIT_SECONDS:-300}" ] ||
        die "member $peer did not publish $peer_conf within ${VAULT_PEER_WAIT_SECONDS:-300} s"
      [ "$waited" -gt 0 ] || log "waiting for member $peer to publish $peer_conf"
      sleep 1
      waited=$((waited + 1))
    done
    "$VAULTCTL" federation add-member --config "$conf" --peer-config "$peer_conf" >/dev/null
  done
}

prepare() {
  [ -f "$conf" ] || create_vault
  add_members
  "$VAULTD" --config "$conf" --check-config >&2
}

case "${1:-vaultd}" in
  init)
    prepare
    ;;
  vaultd | -*)
    [ "${1:-vaultd}" != vaultd ] || [ $# -eq 0 ] || shift
    prepare
    if [ -n "$VAULT_LISTEN" ]; then
      exec "$VAULTD" --config "$conf" --listen "$VAULT_LISTEN" "$@"
    fi
    exec "$VAULTD" --config "$conf" "$@"
    ;;
  *)
    exec "$@"
    ;;
esac
