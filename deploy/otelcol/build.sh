#!/usr/bin/env bash
# Builds the tailcause OpenTelemetry Collector distribution described by
# builder-config.yaml and prints the binary's path on stdout (progress goes to
# stderr).
#
#   deploy/otelcol/build.sh            # build unless the cached binary is current
#   deploy/otelcol/build.sh --path     # print where the binary goes, build nothing
#   deploy/otelcol/build.sh --force    # rebuild
#
# The builder (ocb) is installed with `go install` into the cache, the
# generated sources (their own go.mod, never committed: they are regenerated
# from the manifest) go to $cache/src/_build, and the binary to
# $cache/bin/otelcol-tailcause with a stamp holding the hash of the manifest,
# the builder version, BUILD_REV and the Go version: when the stamp matches,
# nothing is built.
# $cache is ${TAILCAUSE_CACHE:-$HOME/.cache/tailcause}/otelcol. Concurrent
# runs wait for each other on a lock.
set -euo pipefail

BUILDER_VERSION=0.165.0 # core release; contrib modules are at v0.165.1
# Bump when the build steps below change what they produce.
BUILD_REV=1

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
manifest="$here/builder-config.yaml"
cache="${TAILCAUSE_CACHE:-${HOME:-/root}/.cache/tailcause}/otelcol"
bin="$cache/bin/otelcol-tailcause"
stamp="$bin.sha256"

force=0
case "${1:-}" in
"") ;;
--path)
	echo "$bin"
	exit 0
	;;
--force) force=1 ;;
*)
	echo "usage: $0 [--path|--force]" >&2
	exit 2
	;;
esac

command -v go >/dev/null || export PATH="$PATH:/usr/local/go/bin"
hash="$({ cat "$manifest"; echo "builder=$BUILDER_VERSION rev=$BUILD_REV"; go version; } | sha256sum | cut -d' ' -f1)"

current() { [[ -x "$bin" && -f "$stamp" && "$(cat "$stamp")" == "$hash" ]]; }

if ((!force)) && current; then
	echo "otelcol: $bin is current (manifest hash ${hash:0:12})" >&2
	echo "$bin"
	exit 0
fi

mkdir -p "$cache/bin" "$cache/src" "$cache/tools"
exec 9>"$cache/.lock"
if ! flock -n 9; then
	echo "otelcol: another build is running; waiting for it" >&2
	flock 9
fi
# The build we waited for may have produced what we want.
if ((!force)) && current; then
	echo "$bin"
	exit 0
fi

builder="$cache/tools/builder-v$BUILDER_VERSION/builder"
if [[ ! -x "$builder" ]]; then
	echo "otelcol: installing go.opentelemetry.io/collector/cmd/builder@v$BUILDER_VERSION" >&2
	GOBIN="$(dirname "$builder")" go install "go.opentelemetry.io/collector/cmd/builder@v$BUILDER_VERSION" >&2
fi

start=$SECONDS
echo "otelcol: building $(basename "$bin") from $manifest (the first build downloads and compiles a few hundred modules: minutes)" >&2
rm -rf "$cache/src/_build"
# output_path in the manifest is relative to the working directory.
nice_cmd=()
command -v nice >/dev/null && nice_cmd=(nice -n 5)
(cd "$cache/src" && "${nice_cmd[@]}" "$builder" --config "$manifest" --ldflags="-s -w" >&2)
built="$cache/src/_build/otelcol-tailcause"
[[ -x "$built" ]] || {
	echo "otelcol: the builder produced no $built" >&2
	exit 1
}
"$built" --version >&2
cp "$built" "$bin.tmp.$$"
mv -f "$bin.tmp.$$" "$bin"
echo "$hash" >"$stamp"
echo "otelcol: built $bin in $((SECONDS - start)) s" >&2
echo "$bin"
