#!/usr/bin/env bash
# The engines the cluster tests run against, installed on this machine:
#   etcd      Debian's etcd-server (apt-get, as root), or any etcd on PATH
#   weed      SeaweedFS (an S3-protocol server), built from the Go module proxy at a pinned
#             version into a cache shared by every clone ($SHOAL_RIG_CACHE, default
#             ~/.cache/shoal-rig): the first build takes minutes, later runs reuse it.
#
#   tests/cluster/rig.sh install   install what is missing
#   tests/cluster/rig.sh env       print the exports the tests read (SHOAL_ETCD_BIN,
#                                  SHOAL_WEED_BIN); use as: eval "$(tests/cluster/rig.sh env)"
# The tests start their own servers on loopback (crates/cluster/tests/engines.rs).
set -euo pipefail

WEED_MODULE=github.com/seaweedfs/seaweedfs
WEED_VERSION=v0.0.0-20261109003541-7506e5f91cd6
cache="${SHOAL_RIG_CACHE:-$HOME/.cache/shoal-rig}"
weed="$cache/weed-$WEED_VERSION/weed"

install_etcd() {
  command -v etcd >/dev/null && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "rig.sh: installing etcd-server with apt-get" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null 2>&1 &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null 2>&1; }
  fi
  command -v etcd >/dev/null || { echo "rig.sh: install etcd (Debian: etcd-server)" >&2; exit 1; }
}

install_weed() {
  [ -x "$weed" ] && return 0
  command -v go >/dev/null || { echo "rig.sh: Go is needed to build SeaweedFS" >&2; exit 1; }
  echo "rig.sh: building SeaweedFS $WEED_VERSION (once per machine)" >&2
  # Its go.mod has replace directives, so `go install module@version` refuses it: build the
  # downloaded module as the main module instead, from a writable copy.
  src="$(go mod download -json "$WEED_MODULE@$WEED_VERSION" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' RETURN
  cp -r "$src" "$work/src"
  chmod -R u+w "$work/src"
  mkdir -p "$(dirname "$weed")"
  (cd "$work/src" && go build -o "$weed.tmp" ./weed)
  mv "$weed.tmp" "$weed"
}

case "${1:-}" in
  install)
    install_etcd
    install_weed
    ;;
  env)
    echo "export SHOAL_ETCD_BIN=$(command -v etcd || echo etcd)"
    echo "export SHOAL_WEED_BIN=$weed"
    ;;
  *)
    echo "usage: tests/cluster/rig.sh install|env" >&2
    exit 2
    ;;
esac
