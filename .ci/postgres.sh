#!/usr/bin/env bash
# A throwaway PostgreSQL server on loopback for the Postgres inbox tests
# (layers/inbox-postgres), from Debian's packages.
#
#   eval "$(bash .ci/postgres.sh)"        # start (or reuse) it; sets TOOLGATE_PG_URL and
#                                         # TOOLGATE_PG_TLS_URL
#   bash .ci/postgres.sh stop             # stop it (the data stays; `start` reuses it)
#   bash .ci/postgres.sh destroy          # stop it and delete its data
#   bash .ci/postgres.sh status           # exit 0 when it runs, printing the export line
#
# `start` (the default) installs PostgreSQL with `apt-get install -y postgresql` when no
# server binaries are found, creates a cluster under .tmp/pg (owned by the `postgres` user
# when run as root, since the server refuses to run as root; under /tmp when that user
# cannot reach the checkout), listening on 127.0.0.1 only on
# a free port with trust authentication and no Unix socket, starts it, creates the database
# `toolgate`, and prints `export TOOLGATE_PG_URL=postgres://postgres@127.0.0.1:PORT/toolgate`
# on standard output. Everything else goes to standard error, so the output can be `eval`ed.
# Running `start` again reuses a running cluster (or starts the stopped one again).
#
# TLS: the server also takes TLS (`ssl = on`; plain connections keep working) with a
# certificate for `localhost` and 127.0.0.1 signed by a test CA of its own, made with openssl
# under <cluster folder>/tls (kept; made again when missing or within a day of expiring).
# A second line, `export TOOLGATE_PG_TLS_URL=postgres://postgres@localhost:PORT/toolgate?
# sslmode=verify-full&sslrootcert=<cluster folder>/tls/ca.pem`, reaches it over TLS. A server
# left running without TLS by an older version of this script gets it on `start` (the
# settings are reloaded; the server restarts only when reloading does not turn TLS on).
#
# Environment: TOOLGATE_PG_DIR (default: <repo>/.tmp/pg), TOOLGATE_PG_DB (default:
# toolgate), TOOLGATE_PG_FAST=1 turns fsync off (faster tests; never for benchmarks whose
# figures claim durability).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DB="${TOOLGATE_PG_DB:-toolgate}"

say() { printf 'postgres.sh: %s\n' "$*" >&2; }
die() {
  say "error: $*"
  exit 1
}

# The cluster's folder. As root, the server runs as `postgres`, which must be able to reach
# it: when a parent of the checkout is closed to that user (a checkout under /root, say), a
# folder under /tmp named after the checkout is used instead (the same one every time).
pick_base() {
  if [ -n "${TOOLGATE_PG_DIR:-}" ]; then
    printf '%s\n' "$TOOLGATE_PG_DIR"
    return
  fi
  if [ "$(id -u)" -ne 0 ] || ! id postgres >/dev/null 2>&1; then
    printf '%s\n' "$ROOT/.tmp/pg"
    return
  fi
  mkdir -p "$ROOT/.tmp"
  if runuser -u postgres -- test -x "$ROOT/.tmp" 2>/dev/null; then
    printf '%s\n' "$ROOT/.tmp/pg"
  else
    printf '/tmp/toolgate-pg-%s\n' "$(printf '%s' "$ROOT" | md5sum | cut -c1-12)"
  fi
}
BASE="$(pick_base)"
DATA="$BASE/data"
LOG="$BASE/server.log"
PORT_FILE="$BASE/port"
TLS_DIR="$BASE/tls"

# The newest installed server's binaries (a client-only version does not count).
find_bin() {
  local d found=""
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V); do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ]; then
      found="$d"
    fi
  done
  printf '%s\n' "$found"
}

install_postgres() {
  [ "$(id -u)" -eq 0 ] || die "PostgreSQL is not installed and installing it needs root (apt-get install -y postgresql)"
  say "installing PostgreSQL from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  # Debian's package would start its own cluster on port 5432; we do not need it.
  apt-get update >&2
  apt-get install -y --no-install-recommends postgresql >&2
  BASE="$(pick_base)" # the `postgres` user exists now
  DATA="$BASE/data"
  LOG="$BASE/server.log"
  PORT_FILE="$BASE/port"
  TLS_DIR="$BASE/tls"
}

# Runs a command as the cluster's owner: `postgres` when we are root, ourselves otherwise.
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

port_free() {
  # A connection that succeeds means something listens there.
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

pick_port() {
  local p i
  for i in $(seq 1 200); do
    p=$((20000 + (RANDOM % 20000)))
    if port_free "$p"; then
      printf '%s\n' "$p"
      return 0
    fi
  done
  die "no free port on 127.0.0.1"
}

url() {
  printf 'postgres://postgres@127.0.0.1:%s/%s' "$(cat "$PORT_FILE")" "$DB"
}

# The same server over TLS, verified against the test CA (the name `localhost` is the
# certificate's). The root file's path is percent-encoded where a URL needs it.
tls_url() {
  local ca
  ca="$(printf '%s' "$TLS_DIR/ca.pem" | sed -e 's/%/%25/g' -e 's/ /%20/g' -e 's/&/%26/g' -e 's/#/%23/g' -e 's/?/%3F/g')"
  printf 'postgres://postgres@localhost:%s/%s?sslmode=verify-full&sslrootcert=%s' \
    "$(cat "$PORT_FILE")" "$DB" "$ca"
}

exports() {
  printf 'export TOOLGATE_PG_URL=%s\n' "$(url)"
  printf "export TOOLGATE_PG_TLS_URL='%s'\n" "$(tls_url)"
}

cert_fresh() {
  [ -s "$TLS_DIR/ca.pem" ] && [ -s "$TLS_DIR/server.key" ] &&
    openssl x509 -in "$TLS_DIR/server.crt" -noout -checkend 86400 >/dev/null 2>&1
}

# A test CA and a server certificate for localhost and 127.0.0.1 (ECDSA P-256, ten years),
# kept in $TLS_DIR; made again when missing or expiring within a day. The key is the
# server's own (mode 600, owned by the cluster's owner), as PostgreSQL requires.
make_certs() {
  if ! command -v openssl >/dev/null 2>&1; then
    [ "$(id -u)" -eq 0 ] || die "openssl is not installed and installing it needs root (apt-get install -y openssl)"
    say "installing openssl from Debian's packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update >&2
    apt-get install -y --no-install-recommends openssl >&2
  fi
  cert_fresh && return 0
  say "making a test CA and a server certificate for localhost in $TLS_DIR"
  rm -rf "$TLS_DIR"
  mkdir -p "$TLS_DIR"
  printf '%s\n' '[req]' 'distinguished_name = dn' 'prompt = no' 'x509_extensions = ca' \
    '[dn]' 'CN = toolgate test CA (.ci/postgres.sh)' \
    '[ca]' 'basicConstraints = critical, CA:TRUE' 'keyUsage = critical, keyCertSign, cRLSign' \
    'subjectKeyIdentifier = hash' >"$TLS_DIR/ca.cnf"
  printf '%s\n' 'basicConstraints = critical, CA:FALSE' 'keyUsage = critical, digitalSignature' \
    'extendedKeyUsage = serverAuth' 'subjectAltName = DNS:localhost, IP:127.0.0.1' \
    'subjectKeyIdentifier = hash' 'authorityKeyIdentifier = keyid' >"$TLS_DIR/server.cnf"
  (
    cd "$TLS_DIR"
    umask 077
    openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout ca.key -out ca.pem -days 3650 -config ca.cnf
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout server.key -out server.csr -subj "/CN=localhost"
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key \
      -set_serial "0x$(openssl rand -hex 8)" -days 3650 -extfile server.cnf -out server.crt
    openssl verify -CAfile ca.pem server.crt
  ) >&2 2>&1 || die "openssl could not make the test certificates in $TLS_DIR"
  # The CA certificate is public (tests read it as any user); the keys are not.
  chmod 755 "$TLS_DIR"
  chmod 644 "$TLS_DIR/ca.pem" "$TLS_DIR/server.crt"
  chmod 600 "$TLS_DIR/server.key" "$TLS_DIR/ca.key"
  if [ "$(id -u)" -eq 0 ]; then
    chown -R postgres: "$TLS_DIR"
  fi
}

tls_on() {
  [ "$(psql_admin -tA -c 'SHOW ssl')" = "on" ]
}

running() {
  [ -f "$DATA/PG_VERSION" ] && [ -f "$PORT_FILE" ] || return 1
  as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1 || return 1
  "$BIN/pg_isready" -q -h 127.0.0.1 -p "$(cat "$PORT_FILE")" -t 5
}

psql_admin() {
  "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$(cat "$PORT_FILE")" -U postgres -d postgres "$@"
}

ensure_database() {
  local exists
  exists="$(psql_admin -tA -c "SELECT 1 FROM pg_database WHERE datname = '$DB'")"
  if [ "$exists" != "1" ]; then
    say "creating database $DB"
    psql_admin -c "CREATE DATABASE \"$DB\" ENCODING 'UTF8' TEMPLATE template0"
  fi
}

init_cluster() {
  say "creating a cluster in $DATA"
  mkdir -p "$BASE"
  if [ "$(id -u)" -eq 0 ]; then
    chown postgres: "$BASE"
    chmod 700 "$BASE"
    as_owner test -w "$BASE" ||
      die "the postgres user cannot write to $BASE (a parent folder is closed to it); set TOOLGATE_PG_DIR to a folder it can reach"
  fi
  as_owner "$BIN/initdb" -D "$DATA" -U postgres -A trust -E UTF8 --no-locale --no-instructions >&2
}

configure() {
  local port="$1" fsync=on
  [ "${TOOLGATE_PG_FAST:-}" = "1" ] && fsync=off
  # postgresql.auto.conf is read last: these settings win.
  as_owner tee "$DATA/postgresql.auto.conf" >/dev/null <<EOF
# Written by .ci/postgres.sh: a throwaway server for tests, on loopback only.
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = ''
max_connections = 300
fsync = $fsync
log_min_messages = warning
ssl = on
ssl_cert_file = '$TLS_DIR/server.crt'
ssl_key_file = '$TLS_DIR/server.key'
EOF
  printf '%s\n' "$port" >"$PORT_FILE"
}

start() {
  BIN="$(find_bin)"
  if [ -z "$BIN" ]; then
    install_postgres
    BIN="$(find_bin)"
    [ -n "$BIN" ] || die "PostgreSQL was installed but no server binaries were found under /usr/lib/postgresql"
  fi
  if running; then
    say "reusing the server on 127.0.0.1:$(cat "$PORT_FILE") ($DATA)"
    if ! tls_on || ! cert_fresh; then
      # Left by an older run without TLS (or its certificate is expiring): the settings
      # are reloaded, which keeps the other tests' connections; a restart if that fails.
      make_certs
      configure "$(cat "$PORT_FILE")"
      say "turning TLS on (reloading the server's settings)"
      as_owner "$BIN/pg_ctl" -D "$DATA" reload >&2
      local i
      for i in $(seq 1 20); do
        tls_on && break
        sleep 0.5
      done
      if ! tls_on; then
        say "reloading did not turn TLS on; restarting the server"
        as_owner "$BIN/pg_ctl" -D "$DATA" -l "$LOG" -m fast -w -t 60 restart >&2
        tls_on || die "the server runs without TLS after a restart; see $LOG"
      fi
    fi
    ensure_database
    exports
    return 0
  fi
  [ -f "$DATA/PG_VERSION" ] || init_cluster
  make_certs
  local attempt port
  for attempt in 1 2 3; do
    port=""
    if [ -f "$PORT_FILE" ] && port_free "$(cat "$PORT_FILE")"; then
      port="$(cat "$PORT_FILE")"
    fi
    [ -n "$port" ] || port="$(pick_port)"
    configure "$port"
    say "starting PostgreSQL ($("$BIN/postgres" --version)) on 127.0.0.1:$port"
    if as_owner "$BIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 start >&2; then
      ensure_database
      tls_on || die "the server started without TLS; see $LOG"
      exports
      return 0
    fi
    say "the server did not start (attempt $attempt); its log:"
    tail -n 20 "$LOG" >&2 || true
    rm -f "$PORT_FILE"
  done
  die "PostgreSQL did not start; see $LOG"
}

stop() {
  BIN="$(find_bin)"
  if [ -z "$BIN" ] || [ ! -f "$DATA/PG_VERSION" ]; then
    say "no cluster in $DATA"
    return 0
  fi
  if as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w -t 60 stop >&2
  else
    say "the server in $DATA is not running"
  fi
}

status() {
  BIN="$(find_bin)"
  [ -n "$BIN" ] || die "PostgreSQL is not installed"
  if running; then
    exports
  else
    say "not running"
    return 1
  fi
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  destroy)
    stop
    rm -rf "$BASE"
    say "removed $BASE"
    ;;
  status) status ;;
  *) die "usage: $0 [start|stop|destroy|status]" ;;
esac
