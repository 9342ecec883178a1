#!/usr/bin/env bash
# Fetches Datadog's Java agent (dd-java-agent, whose profiler publishes OTEP 4947 thread
# contexts and whose tracer publishes the OTEP 4719 process context) and dd-trace-api (for
# @Trace) from Maven Central with Maven, pinned, into the local repository (~/.m2), for
# cli/tests/java_agent.rs. A rerun finds them and does nothing.
set -euo pipefail
for artifact in com.datadoghq:dd-java-agent:1.68.1 com.datadoghq:dd-trace-api:1.66.0; do
  IFS=: read -r group name version <<<"$artifact"
  jar="$HOME/.m2/repository/${group//.//}/$name/$version/$name-$version.jar"
  if [ ! -s "$jar" ]; then
    mvn -q -B dependency:get -Dartifact="$artifact" -Dtransitive=false
  fi
  test -s "$jar"
done
