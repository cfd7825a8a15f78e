#!/usr/bin/env bash
# Copies the reference Apache Kafka runtime jars (see pom.xml) from Maven
# Central into a cache dir outside the repo, default ~/.cache/shoal/kafka-libs
# (override with KAFKA_LIBS_DIR). Prints the libs dir on stdout.
# The broker is then run by tests/interop/conftest.py as
#   java -cp '<libs>/*' kafka.tools.StorageTool format --cluster-id=<id> -c server.properties --standalone
#   java -cp '<libs>/*' kafka.Kafka server.properties
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${KAFKA_LIBS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/shoal/kafka-libs}"
stamp="$out/.fetched-$(sha256sum "$here/pom.xml" | cut -c1-16)"

need() {  # need CMD DEBIAN_PACKAGE
  command -v "$1" >/dev/null && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "fetch.sh: installing $2 with apt-get" >&2
    { apt-get install -y -qq "$2" || { apt-get update -qq && apt-get install -y -qq "$2"; }; } >/dev/null 2>&1
  fi
  command -v "$1" >/dev/null || { echo "fetch.sh: '$1' not found (install $2)" >&2; exit 1; }
}

need java openjdk-17-jdk-headless
need javac openjdk-17-jdk-headless
if [ ! -f "$stamp" ]; then
  need mvn maven
  rm -rf "$out"
  mkdir -p "$out"
  mvn -q -B -f "$here/pom.xml" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$out" >&2
  touch "$stamp"
fi
echo "$out"
