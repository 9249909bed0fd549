#!/usr/bin/env bash
# The main job on embedded clusters: two clusters, a stream with topics, messages in and out,
# and the replica registered the MapR way. Every step is a real `streamrep` command.
set -euo pipefail
cd "$(dirname "$0")/.."
export STREAMREP_HOME="${STREAMREP_HOME:-$PWD/.streamrep-demo}"
rm -rf "$STREAMREP_HOME"
S=.venv/bin/streamrep
step() { printf '\n$ streamrep %s\n' "$*"; "$S" "$@"; }

step cluster add -name sanfrancisco
step cluster add -name newyork
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

# The seven manual steps of the seeds ("Setting Up Primary-Secondary Stream Replication Manually").
step stream create -path /mapr/newyork/activity -copymetafrom /mapr/sanfrancisco/activity
step stream replica add -path /mapr/sanfrancisco/activity -replica /mapr/newyork/activity -paused true
step stream replica list -path /mapr/sanfrancisco/activity
step stream upstream add -path /mapr/newyork/activity -upstream /mapr/sanfrancisco/activity
step stream upstream list -path /mapr/newyork/activity
step copystream -src /mapr/sanfrancisco/activity -dst /mapr/newyork/activity
step stream replica resume -path /mapr/sanfrancisco/activity -replica /mapr/newyork/activity

printf '\n$ (5 more orders while replication runs) | streamrep produce -path /mapr/sanfrancisco/activity:orders\n'
for i in $(seq 3 7); do echo "order-$i"; done | "$S" produce -path /mapr/sanfrancisco/activity:orders
step cluster gateway set -dstcluster newyork -gateways "gw1"
step stream replica list -path /mapr/sanfrancisco/activity

# The gateway of newyork, a Spark Structured Streaming job: -once replicates what is there and exits.
step gateway run -cluster newyork -id gw1 -once true
step stream replica list -path /mapr/sanfrancisco/activity
step consume -path /mapr/newyork/activity:orders -fromstart true
echo
echo "demo state kept in $STREAMREP_HOME (try: STREAMREP_HOME=$STREAMREP_HOME .venv/bin/streamrep stream replica list -path /mapr/sanfrancisco/activity -json)"
