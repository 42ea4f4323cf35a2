#!/usr/bin/env bash
# Run N replicas of `anvil serve` behind nginx on this machine: the setup of
# deploy/nginx/anvil.conf, for trying it (or measuring it) before deploying.
#
#   deploy/run-local.sh [-m MODEL] [-n REPLICAS] [-p PORT] [-t THREADS] [-- SERVE_ARGS...]
#
# nginx listens on 127.0.0.1:PORT (default 8080) and the replicas on
# PORT+1 .. PORT+N, each with THREADS engine threads (default 1) and
# --replica-id rI (sent back in an X-Anvil-Replica header). Arguments after
# -- go to every `anvil serve` (e.g. -- --ctx 4096 --parallel 16).
# Logs and nginx's private prefix are in a temporary directory, printed at
# start. Ctrl-C (or SIGTERM) drains the replicas (in-flight requests
# finish), stops nginx and removes nothing but the pid files: the logs stay.
#
# Needs bin/anvil (make) and Debian's nginx (make deps); the system nginx
# service is neither used nor touched.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
n=2
port=8080
threads=1
anvil="${ANVIL_BIN:-$root/bin/anvil}"
nginx_bin="${NGINX:-nginx}"

usage() {
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
}
die() {
    echo "run-local.sh: $*" >&2
    exit 2
}
isnum() { [[ "$1" =~ ^[0-9]+$ ]]; }

while [ $# -gt 0 ]; do
    case "$1" in
        -m) [ $# -ge 2 ] || die "-m needs a model file"; model=$2; shift 2 ;;
        -n) [ $# -ge 2 ] && isnum "$2" && [ "$2" -ge 1 ] && [ "$2" -le 64 ] || die "-n needs a count in 1..64"; n=$2; shift 2 ;;
        -p) [ $# -ge 2 ] && isnum "$2" && [ "$2" -ge 1 ] && [ "$2" -le 65000 ] || die "-p needs a port in 1..65000"; port=$2; shift 2 ;;
        -t) [ $# -ge 2 ] && isnum "$2" && [ "$2" -ge 1 ] || die "-t needs a thread count"; threads=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        --) shift; break ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done
extra=("$@")
[ -x "$anvil" ] || die "$anvil is missing: run make"
[ -f "$model" ] || die "model $model is missing: run make model"
command -v "$nginx_bin" >/dev/null || die "nginx is missing: run make deps (Debian's nginx)"

work=$(mktemp -d "${TMPDIR:-/tmp}/anvil-local.XXXXXX")
pids=()      # replicas
nginx_pid=""

stop() {
    local rc=$1
    trap - INT TERM EXIT
    echo
    echo "run-local.sh: draining the replicas and stopping nginx"
    # replicas drain (in-flight requests finish, new ones get 503) while
    # nginx, told to quit gracefully, still carries the open streams
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    if [ -n "$nginx_pid" ]; then
        kill -QUIT "$nginx_pid" 2>/dev/null || true
        # graceful quit waits for open streams; past 60 s, stop it hard
        for _ in $(seq 1 600); do kill -0 "$nginx_pid" 2>/dev/null || break; sleep 0.1; done
        kill -TERM "$nginx_pid" 2>/dev/null || true
    fi
    for p in "${pids[@]}" $nginx_pid; do wait "$p" 2>/dev/null || true; done
    echo "run-local.sh: stopped; logs in $work"
    exit "$rc"
}
trap 'stop 0' INT TERM
trap 'stop $?' EXIT

replicas=()
for i in $(seq 1 "$n"); do
    rport=$((port + i))
    # setsid: a terminal's Ctrl-C reaches this script only, which then
    # sends one SIGTERM (a drain); a second signal would cancel requests
    setsid "$anvil" serve -m "$model" --port "$rport" -t "$threads" --replica-id "r$i" "${extra[@]}" \
        >"$work/replica-$i.log" 2>&1 &
    pids+=($!)
    replicas+=("127.0.0.1:$rport")
done

# ready when each replica has printed its "listening" line
for i in $(seq 1 "$n"); do
    for _ in $(seq 1 600); do
        grep -q "listening on" "$work/replica-$i.log" 2>/dev/null && break
        kill -0 "${pids[$((i - 1))]}" 2>/dev/null || { cat "$work/replica-$i.log" >&2; die "replica $i did not start"; }
        sleep 0.1
    done
    grep -q "listening on" "$work/replica-$i.log" || die "replica $i did not start in 60 s"
done

"$root/deploy/nginx/render.sh" -p "$work" "127.0.0.1:$port" "${replicas[@]}" >"$work/nginx.conf"
"$nginx_bin" -t -q -p "$work" -c "$work/nginx.conf" -e "$work/error.log" \
    || die "nginx rejected $work/nginx.conf (see $work/error.log)"
setsid "$nginx_bin" -p "$work" -c "$work/nginx.conf" -e "$work/error.log" -g 'daemon off;' \
    >"$work/nginx.out" 2>&1 &
nginx_pid=$!
# ready when nginx accepts connections (its signal handlers are set by then)
for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    kill -0 "$nginx_pid" 2>/dev/null || die "nginx exited (see $work/error.log)"
    sleep 0.1
done
(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || die "nginx is not listening on $port"

echo "anvil behind nginx: http://127.0.0.1:$port/  (chat page and OpenAI API)"
echo "  replicas: ${replicas[*]} ($threads thread(s) each)"
echo "  logs:     $work (replica-*.log, access.log, error.log)"
echo "  affinity: send 'X-Session-Id: <conversation id>' to keep a conversation on one replica"
echo "  Ctrl-C stops everything"
wait -n "${pids[@]}" "$nginx_pid" || true
echo "run-local.sh: a process exited on its own (see $work)" >&2
exit 1
