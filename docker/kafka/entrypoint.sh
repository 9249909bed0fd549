#!/bin/bash
# Writes server.properties: kafka/server.properties, then one line per KAFKA_* variable
# (KAFKA_ADVERTISED_LISTENERS -> advertised.listeners, as apache/kafka's image reads them);
# formats the storage with CLUSTER_ID the first time; runs the broker as PID 1.
set -euo pipefail
: "${CLUSTER_ID:?set CLUSTER_ID (16 bytes, base64url without padding)}"
config=/var/lib/kafka/server.properties
{
  cat /opt/kafka/config/server.properties
  echo "log.dirs=/var/lib/kafka/data"
  while IFS='=' read -r name value; do
    key=$(printf '%s' "${name#KAFKA_}" | tr 'A-Z_' 'a-z.')
    printf '%s=%s\n' "$key" "$value"
  done < <(env | grep '^KAFKA_[A-Z0-9_]*=' | grep -v '^KAFKA_HEAP_OPTS=')
} > "$config"
java=(java ${KAFKA_HEAP_OPTS:--Xmx512m} -Djava.awt.headless=true
      -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties -cp '/opt/kafka/libs/*')
if [ ! -f /var/lib/kafka/data/meta.properties ]; then
  "${java[@]}" kafka.tools.StorageTool format -t "$CLUSTER_ID" -c "$config"
fi
exec "${java[@]}" kafka.Kafka "$config"
