#!/usr/bin/env bash
# Entrypoint of Tusk's local postgres:NN images. It follows the contract of the
# official postgres image (written anew for this project):
#
#   - `postgres ...` (or only flags) with an empty $PGDATA: initdb, honouring
#     POSTGRES_USER (default postgres), POSTGRES_PASSWORD, POSTGRES_DB (default
#     $POSTGRES_USER), POSTGRES_HOST_AUTH_METHOD (default scram-sha-256),
#     POSTGRES_INITDB_ARGS, POSTGRES_INITDB_WALDIR; every variable may be given
#     as VAR_FILE instead. Scripts in /docker-entrypoint-initdb.d (*.sh, *.sql,
#     *.sql.gz) run once against a socket-only server. Then exec postgres.
#   - started as root: fix ownership of the data and socket dirs and re-exec as
#     the postgres user.
#   - anything else: exec'd as is.
set -Eeuo pipefail

log() { printf '%s [entrypoint] %s\n' "$(date -u '+%Y-%m-%d %H:%M:%S UTC')" "$*" >&2; }
fail() { log "error: $*"; exit 1; }

# file_env VAR [DEFAULT]: VAR from $VAR or from the file named by $VAR_FILE.
file_env() {
	local var=$1 def=${2:-} fvar="${1}_FILE" val
	if [ -n "${!var:-}" ] && [ -n "${!fvar:-}" ]; then
		fail "both $var and $fvar are set (but they are exclusive)"
	fi
	val=$def
	if [ -n "${!var:-}" ]; then
		val=${!var}
	elif [ -n "${!fvar:-}" ]; then
		val=$(<"${!fvar}")
	fi
	export "$var=$val"
	unset "$fvar"
}

# Did the caller only ask postgres for help, its version or a setting?
wants_info() {
	local a
	for a; do
		case $a in
		-'?' | --help | --describe-config | -V | --version | -C | --config=* | -C*) return 0 ;;
		esac
	done
	return 1
}

setup_env() {
	file_env POSTGRES_PASSWORD
	file_env POSTGRES_USER postgres
	file_env POSTGRES_DB "$POSTGRES_USER"
	file_env POSTGRES_INITDB_ARGS
	: "${POSTGRES_HOST_AUTH_METHOD:=}"
	: "${POSTGRES_INITDB_WALDIR:=}"
	: "${PGDATA:?PGDATA must be set}"
	DATABASE_EXISTS=
	[ -s "$PGDATA/PG_VERSION" ] && DATABASE_EXISTS=1
	return 0
}

create_dirs() {
	mkdir -p "$PGDATA"
	chmod 00700 "$PGDATA" 2>/dev/null || true
	mkdir -p /var/run/postgresql
	chmod 03775 /var/run/postgresql 2>/dev/null || true
	if [ -n "$POSTGRES_INITDB_WALDIR" ]; then
		mkdir -p "$POSTGRES_INITDB_WALDIR"
	fi
	if [ "$(id -u)" = 0 ]; then
		find "$PGDATA" \! -user postgres -exec chown postgres: '{}' +
		find /var/run/postgresql \! -user postgres -exec chown postgres: '{}' +
		if [ -n "$POSTGRES_INITDB_WALDIR" ]; then
			find "$POSTGRES_INITDB_WALDIR" \! -user postgres -exec chown postgres: '{}' +
		fi
	fi
}

# initdb needs the running uid to have a passwd entry; for an arbitrary uid
# (OpenShift style) fake one with nss_wrapper when it is installed.
fake_passwd() {
	getent passwd "$(id -u)" >/dev/null && return 0
	local lib
	for lib in /usr/lib/*/libnss_wrapper.so /usr/lib/libnss_wrapper.so; do
		[ -e "$lib" ] || continue
		NSS_WRAPPER_PASSWD=$(mktemp) NSS_WRAPPER_GROUP=$(mktemp)
		export NSS_WRAPPER_PASSWD NSS_WRAPPER_GROUP LD_PRELOAD=$lib
		printf 'postgres:x:%s:%s:PostgreSQL:%s:/bin/false\n' "$(id -u)" "$(id -g)" "$PGDATA" >"$NSS_WRAPPER_PASSWD"
		printf 'postgres:x:%s:\n' "$(id -g)" >"$NSS_WRAPPER_GROUP"
		return 0
	done
	log "warning: uid $(id -u) has no passwd entry and nss_wrapper is missing; initdb may fail"
}

unfake_passwd() {
	if [ -n "${NSS_WRAPPER_PASSWD:-}" ]; then
		rm -f "$NSS_WRAPPER_PASSWD" "$NSS_WRAPPER_GROUP"
		unset NSS_WRAPPER_PASSWD NSS_WRAPPER_GROUP LD_PRELOAD
	fi
}

check_auth() {
	if [ -z "$POSTGRES_PASSWORD" ] && [ "$POSTGRES_HOST_AUTH_METHOD" != trust ]; then
		fail "the database is uninitialized and no superuser password is set.
  Set POSTGRES_PASSWORD (or POSTGRES_PASSWORD_FILE) to a non-empty value, or set
  POSTGRES_HOST_AUTH_METHOD=trust to allow every connection without a password
  (never do that outside a test)."
	fi
	if [ "$POSTGRES_HOST_AUTH_METHOD" = trust ]; then
		log "warning: POSTGRES_HOST_AUTH_METHOD=trust: anyone who can reach the server can connect as any user"
	fi
	: "${POSTGRES_HOST_AUTH_METHOD:=scram-sha-256}"
}

init_db() {
	local args=()
	[ -n "$POSTGRES_INITDB_WALDIR" ] && args+=(--waldir "$POSTGRES_INITDB_WALDIR")
	fake_passwd
	# POSTGRES_INITDB_ARGS is a shell-quoted string, as in the official image.
	eval 'initdb --username="$POSTGRES_USER" --pwfile=<(printf "%s\n" "$POSTGRES_PASSWORD") '"$POSTGRES_INITDB_ARGS"' "${args[@]}"'
	unfake_passwd
	{
		echo
		echo "# added by docker-entrypoint.sh (POSTGRES_HOST_AUTH_METHOD)"
		echo "host all all all $POSTGRES_HOST_AUTH_METHOD"
	} >>"$PGDATA/pg_hba.conf"
}

psql_init() {
	psql -v ON_ERROR_STOP=1 --no-psqlrc --no-password --username "$POSTGRES_USER" "$@"
}

run_init_scripts() {
	local f
	for f in /docker-entrypoint-initdb.d/*; do
		[ -e "$f" ] || continue
		case $f in
		*.sh)
			if [ -x "$f" ]; then
				log "running $f"
				"$f"
			else
				log "sourcing $f"
				# shellcheck disable=SC1090
				. "$f"
			fi
			;;
		*.sql) log "running $f"; psql_init --dbname "$POSTGRES_DB" -f "$f" ;;
		*.sql.gz) log "running $f"; gunzip -c "$f" | psql_init --dbname "$POSTGRES_DB" ;;
		*) log "ignoring $f" ;;
		esac
	done
}

setup_db() {
	# a server on the socket only, for the setup steps
	PGUSER=$POSTGRES_USER PGPASSWORD=$POSTGRES_PASSWORD \
		pg_ctl -D "$PGDATA" -w -o "-c listen_addresses='' -p ${PGPORT:-5432}" start >/dev/null
	if [ "$POSTGRES_DB" != postgres ]; then
		local exists
		exists=$(psql_init --dbname postgres -tA --set db="$POSTGRES_DB" \
			<<<"SELECT 1 FROM pg_database WHERE datname = :'db'")
		if [ -z "$exists" ]; then
			psql_init --dbname postgres --set db="$POSTGRES_DB" <<<'CREATE DATABASE :"db";' >/dev/null
			log "created database $POSTGRES_DB"
		fi
	fi
	run_init_scripts
	pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
}

main() {
	[ $# -gt 0 ] || set -- postgres
	if [ "${1:0:1}" = - ]; then
		set -- postgres "$@"
	fi
	if [ "$1" != postgres ] || wants_info "$@"; then
		exec "$@"
	fi

	setup_env
	create_dirs
	if [ "$(id -u)" = 0 ]; then
		# restart this script as the postgres user
		exec setpriv --reuid=postgres --regid=postgres --init-groups "${BASH_SOURCE[0]}" "$@"
	fi

	if [ -z "$DATABASE_EXISTS" ]; then
		check_auth
		log "initializing a new database in $PGDATA"
		init_db
		setup_db
		log "initialization done; starting postgres"
	else
		log "$PGDATA holds a database already; skipping initialization"
	fi
	exec "$@"
}

main "$@"
