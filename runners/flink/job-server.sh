#!/usr/bin/env bash
# Assembles the Beam Flink job-server jar under build/flink (cached) and prints its path.
#   runners/flink/job-server.sh            build if needed, print the jar path
#   runners/flink/job-server.sh --start    also start it in the foreground (port 8099)
# Jobs then run with:
#   --runner=FlinkRunner --flink_master=[local] --flink_version=1.19 \
#   --flink_job_server_jar=$(runners/flink/job-server.sh) --environment_type=LOOPBACK
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/../../build/flink"
jar="$out/beam-flink-job-server.jar"
# Bump when the launcher's contents change: a cached jar of another version is rebuilt.
launcher_version=2
if [[ ! -f "$jar" || "$(cat "$out/launcher-version" 2>/dev/null)" != "$launcher_version" ]]; then
  mkdir -p "$out/lib"
  echo "assembling the Flink job server in $out (first time: downloads from Maven Central)" >&2
  mvn -q -B -f "$here/pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$out/lib" -DincludeScope=runtime >&2
  # Manifest lines are at most 72 bytes; continuation lines start with a space.
  (cd "$out" && {
    echo "Manifest-Version: 1.0"
    echo "Main-Class: org.apache.beam.runners.flink.FlinkJobServerDriver"
    { printf 'Class-Path:'; for f in lib/*.jar; do printf ' %s' "$f"; done; echo; } \
      | fold -w 70 | sed '2,$s/^/ /'
  } > manifest.txt
  # slf4j-simple's settings.  FlinkPipelineRunner logs every metric of the finished job
  # at INFO, which the Beam SDK relays to the console line by line: ~7,000 lines of JSON
  # for the demo's build-dataset (the whole run's output is ~45 lines without them).
  # WARN drops that.  Not a speed-up (0.8 s on a terminal or file); a slow reader of the
  # output would hold the job's DONE back until it has read them all.
  cat > simplelogger.properties << 'PROPS'
org.slf4j.simpleLogger.log.org.apache.beam.runners.flink.FlinkPipelineRunner=warn
PROPS
  jar cfm "$jar.tmp" manifest.txt simplelogger.properties && mv "$jar.tmp" "$jar"
  echo "$launcher_version" > launcher-version)
fi
if [[ "${1:-}" == "--start" ]]; then
  exec java -jar "$jar" --flink-master=[local] --job-port=8099
fi
echo "$jar"
