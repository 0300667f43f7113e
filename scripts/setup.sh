#!/usr/bin/env bash
# Installs what the tests need on a Debian machine, as root, with apt-get
# when missing: redis-server, PostgreSQL, ZooKeeper, MariaDB, etcd, openssl,
# OpenSSL's headers, and protoc with protobuf's well-known protos.
# scripts/test.sh sources it first (and uses its `pg_bin`); CI runs it before
# it starts the lints beside the tests.
set -euo pipefail

# redis-server for every Redis test, redis-cli to form the test clusters,
# openssl to make the TLS tests' certificates, OpenSSL's headers and
# pkg-config to build the tls-native-tls feature.
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
pkg-config --exists openssl 2>/dev/null || missing+=(libssl-dev)
# PostgreSQL's server for the PostgreSQL store's tests (Debian puts its
# programs in /usr/lib/postgresql/VERSION/bin, off PATH).
pg_bin() {
  if command -v initdb >/dev/null 2>&1; then dirname "$(readlink -f "$(command -v initdb)")"; return; fi
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}
[ -x "$(pg_bin)/initdb" ] || missing+=(postgresql)
# ZooKeeper (Debian's package, on the machine's Java) for the ZooKeeper
# store's tests.
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
# MariaDB's server and client for the MySQL store's tests (lockguard-mysql).
{ [ -x /usr/sbin/mariadbd ] || command -v mariadbd >/dev/null 2>&1; } || missing+=(mariadb-server)
# etcd (Debian's etcd-server, 3.4 on bookworm) for the etcd store's tests
# (lockguard-etcd), and protoc with protobuf's well-known protos, which the
# etcd-client crate's build script compiles its protos with.
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
[ -f /usr/include/google/protobuf/empty.proto ] || missing+=(libprotobuf-dev)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]} with apt-get" >&2
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "error: the tests need ${missing[*]}; install them (apt-get install ${missing[*]}) and retry" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
redis-server --version
"$(pg_bin)/postgres" --version
mariadbd --version 2>/dev/null || /usr/sbin/mariadbd --version
echo "zookeeper $(dpkg-query -W -f '${Version}' zookeeper 2>/dev/null || echo '(version unknown)')"
# The first line, `etcd Version: 3.4.23` (sed reads the rest: no SIGPIPE).
etcd --version | sed -n 1p
protoc --version
