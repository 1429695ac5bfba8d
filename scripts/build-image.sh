#!/usr/bin/env bash
# build-image.sh BUILD OUT: the sbx container image (issue 19), from Debian
# packages and this build only, written as an OCI archive OUT that
# `podman load`, `skopeo copy oci-archive:OUT docker://REGISTRY/sbx` or
# containerd (`ctr images import`) take.
#
#   1. a minimal Debian 12 root (mmdebstrap, variant essential: no apt)
#      with only what sbx needs at run time: its shared libraries, python3
#      (sessions' default script type), passt and nftables (network_mode
#      "open"), bubblewrap (that backend), tini (PID 1: reaps, forwards
#      SIGTERM for the drain) and CA certificates.  Cached as
#      BUILD/image/base-<hash of the package list>.tar: reruns skip it.
#   2. `make install` of BUILD (prefix /usr/local) into a staging dir.
#   3. buildah: an image from scratch with 1 and 2, user sbx (10001), the
#      entrypoint tini -> sbxd, port 7433; committed as an OCI archive.
#
# Needs root, mmdebstrap and buildah (scripts/bootstrap-deps.sh --image).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/build-image.sh BUILD OUT.tar}
out=${2:?usage: scripts/build-image.sh BUILD OUT.tar}
suite=${SBX_IMAGE_SUITE:-bookworm}
mirror=${SBX_IMAGE_MIRROR:-http://deb.debian.org/debian}
tag=${SBX_IMAGE_TAG:-localhost/sbx:latest}

# What sbxd, sbxlua and the sandboxes use at run time (ldd of build/bin/*
# and libcurl, which sbx.remote loads through the FFI).
packages=(
	libseccomp2 libcap2 libmsgpackc2 libh2o-evloop0.13 libssl3 libjansson4
	libluajit-5.1-2 libnghttp2-14 libwslay1 zlib1g libcurl4 libedit2
	python3 passt nftables bubblewrap tini ca-certificates
)
list=$(printf '%s\n' "$suite" "$mirror" "${packages[@]}" | sort)
hash=$(printf '%s' "$list" | sha256sum | cut -c1-12)
mkdir -p "$build/image"
base=$build/image/base-$hash.tar

t0=$(date +%s)
if [[ ! -s $base ]]; then
	echo "build-image: building the base root ($suite, ${#packages[@]} packages) into $base"
	# The non-root user the image runs as (the userns backend needs no
	# root), its home the state dir; no passwd tool in variant essential.
	mmdebstrap --variant=essential --format=tar --include="$(
		IFS=,
		echo "${packages[*]}"
	)" \
		--customize-hook='echo "sbx:x:10001:10001:sbx:/var/lib/sbx:/usr/sbin/nologin" >> "$1/etc/passwd"' \
		--customize-hook='echo "sbx:x:10001:" >> "$1/etc/group"' \
		--customize-hook='mkdir -p "$1/var/lib/sbx" "$1/etc/sbx" && chown 10001:10001 "$1/var/lib/sbx"' \
		--customize-hook='rm -rf "$1/usr/share/doc" "$1/usr/share/man" "$1/usr/share/info" "$1/var/cache/apt" "$1/var/lib/apt/lists"' \
		"$suite" "$base.part" "$mirror"
	mv "$base.part" "$base"
fi
t1=$(date +%s)

stage=$(mktemp -d "$build/image/stage.XXXXXX")
ctr=
cleanup() {
	[[ -n $ctr ]] && buildah rm "$ctr" >/dev/null 2>&1 || true
	rm -rf "$stage"
}
trap cleanup EXIT
make --no-print-directory install BUILD="$build" DESTDIR="$stage" PREFIX=/usr/local >/dev/null

ctr=$(buildah from scratch)
buildah add --quiet "$ctr" "$base" / >/dev/null
buildah add --quiet "$ctr" "$stage" / >/dev/null
buildah config \
	--user 10001:10001 \
	--workingdir /var/lib/sbx \
	--env HOME=/var/lib/sbx \
	--port 7433 \
	--entrypoint '["/usr/bin/tini", "--", "/usr/local/bin/sbxd"]' \
	--cmd '[]' \
	--label org.opencontainers.image.title=sbx \
	--label org.opencontainers.image.description="sbx: a Lua-scriptable Linux sandbox host (sbxd)" \
	"$ctr"
rm -f "$out"
buildah commit --quiet --format oci --rm "$ctr" "oci-archive:$out:$tag" >/dev/null
ctr=
t2=$(date +%s)
echo "build-image: $out ($tag, $(du -h "$out" | cut -f1)): base $((t1 - t0)) s, image $((t2 - t1)) s"
