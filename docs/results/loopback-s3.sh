# Sourced by the results scripts that need an S3-compatible store: starts `rclone serve s3`
# on a free port of 127.0.0.1 over "$WORK/served" (bucket "bench"), kills it on exit, waits
# until it answers, and sets PORT, SERVER (its pid) and OPTIONS (the s3fs storage options).
PORT=$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$WORK/served/bench"
touch "$WORK/rclone.conf"
RCLONE_CONFIG="$WORK/rclone.conf" rclone serve s3 --addr "127.0.0.1:$PORT" \
    --auth-key AKIDBENCH01,secretbench01 "$WORK/served" > "$WORK/rclone.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER' EXIT
OPTIONS="{\"key\": \"AKIDBENCH01\", \"secret\": \"secretbench01\", \"client_kwargs\": {\"endpoint_url\": \"http://127.0.0.1:$PORT\"}}"
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break; sleep 0.1; done
