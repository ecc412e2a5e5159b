#!/usr/bin/env bash
# registry.sh — a real schema registry for sluice's format tests: Apicurio Registry (in-memory
# storage), built from Maven Central artifacts (see pom.xml), speaking the Confluent protocol
# under /apis/ccompat/v6.
#
#   registry.sh fetch                       build the runnable registry (once; the stamp holds the
#                                           pom's and this script's checksum: editing them rebuilds)
#   registry.sh start [--port P] [--timeout S]
#                                           start it on 127.0.0.1:P (default 18781) and print its
#                                           base URL (for schema_registry.urls) on stdout
#   registry.sh stop                        SIGTERM, SIGKILL after 10 s
#
# Only the URL goes to stdout; the build log goes to the build directory, the registry's to run/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The build takes minutes (Quarkus' build step), so it is kept outside the work tree, where a
# fresh clone on the same machine (CI) finds it: $SLUICE_CACHE (default ~/.cache/sluice).
BUILD="${SLUICE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}/apicurio-registry"
RUN="$ROOT/run"
STAMP="$BUILD/.complete"
VERSION=2.1.5.Final
PORT=18781
TIMEOUT=120

log() { echo "registry.sh: $*" >&2; }
die() { log "$*"; exit 1; }

parse_flags() {
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --port) PORT="$2"; shift 2 ;;
      --timeout) TIMEOUT="$2"; shift 2 ;;
      *) die "unknown flag $1" ;;
    esac
  done
  [[ "$PORT" =~ ^[0-9]+$ ]] || die "--port must be a number, got $PORT"
}

pom_sum() { sha256sum "$ROOT/pom.xml" "$0" | sha256sum | cut -d' ' -f1; }
runner() { echo "$BUILD/target/sluice-test-registry-$VERSION-runner.jar"; }

cmd_fetch() {
  if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(pom_sum)" && -f "$(runner)" ]]; then
    return 0
  fi
  log "building Apicurio Registry $VERSION (Maven Central; cached in ~/.m2 and $BUILD)"
  rm -rf "$BUILD"
  mkdir -p "$BUILD/src/main/resources"
  cp "$ROOT/pom.xml" "$BUILD/pom.xml"
  # The application's own configuration lives in its jar; Quarkus' build step reads it from
  # the project, and must index the application jar (it has no Jandex index of its own).
  mvn -B -q -f "$BUILD/pom.xml" org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy \
    -Dartifact="io.apicurio:apicurio-registry-app:$VERSION" -DoutputDirectory="$BUILD/app" >"$BUILD/fetch.log" 2>&1 ||
    { tail -n 20 "$BUILD/fetch.log" >&2; die "could not fetch apicurio-registry-app $VERSION"; }
  unzip -p "$BUILD/app/apicurio-registry-app-$VERSION.jar" application.properties >"$BUILD/src/main/resources/application.properties"
  cat >>"$BUILD/src/main/resources/application.properties" <<'PROPS'
quarkus.index-dependency.registryapp.group-id=io.apicurio
quarkus.index-dependency.registryapp.artifact-id=apicurio-registry-app
PROPS
  if ! mvn -B -f "$BUILD/pom.xml" package -DskipTests -Dcheckstyle.skip -Dlicense.skip -Denforcer.skip \
    -Dmaven.javadoc.skip -Dmaven.source.skip >"$BUILD/build.log" 2>&1; then
    grep -E '^\[ERROR\]' "$BUILD/build.log" | head -n 20 >&2
    die "build failed (log: $BUILD/build.log)"
  fi
  [[ -f "$(runner)" ]] || die "no runner jar after the build (log: $BUILD/build.log)"
  pom_sum >"$STAMP"
}

pid_of() {
  [[ -f "$RUN/registry.pid" ]] || return 1
  local pid
  pid="$(cat "$RUN/registry.pid")"
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

url() { echo "http://127.0.0.1:$PORT/apis/ccompat/v6"; }

cmd_start() {
  cmd_fetch
  if pid_of >/dev/null; then
    die "already running (pid $(pid_of)); stop it first"
  fi
  mkdir -p "$RUN"
  # In-memory storage: every start is an empty registry.
  REGISTRY_LOG_LEVEL=WARN LOG_LEVEL=INFO nohup java -Xms128m -Xmx512m \
    -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$PORT" \
    -jar "$(runner)" >"$RUN/registry.log" 2>&1 &
  echo $! >"$RUN/registry.pid"
  local deadline=$((SECONDS + TIMEOUT))
  until curl -fsS -o /dev/null "$(url)/subjects" 2>/dev/null; do
    if ! pid_of >/dev/null; then
      tail -n 30 "$RUN/registry.log" >&2
      die "the registry exited during start-up (log: $RUN/registry.log)"
    fi
    if ((SECONDS > deadline)); then
      tail -n 30 "$RUN/registry.log" >&2
      cmd_stop
      die "not ready after ${TIMEOUT}s (log: $RUN/registry.log)"
    fi
    sleep 0.5
  done
  log "Apicurio Registry $VERSION ready at $(url) (pid $(pid_of))"
  url
}

cmd_stop() {
  local pid
  pid="$(pid_of)" || { rm -f "$RUN/registry.pid"; return 0; }
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$RUN/registry.pid"
}

cmd="${1:-}"
shift || true
case "$cmd" in
  fetch) cmd_fetch ;;
  start) parse_flags "$@"; cmd_start ;;
  stop) cmd_stop ;;
  *) die "usage: registry.sh fetch | start [--port P] [--timeout S] | stop" ;;
esac
