#!/bin/sh
# The link step of programs that start often (CMake RULE_LAUNCH_LINK through vault_link_static()
# in the top CMakeLists.txt, option VAULT_STATIC_LINK): runs the link command it is given with
# every shared library that has a static archive beside it (libX.so[.N] -> libX.a, -lX -> libX.a)
# replaced by that archive, all of them in one group, so the program carries gRPC, Protobuf,
# Abseil, OpenSSL and the rest in itself. glibc, libstdc++ and libraries without an archive stay
# shared. Why: with dozens of shared libraries the dynamic loader's symbol lookups dominate a
# short process's start. `vaultctl status` went from ~17 to 7.5 ms of CPU; an agent built with
# the C++ SDK (33 shared libraries) from 5.7 ms of CPU to start to under 1 ms, which is most of
# what a spawn costs.
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
