# Shared by scripts/kafka/{start,stop,restart-broker}: where the jars are and how one broker of a
# cluster directory is launched, so a restarted broker runs exactly the command it first ran.
#
# Layout of a cluster directory <dir>:
#   <dir>/bootstrap            comma-separated host:port list of every broker
#   <dir>/brokers              how many brokers the cluster has
#   <dir>/broker-<i>.pid       pid of broker i's JVM (i from 0)
#   <dir>/broker-<i>.log       broker i's log (stdout and stderr; appended across restarts)
#   <dir>/broker-<i>/          broker i's server.properties and its data directory

KAFKA_VERSION=4.4.0
KAFKA_HOME="${HERALD_KAFKA_HOME:-$HOME/.cache/herald/kafka-$KAFKA_VERSION}"
KAFKA_LIBS="$KAFKA_HOME/libs"
# 256 MB of heap is plenty for tests on loopback (Kafka serves from the page cache; RSS is
# ~300 MB, mostly not heap); benchmarks that push volume may set HERALD_KAFKA_HEAP_OPTS.
KAFKA_HEAP_OPTS="${HERALD_KAFKA_HEAP_OPTS:--Xms128m -Xmx256m}"

kafka_die() { echo "scripts/kafka: $*" >&2; exit 1; }

kafka_require_libs() {
  [ -f "$KAFKA_LIBS/.complete" ] || kafka_die "Kafka jars not installed in $KAFKA_LIBS (run scripts/kafka/install)"
  command -v java >/dev/null 2>&1 || kafka_die "missing required tool: java (a JDK/JRE 17 or later)"
}

# True when pid file $1 names a live JVM of this cluster directory (not a reused pid).
kafka_pid_alive() {
  local pidfile="$1" pid
  [ -f "$pidfile" ] || return 1
  pid="$(cat "$pidfile")"
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF "$(dirname "$pidfile")/"
}

# Waits until pid $1 has exited, at most $2 tenths of a second; false on timeout.
kafka_wait_exit() {
  local pid="$1" tenths="$2"
  while kill -0 "$pid" 2>/dev/null; do
    # A zombie (our own child, not yet reaped) has exited for every purpose here.
    [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = "Z" ] && return 0
    tenths=$((tenths - 1))
    [ "$tenths" -gt 0 ] || return 1
    sleep 0.1
  done
}

# Starts broker $2 of directory $1 in the background and records its pid.
kafka_launch() {
  local dir="$1" i="$2"
  local conf="$dir/broker-$i/server.properties"
  # shellcheck disable=SC2086 # the heap options are several words on purpose
  nohup java $KAFKA_HEAP_OPTS -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$dir/log4j2.properties" \
    -cp "$KAFKA_LIBS/*" kafka.Kafka "$conf" >> "$dir/broker-$i.log" 2>&1 < /dev/null &
  echo $! > "$dir/broker-$i.pid"
}

# Count of "started" lines in broker $2's log: restart-broker waits for it to grow.
kafka_started_count() {
  grep -c 'Kafka Server started' "$1/broker-$2.log" 2>/dev/null || true
}

kafka_log_tail() {
  local dir="$1" i="$2"
  echo "--- last lines of $dir/broker-$i.log ---" >&2
  tail -n 30 "$dir/broker-$i.log" >&2 2>/dev/null || true
}
