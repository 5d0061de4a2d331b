#!/bin/sh
# scripts/fetch-libc.sh SUITE ARCH: fetch the real libc6 package of a
# Debian release, unpack it, and print the directory that holds its
# libc.so.6 and its loader (ld-linux-x86-64.so.2 / ld-linux-aarch64.so.1).
# scripts/fetch-libc.sh SUITE ARCH PACKAGE...: the same for other
# packages of that release and architecture (e.g. libibverbs-dev for a
# cross build), unpacked together into SUITE-ARCH-extra/root/, which is
# printed.
#
#   SUITE  one of the suites below; ARCH amd64 | arm64
#   MRMGR_LIBC_CACHE  where the unpacked trees live (default
#                     /var/cache/mrmgr-libc, or ~/.cache/mrmgr-libc when
#                     that cannot be created); SUITE-ARCH/ in it.
#   MRMGR_DEBIAN_MIRROR  the archive URL; by default the one the machine's
#                     own apt sources name for its own release.
# SUITE-ARCH/version holds the package version (e.g. 2.41-12+deb13u5),
# SUITE-ARCH/deb/ the .deb itself.
#
# The system's apt configuration is only read: the sources list, the
# package lists, apt's binary caches and the dpkg status apt sees are all
# private to SUITE-ARCH/, and the architecture is given per call, so no
# foreign architecture is added to dpkg. A second run finds the unpacked
# tree and fetches nothing. Other scripts (the libc matrix, the bullseye
# chroot) source nothing from here: they call it and use its output.
# Exit status: 0 and the directory on stdout; otherwise a message on
# stderr and non-zero (2: usage, 1: the fetch failed).
set -eu

# The suites the libc matrix knows, in one place (bookworm: the build
# host's own release, for packages a cross build links against).
suites="bullseye bookworm trixie sid"

die() { echo "fetch-libc: $*" >&2; exit 1; }
usage() { echo "usage: $0 SUITE ARCH [PACKAGE...] (SUITE: $suites; ARCH: amd64|arm64)" >&2; exit 2; }

[ $# -ge 2 ] || usage
suite=$1 arch=$2
shift 2
pkgs=${*:-libc6}
case " $suites " in *" $suite "*) ;; *) usage ;; esac
case $arch in
amd64) triplet=x86_64-linux-gnu loader=ld-linux-x86-64.so.2 ;;
arm64) triplet=aarch64-linux-gnu loader=ld-linux-aarch64.so.1 ;;
*) usage ;;
esac

cache=${MRMGR_LIBC_CACHE:-/var/cache/mrmgr-libc}
if ! mkdir -p "$cache" 2>/dev/null || [ ! -w "$cache" ]; then
	[ -z "${MRMGR_LIBC_CACHE:-}" ] || die "cannot write to $cache"
	cache=${XDG_CACHE_HOME:-$HOME/.cache}/mrmgr-libc
	mkdir -p "$cache"
fi
dir=$cache/$suite-$arch
[ "$pkgs" = libc6 ] || dir=$dir-extra

# The library directory of an unpacked libc6 (usr/lib/TRIPLET since the
# merged-/usr releases, lib/TRIPLET before: bullseye).
libdir_of() {
	for d in "$1/usr/lib/$triplet" "$1/lib/$triplet"; do
		if [ -e "$d/libc.so.6" ] && [ -e "$d/$loader" ]; then
			echo "$d"
			return 0
		fi
	done
	return 1
}

# What to print: the libc's directory, or the root of the extra packages.
result() {
	if [ "$pkgs" = libc6 ]; then
		libdir_of "$dir/root"
	else
		echo "$dir/root"
	fi
}

# Several CI steps may ask for the same libc at once.
exec 9>"$cache/.lock-$(basename "$dir")"
flock 9

# (An empty done file: libc6, fetched by the first version of this script.)
if [ -f "$dir/done" ] && { [ "$(cat "$dir/done")" = "$pkgs" ] ||
	{ [ "$pkgs" = libc6 ] && [ ! -s "$dir/done" ]; }; } && result; then
	exit 0
fi

# The mirror: the URI the machine's own sources give for its own release
# (its codename as a suite, not -security or -updates), read from both
# the one-line and the deb822 formats. Not written anywhere in the repo.
find_mirror() {
	codename=$( (. /etc/os-release && echo "${VERSION_CODENAME:-}") 2>/dev/null || true)
	[ -n "$codename" ] || return 1
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		# deb [opts] URI SUITE COMPONENTS...
		sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" |
			awk -v s="$codename" '$1 == "deb" && $3 == s { print $2; exit }'
	done | head -n 1 | grep . && return 0
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		# Stanzas separated by blank lines; keys are case-insensitive.
		awk -v s="$codename" '
			function flush() {
				if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " s " ") &&
				    enabled != "no" && uri != "") { print uri; found = 1; exit }
				types = ""; suites = ""; uri = ""; enabled = ""
			}
			/^[ \t]*#/ { next }
			/^[ \t]*$/ { flush(); next }
			{
				key = tolower($1); sub(/:$/, "", key)
				val = $0; sub(/^[^:]*:[ \t]*/, "", val)
				if (key == "types") types = val
				else if (key == "suites") suites = val
				else if (key == "uris") { split(val, u, " "); uri = u[1] }
				else if (key == "enabled") enabled = tolower(val)
			}
			END { if (!found) flush() }' "$f"
	done | head -n 1 | grep .
}

mirror=${MRMGR_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
	mirror=$(find_mirror) ||
		die "no Debian mirror found in /etc/apt/sources.list(.d) for this release; set MRMGR_DEBIAN_MIRROR"
fi
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -r "$keyring" ] || die "$keyring missing (package debian-archive-keyring)"

echo "fetch-libc: fetching $pkgs of $suite for $arch into $dir" >&2
rm -rf "$dir"
mkdir -p "$dir/apt/lists/partial" "$dir/apt/cache/archives/partial" "$dir/deb"
: >"$dir/apt/status"
# Only the Packages index of main, no translations or other targets.
echo "deb [arch=$arch lang=none target=Packages signed-by=$keyring] $mirror $suite main" \
	>"$dir/apt/sources.list"
apt_private() {
	apt-get -q \
		-o Dir::Etc::sourcelist="$dir/apt/sources.list" \
		-o Dir::Etc::sourceparts=- \
		-o Dir::State::Lists="$dir/apt/lists" \
		-o Dir::State::status="$dir/apt/status" \
		-o Dir::Cache="$dir/apt/cache" \
		-o Dir::Cache::archives="$dir/apt/cache/archives" \
		-o APT::Architecture="$arch" \
		-o APT::Architectures="$arch" \
		-o APT::Sandbox::User="$(id -un)" \
		"$@"
}
apt_private update >&2 || die "apt-get update for $suite/$arch failed"
# shellcheck disable=SC2046 # one word per package
(cd "$dir/deb" && apt_private download $(for p in $pkgs; do echo "$p:$arch"; done)) >&2 ||
	die "apt-get download $pkgs ($suite, $arch) failed"
for deb in "$dir"/deb/*.deb; do
	[ -f "$deb" ] || die "nothing downloaded for $suite/$arch"
	dpkg-deb -x "$deb" "$dir/root"
done
if [ "$pkgs" = libc6 ]; then
	deb=$(ls "$dir"/deb/libc6_*_"$arch".deb 2>/dev/null | head -n 1)
	[ -n "$deb" ] || die "no libc6 .deb downloaded for $suite/$arch"
	dpkg-deb -f "$deb" Version >"$dir/version"
	libdir_of "$dir/root" >/dev/null || die "no libc.so.6 and $loader in $deb"
fi
# The index is only needed to find the packages: keep the cache small.
rm -rf "$dir/apt/lists" "$dir/apt/cache"
echo "$pkgs" >"$dir/done"
result
