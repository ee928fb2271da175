#!/usr/bin/env bash
# A throwaway RabbitMQ on 127.0.0.1 for benchmarks (baseline for bench/throughput.py).
#
#   bench/rabbitmq.sh start [PORT]    install if missing (apt-get), start, wait until it serves
#   bench/rabbitmq.sh stop [PORT]     stop it (by PID) and remove its data
#   bench/rabbitmq.sh status [PORT]
#   bench/rabbitmq.sh ctl PORT ARGS...  rabbitmqctl against it, e.g. ctl 5680 list_queues
#
# A cluster of three nodes on PORT, PORT+1, PORT+2 (bench/failover_targets.py: quorum queues
# under a node's loss), node I (1-3) named benchPORT-I@localhost:
#
#   bench/rabbitmq.sh cluster-start PORT      start three nodes, join 2 and 3 to 1
#   bench/rabbitmq.sh node-start PORT I       start node I again once its process is gone
#                                             (a killed one rejoins the cluster)
#   bench/rabbitmq.sh node-pid PORT I         its OS pid (SIGKILL it to lose the node)
#   bench/rabbitmq.sh cluster-ctl PORT I ARGS...  rabbitmqctl against node I
#   bench/rabbitmq.sh cluster-stop PORT       stop the three (SIGKILL by PID), remove their data
#
# The cluster's nodes share one Erlang cookie and one private epmd (127.0.0.1:PORT+30000),
# under ${RMQ_BENCH_DIR:-/tmp/rmq-bench-PORT}/n1..n3; a node's distribution port is its
# AMQP port + 20000.
#
# PORT defaults to 5680 (so it never collides with a qpidd on 5672). Everything the node
# writes (mnesia, logs, cookie, config, pid file) lives under ${RMQ_BENCH_DIR:-/tmp/rmq-bench-PORT}.
# The node listens on 127.0.0.1:PORT only, its Erlang distribution port is PORT+20000 and it
# uses a private epmd on 127.0.0.1:PORT+30000, so stopping it touches no other Erlang node.
# Clients use amqp://guest:guest@127.0.0.1:PORT/%2F (guest works from localhost only).
#
# RMQ_PLUGINS: plugins to enable, comma-separated Erlang atoms (e.g. rabbitmq_amqp1_0, the
# AMQP 1.0 plugin of bench/amqp10_throughput.py, which serves 1.0 on the same port).
#
# RMQ_MGMT_PORT: also enable the management plugin (rabbitmq_management) with its HTTP API on
# 127.0.0.1:RMQ_MGMT_PORT (bench/definitions_to_rabbitmq.py imports our definitions there).
#
# A TLS listener too (the client libraries' suites, docs/rabbitmq-compat.md), when
# RMQ_TLS_PORT is set: RMQ_TLS_CERT, RMQ_TLS_KEY, RMQ_TLS_CA (PEM files) and
# RMQ_TLS_REQUIRE_CLIENT_CERT=true|false (default false).
set -euo pipefail

cmd="${1:-}"
port="${2:-${RMQ_PORT:-5680}}"
dir="${RMQ_BENCH_DIR:-/tmp/rmq-bench-$port}"
node="bench$port@localhost"
rmq_bin=/usr/lib/rabbitmq/bin

usage() {
    echo "usage: $0 start|stop|status [PORT] | ctl PORT ARGS... | cluster-start|cluster-stop PORT" \
        "| node-start|node-pid PORT I | cluster-ctl PORT I ARGS..." >&2
    exit 2
}

[[ "$port" =~ ^[0-9]+$ ]] || usage

setup_env() {
    export HOME="$dir"                   # .erlang.cookie goes here, for server and rabbitmqctl
    export RABBITMQ_NODENAME="$node"
    export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
    export RABBITMQ_NODE_PORT="$port"
    export RABBITMQ_DIST_PORT="$((port + 20000))"
    export ERL_EPMD_ADDRESS=127.0.0.1
    export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
    export ERL_EPMD_PORT="$((port + 30000))"
    export RABBITMQ_MNESIA_BASE="$dir/mnesia"
    export RABBITMQ_LOG_BASE="$dir/log"
    export RABBITMQ_PID_FILE="$dir/rabbitmq.pid"
    export RABBITMQ_CONFIG_FILE="$dir/rabbitmq"          # -> $dir/rabbitmq.conf
    export RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins"
    export RABBITMQ_CONF_ENV_FILE="$dir/rabbitmq-env.conf"
    export RABBITMQ_ADVANCED_CONFIG_FILE="$dir/advanced.config"
}

install_if_missing() {
    if [[ -x "$rmq_bin/rabbitmq-server" ]]; then
        return
    fi
    local sudo=""
    if [[ "$(id -u)" != 0 ]]; then
        sudo="sudo"
    fi
    echo "installing rabbitmq-server (apt-get)..." >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq rabbitmq-server >/dev/null
    # The Debian package may have started a system node (on hosts with an init system):
    # ours is independent of it and uses other ports.
}

ctl() {
    "$rmq_bin/rabbitmqctl" -n "$node" "$@"
}

is_running() { # a zombie (SIGKILLed, not reaped yet) is not running
    [[ -f "$RABBITMQ_PID_FILE" ]] || return 1
    local pid
    pid="$(cat "$RABBITMQ_PID_FILE")"
    kill -0 "$pid" 2>/dev/null && [[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]]
}

# Start the node of the current globals detached from this shell (it outlives it, and stop
# finds it by its pid file), then wait up to $1 seconds for its pid file and as long again
# for its app to boot (rabbitmqctl wait).
launch() {
    local limit="$1"
    rm -f "$RABBITMQ_PID_FILE"
    setsid "$rmq_bin/rabbitmq-server" >>"$dir/log/startup.log" 2>&1 </dev/null &
    local deadline=$((SECONDS + limit))
    until [[ -s "$RABBITMQ_PID_FILE" ]]; do
        if ((SECONDS > deadline)); then
            echo "$node did not write its pid file; see $dir/log" >&2
            tail -20 "$dir/log/startup.log" >&2 || true
            exit 1
        fi
        sleep 0.5
    done
    if ! timeout "$limit" "$rmq_bin/rabbitmqctl" -n "$node" wait -q "$RABBITMQ_PID_FILE"; then
        echo "$node did not come up; see $dir/log" >&2
        tail -20 "$dir/log/startup.log" >&2 || true
        exit 1
    fi
}

start() {
    install_if_missing
    setup_env
    if is_running; then
        echo "already running: pid $(cat "$RABBITMQ_PID_FILE") port $port" >&2
        return 0
    fi
    rm -rf "$dir"
    mkdir -p "$dir/mnesia" "$dir/log"
    cat >"$dir/rabbitmq.conf" <<EOF
listeners.tcp.1 = 127.0.0.1:$port
loopback_users.guest = true
log.console = false
log.file.level = warning
EOF
    if [[ -n "${RMQ_TLS_PORT:-}" ]]; then
        cat >>"$dir/rabbitmq.conf" <<EOF
listeners.ssl.1 = 127.0.0.1:$RMQ_TLS_PORT
ssl_options.cacertfile = $RMQ_TLS_CA
ssl_options.certfile = $RMQ_TLS_CERT
ssl_options.keyfile = $RMQ_TLS_KEY
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = ${RMQ_TLS_REQUIRE_CLIENT_CERT:-false}
EOF
    fi
    local plugins="${RMQ_PLUGINS:-}"
    if [[ -n "${RMQ_MGMT_PORT:-}" ]]; then
        printf '%s\n' "management.tcp.ip = 127.0.0.1" "management.tcp.port = $RMQ_MGMT_PORT" \
            >>"$dir/rabbitmq.conf"
        plugins="${plugins:+$plugins,}rabbitmq_management"
    fi
    echo "[$plugins]." >"$dir/enabled_plugins"
    echo "[]." >"$dir/advanced.config"
    : >"$dir/rabbitmq-env.conf"
    launch 90
    echo "rabbitmq $(ctl version 2>/dev/null || echo '?') running: pid $(cat "$RABBITMQ_PID_FILE")," \
        "url amqp://guest:guest@127.0.0.1:$port/%2F, data $dir" >&2
}

stop() {
    setup_env
    if [[ ! -d "$dir" ]]; then
        echo "not running (no $dir)" >&2
        return 0
    fi
    if is_running; then
        local pid
        pid="$(cat "$RABBITMQ_PID_FILE")"
        # Graceful: rabbitmqctl stop PIDFILE returns once that OS process has exited.
        timeout 60 "$rmq_bin/rabbitmqctl" -n "$node" stop -q "$RABBITMQ_PID_FILE" || true
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            sleep 2
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    # Our private epmd (only ours listens on this port).
    if [[ -x "$(command -v epmd)" ]] || [[ -x /usr/lib/erlang/erts-*/bin/epmd ]]; then
        epmd -port "$ERL_EPMD_PORT" -kill >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
    echo "stopped rabbitmq on port $port" >&2
}

status() {
    setup_env
    if is_running; then
        echo "running: pid $(cat "$RABBITMQ_PID_FILE") port $port data $dir"
        ctl status 2>/dev/null | grep -E 'RabbitMQ version|Erlang' || true
    else
        echo "not running (port $port)"
        return 1
    fi
}

# Cluster mode: the globals of node $2 of the cluster on base port $1, then its env.
cluster_node() {
    local base="$1" i="$2"
    [[ "$i" =~ ^[123]$ ]] || usage
    local top="${RMQ_BENCH_DIR:-/tmp/rmq-bench-$base}"
    port=$((base + i - 1))
    dir="$top/n$i"
    node="bench$base-$i@localhost"
    setup_env
    export HOME="$top"                       # one cookie for the three
    export ERL_EPMD_PORT="$((base + 30000))" # one epmd: the nodes find each other
}

# Boot the node of the current globals, keeping its data if it has some (a restart).
boot() {
    if is_running; then
        return 0
    fi
    mkdir -p "$dir/mnesia" "$dir/log"
    printf '%s\n' "listeners.tcp.1 = 127.0.0.1:$port" "loopback_users.guest = true" \
        "log.console = false" "log.file.level = warning" >"$dir/rabbitmq.conf"
    echo "[]." >"$dir/enabled_plugins"
    echo "[]." >"$dir/advanced.config"
    : >"$dir/rabbitmq-env.conf"
    launch 150
}

cluster_start() {
    local base="$1" top="${RMQ_BENCH_DIR:-/tmp/rmq-bench-$1}" i
    install_if_missing
    rm -rf "$top"
    mkdir -p "$top"
    head -c 48 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 32 >"$top/.erlang.cookie"
    chmod 400 "$top/.erlang.cookie"
    for i in 1 2 3; do
        (cluster_node "$base" "$i" && boot) &
    done
    wait
    for i in 2 3; do
        cluster_node "$base" "$i"
        ctl stop_app -q
        ctl join_cluster -q "bench$base-1@localhost"
        ctl start_app -q
    done
    cluster_node "$base" 1
    echo "rabbitmq $(ctl version 2>/dev/null || echo '?') cluster of 3 running:" \
        "amqp://guest:guest@127.0.0.1:$base,$((base + 1)),$((base + 2)), data $top" >&2
}

cluster_stop() {
    local base="$1" top="${RMQ_BENCH_DIR:-/tmp/rmq-bench-$1}" i pid
    for i in 1 2 3; do
        cluster_node "$base" "$i"
        if is_running; then
            pid="$(cat "$RABBITMQ_PID_FILE")"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
    epmd -port "$((base + 30000))" -kill >/dev/null 2>&1 || true
    rm -rf "$top"
    echo "stopped the rabbitmq cluster on port $base" >&2
}

case "$cmd" in
cluster-start) cluster_start "$port" ;;
cluster-stop) cluster_stop "$port" ;;
node-start)
    cluster_node "$port" "${3:-}"
    boot
    ;;
node-pid)
    cluster_node "$port" "${3:-}"
    is_running && cat "$RABBITMQ_PID_FILE"
    ;;
cluster-ctl)
    cluster_node "$port" "${3:-}"
    shift 3
    ctl "$@"
    ;;
ctl)
    setup_env
    shift 2
    ctl "$@"
    ;;
start) start ;;
stop) stop ;;
status) status ;;
*) usage ;;
esac
