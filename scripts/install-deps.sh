#!/usr/bin/env bash
# Installs the Debian 12 packages iofiber needs to build, test and benchmark.
# Idempotent: checks each package with dpkg-query and installs only the
# missing ones (one apt-get update + one apt-get install). Silent when
# everything is already installed. Needs root, or sudo.
#   scripts/install-deps.sh          build and test packages
#   scripts/install-deps.sh --bench  + the benchmark's peers and tools
#                                    (libuv, State Threads, wrk, gnuplot);
#                                    no test needs them
set -euo pipefail

PACKAGES=(
  build-essential
  cmake
  pkg-config
  libboost-context-dev
  libev-dev
  libcmocka-dev
  valgrind
  gdb
  curl
  redis-server
  redis-tools
  libhiredis-dev
  postgresql
  libpq-dev
  memcached
  libmemcached-dev
  mariadb-server-core
  mariadb-client-core
  libmariadb-dev
  libsqlite3-dev
  netcat-openbsd
  unbound
  python3
  libcurl4-openssl-dev
  lmdb-utils
  tinyproxy-bin
  microsocks
  stunnel4
  privoxy
  libmemcached-tools
  civetweb
  apache2-utils
  openssl
  nginx
  haproxy
  apache2-bin
  lighttpd
  slapd
  ldap-utils
  bind9
  bind9-dnsutils
  pdns-recursor
  mosquitto
  mosquitto-clients
  python3-zmq
  python3-grpcio
  ruby
)
if [[ "${1:-}" == "--bench" ]]; then
  PACKAGES+=(libuv1-dev libst-dev wrk gnuplot-nox)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: apt-get not found; install these packages by hand: ${missing[*]}" >&2
  exit 1
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo -n)
    # Fall back to an interactive sudo only when a terminal is attached.
    if ! sudo -n true 2>/dev/null && [[ -t 0 ]]; then
      SUDO=(sudo)
    fi
  else
    echo "install-deps: not root and sudo is not available; install: ${missing[*]}" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
# Servers among the packages (nginx, slapd, named...) must not start as
# system services: the tests start their own, on free ports. Where no
# policy says so already (a Docker image has one), one is in place for
# the install only.
POLICY=/usr/sbin/policy-rc.d
if [[ ! -e "$POLICY" ]]; then
  printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$POLICY" >/dev/null
  "${SUDO[@]}" chmod 755 "$POLICY"
  trap '"${SUDO[@]}" rm -f "$POLICY"' EXIT
fi
echo "install-deps: installing ${missing[*]}"
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
