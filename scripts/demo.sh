#!/usr/bin/env bash
# The main job: two clusters, a stream with topics, messages in and out, and the replica
# registered the MapR way. Every step is a real `streamrep` command.
#   scripts/demo.sh          on embedded clusters (no servers)
#   scripts/demo.sh kafka    on the two local Kafka clusters of `./run kafka` (started if not running)
set -euo pipefail
cd "$(dirname "$0")/.."
BACKEND="${1:-embedded}"
case "$BACKEND" in
  embedded) export STREAMREP_HOME="${STREAMREP_HOME:-$PWD/.streamrep-demo}" ;;
  kafka) export STREAMREP_HOME="${STREAMREP_HOME:-$PWD/.streamrep-demo-kafka}" ;;
  *) echo "usage: ./run demo [kafka]" >&2; exit 2 ;;
esac
S=.venv/bin/streamrep
step() { printf '\n$ streamrep %s\n' "$*"; "$S" "$@"; }

if [ "$BACKEND" = kafka ]; then
  .venv/bin/python scripts/demo_kafka.py brokers
  .venv/bin/python scripts/demo_kafka.py clean "$STREAMREP_HOME"   # the last demo run's topics
  rm -rf "$STREAMREP_HOME"
  mkdir -p "$STREAMREP_HOME"
  # A namespace of this run's own: its topics are <namespace>.<stream>__<topic> on both clusters.
  CLIENT="$STREAMREP_HOME/kafka-client.properties"
  printf 'streamrep.namespace=demo-%s\n' "$(date -u +%Y%m%d-%H%M%S)" >"$CLIENT"
  printf '\n$ cat %s\n' "$CLIENT"; cat "$CLIENT"
  # The clusters of ./run kafka (scripts/kafka_local.py).
  step cluster add -name sanfrancisco -url kafka://127.0.0.1:19092 -configfile "$CLIENT"
  step cluster add -name newyork -url kafka://127.0.0.1:29092 -configfile "$CLIENT"
else
  rm -rf "$STREAMREP_HOME"
  step cluster add -name sanfrancisco
  step cluster add -name newyork
fi
step stream create -path /mapr/sanfrancisco/activity -defaultpartitions 3
step stream topic create -path /mapr/sanfrancisco/activity -topic clicks
step stream topic create -path /mapr/sanfrancisco/activity -topic orders -partitions 2

printf '\n$ (10 click events, keyed by user) | streamrep produce -path /mapr/sanfrancisco/activity:clicks -keysep =\n'
for i in $(seq 1 10); do echo "user$((i % 4))={\"event\":\"click\",\"n\":$i}"; done \
  | "$S" produce -path /mapr/sanfrancisco/activity:clicks -keysep =
printf '\n$ printf "order-1\\norder-2\\n" | streamrep produce -path /mapr/sanfrancisco/activity:orders\n'
printf 'order-1\norder-2\n' | "$S" produce -path /mapr/sanfrancisco/activity:orders

step stream topic list -path /mapr/sanfrancisco/activity
step consume -path /mapr/sanfrancisco/activity:clicks -fromstart true -group demo -max 10 -json
step stream topic info -path /mapr/sanfrancisco/activity -topic clicks

# Airflow runs the rest: the seven manual steps of the seeds as the DAG stream_replica_manual_setup
# (create -copymetafrom, replica add -paused, verify, upstream add, verify, copystream on Spark, resume),
# then the gateways of newyork as the DAG stream_gateways (a Spark Structured Streaming job).
REPO="$PWD"
export AIRFLOW_HOME="$STREAMREP_HOME/airflow-home"
source scripts/airflow-env.sh
LOGS="$STREAMREP_HOME/logs"; mkdir -p "$LOGS"
dag() {  # dag <id> <conf>: one DAG run with `airflow dags test`, its log kept, its outcome shown
  printf '\n$ airflow dags test %s -c %s\n' "$1" "$2"
  if airflow dags test "$1" -c "$2" >"$LOGS/$1.log" 2>&1; then
    grep -oE "\[DAG TEST\] running task <TaskInstance: $1\.[a-z_]+" "$LOGS/$1.log" | sed 's/.*\./  task: /' || true
    echo "  $1: success (log: $LOGS/$1.log)"
  else
    tail -20 "$LOGS/$1.log"; echo "  $1: FAILED (log: $LOGS/$1.log)" >&2; exit 1
  fi
}
printf '\n$ airflow db migrate\n'
airflow db migrate >"$LOGS/airflow-db-migrate.log" 2>&1 || { tail -20 "$LOGS/airflow-db-migrate.log"; exit 1; }

dag stream_replica_manual_setup '{"path": "/mapr/sanfrancisco/activity", "replica": "/mapr/newyork/activity"}'
step stream upstream list -path /mapr/newyork/activity

printf '\n$ (5 more orders while replication runs) | streamrep produce -path /mapr/sanfrancisco/activity:orders\n'
for i in $(seq 3 7); do echo "order-$i"; done | "$S" produce -path /mapr/sanfrancisco/activity:orders
step cluster gateway set -dstcluster newyork -gateways "gw1"
step stream replica list -path /mapr/sanfrancisco/activity

dag stream_gateways '{"cluster": "newyork", "once": true}'
step consume -path /mapr/newyork/activity:orders -fromstart true

# The once gateway has drained and ended, so no gateway is live (the replica would show
# ErrAllGatewaysUnreachable). Replication as it runs for good: gw1 as a continuous gateway, here
# in-process (-engine local, no Spark start) in the background; the DAG stream_gateway_service
# runs it on Spark the same way.
printf '\n$ streamrep gateway run -cluster newyork -id gw1 -engine local &   (continuous, in the background)\n'
"$S" gateway run -cluster newyork -id gw1 -engine local >"$LOGS/gateway-gw1.log" 2>&1 &
GATEWAY=$!
trap 'kill "$GATEWAY" 2>/dev/null || true' EXIT   # never left running, whatever happens below
printf '\n$ printf "order-8\\norder-9\\n" | streamrep produce -path /mapr/sanfrancisco/activity:orders\n'
printf 'order-8\norder-9\n' | "$S" produce -path /mapr/sanfrancisco/activity:orders
# Until gw1 is live and has replicated them (a deadline, not a fixed sleep: this machine may be loaded).
healthy() {
  "$S" stream replica list -path /mapr/sanfrancisco/activity -json | .venv/bin/python -c '
import json, sys
row = json.load(sys.stdin)["data"][0]
sys.exit(0 if row["isUptodate"] and "gw1" in row["gateways"] and row["replicaState"] == "REPLICA_STATE_REPLICATING" else 1)'
}
up=false
for _ in $(seq 1 120); do
  if healthy; then up=true; break; fi
  kill -0 "$GATEWAY" 2>/dev/null || break
  sleep 1
done
step consume -path /mapr/newyork/activity:orders -fromstart true
step stream replica list -path /mapr/sanfrancisco/activity
if [ "$up" != true ]; then
  cat "$LOGS/gateway-gw1.log"; echo "demo: gw1 did not bring the replica up to date in 120 s (log: $LOGS/gateway-gw1.log)" >&2
  exit 1
fi
# The one way to stop a continuous gateway: it finishes its pass, withdraws its heartbeat, exits 0.
step gateway stop -cluster newyork -wait true -timeout 60
wait "$GATEWAY" || { cat "$LOGS/gateway-gw1.log"; echo "demo: gateway gw1 failed (log: $LOGS/gateway-gw1.log)" >&2; exit 1; }
trap - EXIT
cat <<EOF

The replica is up to date (isUptodate true, nothing pending) and was REPLICATING with gw1 live.
gw1 is stopped now, so 'stream replica list' shows REPLICA_STATE_WAITING_FOR_GATEWAY until a
gateway runs again: 'streamrep gateway start -cluster newyork', then
'streamrep gateway run -cluster newyork -id gw1' (or the DAG stream_gateway_service, action start).
demo state kept in $STREAMREP_HOME (try: STREAMREP_HOME=$STREAMREP_HOME .venv/bin/streamrep stream replica list -path /mapr/sanfrancisco/activity -json)
EOF
