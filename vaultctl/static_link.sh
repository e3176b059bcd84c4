#!/bin/sh
# vaultctl's link step (CMake RULE_LAUNCH_LINK, VAULT_STATIC_VAULTCTL): runs the link command it
# is given with every shared library that has a static archive beside it (libX.so[.N] -> libX.a,
# -lX -> libX.a) replaced by that archive, all of them in one group, so vaultctl carries gRPC,
# Protobuf, Abseil, OpenSSL and the rest in itself. A vaultctl process is short-lived: with ~60
# shared libraries the dynamic loader's symbol lookups took about half of its start (~6 ms of
# CPU of `vaultctl status`'s ~17). glibc, libstdc++ and libraries without an archive stay shared.
#
#   static_link.sh /usr/bin/c++ <flags> main.cc.o -o vaultctl <libraries...>
set -eu
libdir=/usr/lib/$("$1" -print-multiarch 2>/dev/null || true)
[ -d "$libdir" ] || libdir=/usr/lib
first=1
grouped=0
for arg in "$@"; do
  if [ "$first" = 1 ]; then
    set --
    first=0
  fi
  case "$arg" in
    *.a | *.so | *.so.* | -l*)
      # Archives refer to each other in any order: one group resolves them all.
      if [ "$grouped" = 0 ]; then
        set -- "$@" -Wl,--start-group
        grouped=1
      fi
      ;;
  esac
  case "$arg" in
    *.so | *.so.*)
      archive=$(printf '%s\n' "$arg" | sed -E 's/\.so(\.[0-9.]+)?$/.a/')
      [ -f "$archive" ] && arg=$archive
      ;;
    -l*)
      name=${arg#-l}
      case "$name" in
        pthread | dl | m | rt | c | atomic | stdc++ | gcc_s) ;;
        *) [ -f "$libdir/lib$name.a" ] && arg=$libdir/lib$name.a ;;
      esac
      ;;
  esac
  set -- "$@" "$arg"
done
[ "$grouped" = 1 ] && set -- "$@" -Wl,--end-group
exec "$@"
