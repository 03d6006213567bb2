#!/usr/bin/env bash
# A Flink 1.19 session cluster on loopback: one JobManager and two TaskManagers, started
# as background JVMs from Flink's module jars on Maven Central (cluster-pom.xml; Maven
# Central has no flink-dist).  See runners/flink/README.md.
#   runners/flink/cluster.sh start     start it (no-op if it runs), wait until both
#                                      TaskManagers are registered, print the master
#                                      (localhost:PORT, for --flink_master=)
#   runners/flink/cluster.sh stop      stop it and wait until every JVM has exited
#   runners/flink/cluster.sh status    print the master and the TaskManager count;
#                                      exit 0 if it runs, 3 if not
#   runners/flink/cluster.sh master    print the master if it runs (exit 3 if not)
# Environment:
#   FLINK_CLUSTER_DIR   state: config, logs, pid files, temp (default build/flink/cluster)
#   FLINK_REST_PORT     REST/web port (default 8081, or a free port if 8081 is taken)
#   FLINK_TASKMANAGERS  TaskManagers (default 2); FLINK_SLOTS slots each (default 2)
#   FLINK_TM_MEMORY     process size of each TaskManager (default 1280m)
#   FLINK_JM_MEMORY     process size of the JobManager (default 1024m)
#   FLINK_START_TIMEOUT seconds to wait for the TaskManagers (default 120)
# The jars are cached in build/flink/cluster-lib (first start: downloads with mvn).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
lib="$root/build/flink/cluster-lib"
base="${FLINK_CLUSTER_DIR:-$root/build/flink/cluster}"
mkdir -p "$base"
base="$(cd "$base" && pwd)"
conf="$base/conf" logs="$base/log" run="$base/run"
n_tm="${FLINK_TASKMANAGERS:-2}"
py="$root/.venv/bin/python"; [[ -x "$py" ]] || py=python3

JAVA_OPENS=(  # flink-dist's env.java.default-opts.all for Java 17
  --add-exports=java.base/sun.net.util=ALL-UNNAMED
  --add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED
  --add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED
  --add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.net=ALL-UNNAMED
  --add-opens=java.base/java.io=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED
  --add-opens=java.base/sun.nio.ch=ALL-UNNAMED
  --add-opens=java.base/java.lang.reflect=ALL-UNNAMED
  --add-opens=java.base/java.text=ALL-UNNAMED --add-opens=java.base/java.time=ALL-UNNAMED
  --add-opens=java.base/java.util=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent.locks=ALL-UNNAMED
)

die() { echo "cluster.sh: $*" >&2; exit 1; }

free_port() {
  "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

port_taken() {  # something listens on 127.0.0.1:$1
  "$py" -c 'import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(0)
sys.exit(1)' "$1"
}

# A pid file's process, if it is alive and is ours (its command line names our config
# dir): guards against a recycled pid after a crash or reboot.
live_pid() {
  local f="$1" pid
  [[ -f "$f" ]] || return 1
  pid="$(cat "$f")"
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 1
  tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "--configDir $conf" || return 1
  echo "$pid"
}

pid_files() { compgen -G "$run/*.pid" || true; }

rest_port() { cat "$run/rest-port" 2>/dev/null; }

registered_taskmanagers() {  # number the REST API reports, or nothing if it does not answer
  "$py" -c 'import json, sys, urllib.request
try:
    with urllib.request.urlopen(f"http://localhost:{sys.argv[1]}/taskmanagers", timeout=2) as r:
        print(len(json.load(r)["taskmanagers"]))
except Exception:
    pass' "$1"
}

running() {  # every JVM of ours is alive and the REST API answers
  local f any=0 port
  for f in $(pid_files); do live_pid "$f" > /dev/null || return 1; any=1; done
  [[ $any == 1 ]] || return 1
  port="$(rest_port)" || return 1
  [[ -n "$(registered_taskmanagers "$port")" ]]
}

do_stop() {
  local f pid pids=() t
  for f in $(pid_files); do
    if pid="$(live_pid "$f")"; then
      kill -TERM "$pid" 2> /dev/null || true
      pids+=("$pid")
    fi
  done
  for t in $(seq 1 300); do  # 30 s, then SIGKILL
    local alive=()
    for pid in "${pids[@]}"; do [[ -e "/proc/$pid" ]] && alive+=("$pid"); done
    pids=("${alive[@]}")
    [[ ${#pids[@]} == 0 ]] && break
    sleep 0.1
  done
  if [[ ${#pids[@]} -gt 0 ]]; then
    kill -KILL "${pids[@]}" 2> /dev/null || true
    for pid in "${pids[@]}"; do while [[ -e "/proc/$pid" ]]; do sleep 0.1; done; done
  fi
  rm -f "$run"/*.pid "$run/rest-port"
}

assemble_lib() {
  [[ -f "$lib/.complete" ]] && return 0
  command -v mvn > /dev/null || die "mvn is needed to fetch Flink's jars (scripts/system-deps.txt)"
  echo "assembling the Flink cluster runtime in $lib (first time: downloads from Maven Central)" >&2
  rm -rf "$lib.tmp"
  mkdir -p "$lib.tmp"
  mvn -q -B -f "$here/cluster-pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$lib.tmp" -DincludeScope=runtime >&2
  touch "$lib.tmp/.complete"
  rm -rf "$lib"
  mv "$lib.tmp" "$lib"
}

write_config() {
  local port="$1" rpc_port="$2"
  mkdir -p "$conf"
  # Flink 1.19 reads config.yaml (flat keys are valid YAML).  Small memory: the work
  # of a portable Beam job happens in the SDK harness (Python), not in these JVMs.
  cat > "$conf/config.yaml" << EOF
jobmanager.rpc.address: localhost
jobmanager.rpc.port: $rpc_port
jobmanager.bind-host: localhost
jobmanager.memory.process.size: ${FLINK_JM_MEMORY:-1024m}
taskmanager.bind-host: localhost
taskmanager.host: localhost
taskmanager.memory.process.size: ${FLINK_TM_MEMORY:-1280m}
taskmanager.memory.managed.fraction: 0.25
# A Beam batch job runs many stages at once in a slot, each blocking result partition
# taking taskmanager.network.sort-shuffle.min-buffers (default 512 x 32 KiB) up front:
# with the default network share (~80 MB) one TaskManager failed the demo's job with
# "Insufficient number of network buffers".
taskmanager.memory.network.min: 160m
taskmanager.memory.network.max: 160m
taskmanager.network.sort-shuffle.min-buffers: 128
taskmanager.numberOfTaskSlots: ${FLINK_SLOTS:-2}
cluster.evenly-spread-out-slots: true
parallelism.default: 1
rest.address: localhost
rest.bind-address: localhost
rest.port: $port
blob.server.port: 0
taskmanager.rpc.port: 0
taskmanager.data.port: 0
io.tmp.dirs: $base/tmp
web.tmpdir: $base/tmp/web
web.upload.dir: $base/tmp/web
jobmanager.execution.failover-strategy: region
EOF
  cat > "$conf/log4j.properties" << 'EOF'
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = MainAppender
logger.pekko.name = org.apache.pekko
logger.pekko.level = INFO
logger.netty.name = org.jboss.netty.channel.DefaultChannelPipeline
logger.netty.level = OFF
appender.main.name = MainAppender
appender.main.type = File
appender.main.append = true
appender.main.fileName = ${sys:log.file}
appender.main.layout.type = PatternLayout
appender.main.layout.pattern = %d{yyyy-MM-dd HH:mm:ss,SSS} %-5p %-60c %x - %m%n
EOF
}

# The JVM options and -D memory settings Flink's own start scripts pass, computed the way
# they compute them (BashJavaUtils; GET_JM_RESOURCE_PARAMS or GET_TM_RESOURCE_PARAMS).
resource_params() {
  local out
  out="$(java -cp "$lib/*" -Dlog4j2.level=ERROR org.apache.flink.runtime.util.bash.BashJavaUtils \
    "$1" --configDir "$conf" 2>&1)" || die "BashJavaUtils $1 failed: $out"
  grep '^BASH_JAVA_UTILS_EXEC_RESULT:' <<< "$out" | sed 's/^BASH_JAVA_UTILS_EXEC_RESULT://'
}

launch() {  # launch NAME MAIN-CLASS JVM-PARAMS DYNAMIC-PARAMS [ARGS...]
  local name="$1" main="$2" jvm="$3" dyn="$4"; shift 4
  # shellcheck disable=SC2086  # $jvm and $dyn are word lists by construction
  FLINK_PLUGINS_DIR="$base/plugins" setsid java $jvm "${JAVA_OPENS[@]}" -Dlog.file="$logs/$name.log" \
    -Dlog4j.configurationFile="file:$conf/log4j.properties" \
    -cp "$lib/*" "$main" --configDir "$conf" $dyn "$@" \
    > "$logs/$name.out" 2>&1 < /dev/null &
  echo $! > "$run/$name.pid"
}

do_start() {
  if running; then
    echo "localhost:$(rest_port)"
    return 0
  fi
  do_stop  # a half-started or crashed cluster: clean up first
  assemble_lib
  local port="${FLINK_REST_PORT:-}"
  if [[ -z "$port" ]]; then
    port=8081
    if port_taken "$port"; then port="$(free_port)"; fi
  elif port_taken "$port"; then
    die "port $port is taken (FLINK_REST_PORT)"
  fi
  local rpc_port
  rpc_port="$(free_port)"
  rm -rf "$logs" "$base/tmp"
  mkdir -p "$logs" "$run" "$base/tmp/web" "$base/plugins"
  write_config "$port" "$rpc_port"
  local jm tm jm_jvm jm_dyn tm_jvm tm_dyn i t0=$SECONDS
  jm="$(resource_params GET_JM_RESOURCE_PARAMS)"
  tm="$(resource_params GET_TM_RESOURCE_PARAMS)"
  jm_jvm="$(sed -n 1p <<< "$jm")" jm_dyn="$(sed -n 2p <<< "$jm")"
  tm_jvm="$(sed -n 1p <<< "$tm")" tm_dyn="$(sed -n 2p <<< "$tm")"
  echo "$port" > "$run/rest-port"
  launch jobmanager org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint \
    "$jm_jvm" "$jm_dyn"
  for i in $(seq 1 "$n_tm"); do
    mkdir -p "$base/tmp/tm$i"
    launch "taskmanager$i" org.apache.flink.runtime.taskexecutor.TaskManagerRunner \
      "$tm_jvm" "$tm_dyn" -Dtaskmanager.resource-id="taskmanager$i" \
      -Dio.tmp.dirs="$base/tmp/tm$i"
  done
  local timeout="${FLINK_START_TIMEOUT:-120}" n f
  while true; do
    n="$(registered_taskmanagers "$port")"
    [[ "$n" == "$n_tm" ]] && break
    for f in $(pid_files); do
      if ! live_pid "$f" > /dev/null; then
        local name; name="$(basename "$f" .pid)"
        echo "cluster.sh: the $name exited; the end of its log:" >&2
        tail -n 30 "$logs/$name.log" "$logs/$name.out" >&2 2>/dev/null || true
        do_stop
        exit 1
      fi
    done
    if (( SECONDS - t0 > timeout )); then
      echo "cluster.sh: ${n:-no} of $n_tm TaskManagers registered after ${timeout}s; logs in $logs" >&2
      do_stop
      exit 1
    fi
    sleep 0.5
  done
  echo "Flink session cluster up in $((SECONDS - t0)) s: $n_tm TaskManagers, web UI and REST at http://localhost:$port, logs in $logs" >&2
  echo "localhost:$port"
}

case "${1:-}" in
  start) do_start ;;
  stop) do_stop ;;
  restart) do_stop; do_start ;;
  status|master)
    if running; then
      port="$(rest_port)"
      if [[ "$1" == status ]]; then
        echo "running: master localhost:$port, $(registered_taskmanagers "$port") TaskManagers, logs in $logs"
      else
        echo "localhost:$port"
      fi
    else
      if [[ "$1" == status ]]; then
        alive=0 all=0
        for f in $(pid_files); do
          all=$((all + 1))
          if live_pid "$f" > /dev/null; then alive=$((alive + 1)); fi
        done
        if (( alive > 0 )); then
          echo "not running: $alive of $all JVMs alive (start restarts it, stop stops them); logs in $logs"
        else
          echo "not running"
        fi
      fi
      exit 3
    fi ;;
  *) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
