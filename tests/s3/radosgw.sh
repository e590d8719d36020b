#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# A real S3 server on loopback for the tests: a one-node Ceph cluster (one monitor, one OSD on
# memstore, pool size 1, no cephx between daemons) with radosgw's beast frontend on 127.0.0.1.
# It verifies SigV4 for real (wrong secret -> 403 SignatureDoesNotMatch, wrong payload hash ->
# 400 XAmzContentSHA256Mismatch, wrong Content-MD5 -> 400 BadDigest).
#
#   S3_STATE=/tmp/x bash tests/s3/radosgw.sh start   start mon, osd, rgw; create a user and a
#                                                    bucket; print the environment (as `env`)
#   S3_STATE=/tmp/x bash tests/s3/radosgw.sh env     print the environment, one VAR=value a line:
#        AWS_ENDPOINT_URL_S3  http://127.0.0.1:PORT     (plain HTTP)
#        S3_HTTPS_ENDPOINT    https://127.0.0.1:PORT    (TLS, self-signed; CA in S3_CA_BUNDLE)
#        AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, S3_BUCKET, S3_STATE
#   S3_STATE=/tmp/x bash tests/s3/radosgw.sh stop    stop exactly the PIDs that `start` started
#                                                    (recorded in $S3_STATE/pids), then remove
#                                                    the state folder
#
# S3_STATE is required: the folder holds the config, the monitor store, logs and the pid list.
# Everything listens on 127.0.0.1 only; ports are picked free at random.
# Needs: radosgw ceph-mon ceph-osd ceph-common (scripts/install-deps.sh), python3-boto3.
set -euo pipefail

: "${S3_STATE:?set S3_STATE to a scratch folder for the cluster state}"
STATE=$S3_STATE
CONF=$STATE/ceph.conf
PIDS=$STATE/pids
ENVF=$STATE/env
BUCKET=${S3_BUCKET:-aiprof-test}

die() { echo "radosgw.sh: $*" >&2; exit 1; }

free_port() {
	/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Starts "$@" in the background with its output in $STATE/<name>.out and records its PID.
spawn() {
	local name=$1; shift
	"$@" </dev/null >"$STATE/$name.out" 2>&1 &
	echo "$! $name" >>"$PIDS"
}

# Waits until command "$@" succeeds, polling every 0.1 s for up to $1 seconds.
wait_for() {
	local deadline=$((SECONDS + $1)); shift
	while :; do
		"$@" >/dev/null 2>&1 && return 0
		[ "$SECONDS" -lt "$deadline" ] || return 1
		sleep 0.1
	done
}

ceph_() { timeout 20 ceph -c "$CONF" --connect-timeout 15 "$@"; }

# ceph_ for a command that may be repeated (the same answer twice), tried up to 5 times: a
# client can ask a monitor that has just come up before it holds the monitor map, and is
# refused (mon.log "handle_command on fsid 00000000-... != <ours>", the CLI "Error EPERM:
# problem getting command descriptions from mon."). The last try's stderr is kept.
ceph_again() {
	local i out
	for i in 1 2 3 4 5; do
		out=$(ceph_ "$@" 2>"$STATE/ceph_again.err") && { printf '%s\n' "$out"; return 0; }
		sleep 0.5
	done
	cat "$STATE/ceph_again.err" >&2
	return 1
}

dump_logs() {
	local f
	for f in "$STATE"/*.out "$STATE"/*.log; do
		[ -f "$f" ] || continue
		echo "--- $f (last lines)" >&2
		tail -n 15 "$f" >&2
	done
}

# True if PID is still the process we started: its command line names our config file.
ours() {
	local pid=$1
	[ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$CONF"
}

do_stop() {
	[ -f "$PIDS" ] || { rm -rf "$STATE"; return 0; }
	local pid name
	# rgw first, then osd, then mon: the reverse of the start order
	while read -r pid name; do
		ours "$pid" && kill -TERM "$pid" 2>/dev/null || true
	done < <(tac "$PIDS")
	for ((i = 0; i < 50; i++)); do
		local alive=0
		while read -r pid name; do ours "$pid" && alive=1; done <"$PIDS"
		[ "$alive" = 0 ] && break
		sleep 0.1
	done
	while read -r pid name; do
		ours "$pid" && kill -KILL "$pid" 2>/dev/null || true
	done <"$PIDS"
	# until each is gone (a zombie's command line is empty: init reaps it)
	for ((i = 0; i < 50; i++)); do
		local left=0
		while read -r pid name; do ours "$pid" && left=1; done <"$PIDS"
		[ "$left" = 0 ] && break
		sleep 0.1
	done
	[ "${S3_KEEP_STATE:-0}" = 1 ] || rm -rf "$STATE"
}

do_env() {
	[ -f "$ENVF" ] || die "not started (no $ENVF)"
	cat "$ENVF"
}

do_start() {
	for b in ceph-mon ceph-osd radosgw radosgw-admin ceph monmaptool ceph-authtool openssl; do
		command -v "$b" >/dev/null || die "$b not found: apt-get install radosgw ceph-mon ceph-osd ceph-common openssl"
	done
	[ ! -f "$PIDS" ] || die "$STATE already has a running cluster (stop it first)"
	mkdir -p "$STATE/mon" "$STATE/osd" "$STATE/run"
	: >"$PIDS"
	trap 'rc=$?; if [ $rc -ne 0 ]; then dump_logs; do_stop; fi' EXIT

	local fsid mon_port rgw_port ssl_port osd_uuid
	fsid=$(cat /proc/sys/kernel/random/uuid)
	osd_uuid=$(cat /proc/sys/kernel/random/uuid)
	mon_port=$(free_port)
	rgw_port=$(free_port)
	ssl_port=$(free_port)

	# A self-signed certificate for 127.0.0.1 and localhost, for the TLS endpoint.
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=aiprof-test-ca" \
		-addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
		-keyout "$STATE/tls.key" -out "$STATE/tls.crt" >/dev/null 2>&1 || die "openssl req failed"

	cat >"$CONF" <<EOF
[global]
fsid = $fsid
mon host = v1:127.0.0.1:$mon_port
public addr = 127.0.0.1
ms bind ipv6 = false
auth cluster required = none
auth service required = none
auth client required = none
auth allow insecure global id reclaim = true
run dir = $STATE/run
admin socket = $STATE/run/\$name.asok
log file = $STATE/\$name.log
pid file = $STATE/run/\$name.pid
keyring = $STATE/keyring
crash dir = $STATE/crash
mon cluster log file = default=$STATE/\$channel.log cluster=$STATE/cluster.log
debug ms = 0
log to stderr = false
err to stderr = true
osd objectstore = memstore
# memstore holds objects in memory and only what is written; deleted and overwritten data
# comes back when rgw's garbage collection runs, made prompt below
memstore device bytes = 10737418240
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 4
osd pool default pgp num = 4
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
mon data avail warn = 1
mon data avail crit = 0
paxos propose interval = 0.01
paxos min wait = 0.001
mon osd reporter subtree level = osd
osd max object name len = 460
osd max object namespace len = 64
osd data = $STATE/osd
# The OSD's own crush commands at start race its monitor map (an all-zero fsid, "wrong fsid",
# and the OSD exits): place it in the crush map here instead.
osd crush update on start = false
osd class update on start = false
mon data = $STATE/mon
ms bind port min = 6800
ms bind port max = 7900

[client]
objecter tick interval = 0.1

[client.rgw]
ms mon client mode = crc
rgw frontends = beast endpoint=127.0.0.1:$rgw_port ssl_endpoint=127.0.0.1:$ssl_port ssl_certificate=$STATE/tls.crt ssl_private_key=$STATE/tls.key
rgw dns name = localhost
rgw data = $STATE/rgw
rgw enable usage log = false
rgw thread pool size = 64
rgw max chunk size = 4194304
rgw gc obj min wait = 1
rgw gc processor period = 5
EOF

	ceph-authtool --create-keyring "$STATE/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
	monmaptool --create --fsid "$fsid" --addv a "[v1:127.0.0.1:$mon_port]" "$STATE/monmap" >/dev/null
	ceph-mon -c "$CONF" -i a --mkfs --monmap "$STATE/monmap" --keyring "$STATE/keyring" \
		>"$STATE/mkfs-mon.out" 2>&1 || { cat "$STATE/mkfs-mon.out" >&2; die "ceph-mon --mkfs failed"; }
	spawn mon ceph-mon -c "$CONF" -i a -f
	wait_for 20 ceph_ mon stat || die "the monitor did not come up"

	local id
	id=$(ceph_again osd new "$osd_uuid") || die "ceph osd new failed"   # one uuid: one id
	[ "$id" = 0 ] || die "unexpected osd id $id"
	ceph_again osd crush add osd.0 1.0 host=localhost root=default >/dev/null ||
		die "ceph osd crush add failed"
	ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$osd_uuid" >"$STATE/mkfs-osd.out" 2>&1 ||
		{ cat "$STATE/mkfs-osd.out" >&2; die "ceph-osd --mkfs failed"; }
	spawn osd ceph-osd -c "$CONF" -i 0 -f
	wait_for 30 sh -c "ceph -c '$CONF' osd dump 2>/dev/null | grep -q '^osd.0 up'" ||
		die "the OSD did not come up"

	spawn rgw radosgw -c "$CONF" -n client.rgw -f
	wait_for 30 /usr/bin/python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$rgw_port/', timeout=2)" ||
		die "radosgw did not answer on 127.0.0.1:$rgw_port"

	local access secret
	access=AK$(head -c 9 /dev/urandom | od -An -tx1 | tr -d ' \n' | tr a-f A-F)
	secret=$(head -c 30 /dev/urandom | base64 | tr -d '/+=\n')
	timeout 30 radosgw-admin -c "$CONF" -n client.rgw user create --uid aiprof-test \
		--display-name "aiprof test" --access-key "$access" --secret-key "$secret" \
		>"$STATE/user.out" 2>&1 || { cat "$STATE/user.out" >&2; die "radosgw-admin user create failed"; }

	cat >"$ENVF" <<EOF
AWS_ENDPOINT_URL_S3=http://127.0.0.1:$rgw_port
S3_HTTPS_ENDPOINT=https://127.0.0.1:$ssl_port
S3_CA_BUNDLE=$STATE/tls.crt
AWS_ACCESS_KEY_ID=$access
AWS_SECRET_ACCESS_KEY=$secret
AWS_REGION=us-east-1
S3_BUCKET=$BUCKET
S3_STATE=$STATE
EOF
	chmod 600 "$ENVF"

	AWS_ACCESS_KEY_ID=$access AWS_SECRET_ACCESS_KEY=$secret EP=http://127.0.0.1:$rgw_port \
	BUCKET=$BUCKET timeout 30 /usr/bin/python3 - <<'EOF' || die "creating the bucket failed"
import os, boto3, botocore.config
s3 = boto3.client("s3", endpoint_url=os.environ["EP"], region_name="us-east-1",
                  config=botocore.config.Config(s3={"addressing_style": "path"},
                                                retries={"max_attempts": 10, "mode": "standard"}))
s3.create_bucket(Bucket=os.environ["BUCKET"])
EOF
	trap - EXIT
	do_env
}

case "${1:-}" in
start) do_start ;;
stop) do_stop ;;
env) do_env ;;
*) echo "usage: S3_STATE=DIR $0 start|stop|env" >&2; exit 2 ;;
esac
