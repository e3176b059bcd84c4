#!/bin/sh
# make-image.sh: an OCI image layout, as a tar, whose root is one program and what it loads.
#
#   sdk/cpp/make-image.sh OUT.tar PROGRAM NAME
#
# The image holds PROGRAM as /bin/agent (0755, owned by root), its entrypoint, and the shared
# libraries it loads (as ldd lists them, at the same paths: the C library and the dynamic
# loader of this machine's Debian); NAME is the name
# `vaultctl image import OUT.tar` gives it (org.opencontainers.image.ref.name). The same PROGRAM
# always makes the same bytes (sorted entries, time 0, numeric owners), so the same image id.
# Needs GNU tar and coreutils only: the image is built here, never pulled.
set -eu
if [ $# -ne 3 ]; then
  echo "usage: $0 OUT.tar PROGRAM NAME" >&2
  exit 2
fi
out=$1 program=$2 name=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tarflags="--sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=posix
  --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime"

mkdir -p "$work/root/bin" "$work/layout/blobs/sha256"
cp "$program" "$work/root/bin/agent"
for lib in $(ldd "$program" 2>/dev/null | grep -o '/[^ ]*' || true); do
  mkdir -p "$work/root$(dirname "$lib")"
  cp -L "$lib" "$work/root$lib"
done
chmod -R u=rwX,go=rX "$work/root"
# shellcheck disable=SC2086
tar $tarflags -C "$work/root" -cf "$work/layer.tar" .
blob() {  # blob FILE -> prints its digest hex, after storing it under blobs/sha256
  hex=$(sha256sum "$1" | cut -d' ' -f1)
  cp "$1" "$work/layout/blobs/sha256/$hex"
  echo "$hex"
}
size() { stat -c %s "$1"; }
layer=$(blob "$work/layer.tar")
printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/bin/agent"],"Env":["PATH=/bin"],"WorkingDir":"/work"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
  "$layer" > "$work/config.json"
config=$(blob "$work/config.json")
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
  "$config" "$(size "$work/config.json")" "$layer" "$(size "$work/layer.tar")" > "$work/manifest.json"
manifest=$(blob "$work/manifest.json")
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"org.opencontainers.image.ref.name":"%s"}}]}' \
  "$manifest" "$(size "$work/manifest.json")" "$name" > "$work/layout/index.json"
printf '{"imageLayoutVersion":"1.0.0"}' > "$work/layout/oci-layout"
# shellcheck disable=SC2086
tar $tarflags -C "$work/layout" -cf "$out.tmp" oci-layout index.json blobs
mv "$out.tmp" "$out"
