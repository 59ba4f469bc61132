# Sourced by the rehearsals (two-node-rehearsal.sh, elastic-rehearsal.sh): what they share.
#   free_port      prints a free TCP port on 127.0.0.1
#   start_store    serves "$WORK/store" over S3 on 127.0.0.1 (rclone serve s3; on real
#                  machines: S3, or MinIO/Ceph reachable by every node), appends its pid
#                  to PIDS and exports ASEPR_STORAGE_OPTIONS for every asepr command after it
free_port() { python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

start_store() {
    local port
    port=$(free_port)
    touch "$WORK/rclone.conf"
    RCLONE_CONFIG="$WORK/rclone.conf" rclone serve s3 --addr "127.0.0.1:$port" \
        --auth-key AKIDREHEARSAL1,secretrehearsal1 "$WORK/store" > "$WORK/store.log" 2>&1 &
    PIDS+=($!)
    export ASEPR_STORAGE_OPTIONS="{\"key\": \"AKIDREHEARSAL1\", \"secret\": \"secretrehearsal1\", \"client_kwargs\": {\"endpoint_url\": \"http://127.0.0.1:$port\"}}"
    for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
}
