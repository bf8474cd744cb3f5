#!/usr/bin/env bash
# A Twitter-style app on Herald triggers: users, follows, tweets and timelines.
# Start Herald first (cargo run --release -p herald -- serve), then run this script.
# HERALD_URL overrides the server address (default http://127.0.0.1:7070).
set -euo pipefail
cd "$(dirname "$0")"
H="${HERALD_URL:-http://127.0.0.1:7070}"

call() { # method path [json body]
  curl -sS --fail-with-body -X "$1" "$H$2" ${3:+-H 'content-type: application/json' -d "$3"}
  echo
}

trigger() { # name collection op source-file
  python3 - "$2" "$3" "$4" > /tmp/herald-trigger.json <<'PY'
import json, sys
collection, op, path = sys.argv[1:]
print(json.dumps({"collection": collection, "on": [op], "function": open(path).read()}))
PY
  curl -sS --fail-with-body -X PUT "$H/v1/triggers/$1" -H 'content-type: application/json' \
    --data-binary @/tmp/herald-trigger.json > /dev/null
  echo "trigger $1 installed on $3 of $2"
}

echo "== triggers"
trigger fanout tweets insert fanout.js
trigger unfollow follows delete unfollow.js

echo "== users and follows (bob and cy follow ann; cy follows bob)"
for u in ann bob cy; do call PUT "/v1/docs/users/$u" '{"tweets": 0}' > /dev/null; done
call POST /v1/commit '{"writes": [
  {"op": "put", "collection": "follows", "id": "bob-ann", "doc": {"follower": "bob", "followee": "ann"}},
  {"op": "put", "collection": "follows", "id": "cy-ann",  "doc": {"follower": "cy",  "followee": "ann"}},
  {"op": "put", "collection": "follows", "id": "cy-bob",  "doc": {"follower": "cy",  "followee": "bob"}}]}'

echo "== tweets (acknowledged at once; the fan-out runs from the trigger queue)"
call POST /v1/docs/tweets '{"_id": "t1", "by": "ann", "text": "hello", "at": 1}'
call POST /v1/docs/tweets '{"_id": "t2", "by": "bob", "text": "hi ann", "at": 2}'
call POST /v1/docs/tweets '{"_id": "t3", "by": "ann", "text": "triggers!", "at": 3}'

wait_drained() {
  for _ in $(seq 1 100); do
    if call GET "/v1/triggers/$1" | grep -q '"pending":0,'; then return; fi
    sleep 0.05
  done
  echo "trigger $1 did not drain" >&2; exit 1
}
wait_drained fanout

echo "== cy's timeline, newest first"
call POST /v1/query '{"collection": "timelines/cy/entries", "sort": {"at": -1}}'
echo "== ann's tweet count"
call GET /v1/docs/users/ann

echo "== cy unfollows ann; ann's tweets leave cy's timeline"
call DELETE /v1/docs/follows/cy-ann > /dev/null
wait_drained unfollow
call POST /v1/query '{"collection": "timelines/cy/entries", "sort": {"at": -1}}'

echo "== the fan-out trigger's status"
call GET /v1/triggers/fanout
