#!/usr/bin/env bash
# Test harness: a real kube-apiserver + etcd on loopback, and on request the
# rest of a control plane (kube-controller-manager, kube-scheduler) with kwok
# playing the kubelets.
#
#   kube.sh build        build kube-apiserver, kube-controller-manager, kube-scheduler
#                        and etcd (one k8s.io/kubernetes version) and kwok from the Go
#                        module proxy into ${NODEWRIGHT_CACHE:-$HOME/.cache/nodewright}/kube/
#                        (each binary skipped when already there; --force rebuilds)
#   kube.sh start DIR    start etcd + kube-apiserver (fresh, empty cluster) with all
#                        state, certs, logs and pids in DIR; waits for /readyz, writes
#                        DIR/env, DIR/admin.kubeconfig, DIR/function.kubeconfig; returns
#                        with both servers running in the background
#   kube.sh start --control-plane DIR
#                        the same, plus kube-controller-manager, kube-scheduler and kwok
#                        (waits until each is up; DIR/env says KUBE_CONTROL_PLANE=1)
#   kube.sh stop DIR     stop the processes that `start DIR` started (pids from DIR)
#   kube.sh bindir       print the directory holding the Kubernetes binaries
#
# Environment:
#   NODEWRIGHT_CACHE     cache root (default $HOME/.cache/nodewright)
#   KUBE_START_TIMEOUT   seconds to wait for readiness (default 180)
#
# See README.md beside this file.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

die() { echo "kube.sh: error: $*" >&2; exit 1; }
log() { echo "kube.sh: $*" >&2; }

# --- versions (read from the wrapper modules, so no Go is needed to find them) ---
mod_version() { # FILE MODULE
  local v
  v="$(awk -v m="$2" '$1 == "require" { $1 = ""; $0 = $0 } $1 == m && $2 ~ /^v/ { print $2; exit }' "$1")"
  [ -n "$v" ] || die "cannot find $2 in $1"
  printf '%s\n' "$v"
}
K8S_VERSION="$(mod_version "$HERE/kubernetes/go.mod" k8s.io/kubernetes)"
ETCD_VERSION="$(mod_version "$HERE/etcd/go.mod" go.etcd.io/etcd/server/v3)"
KWOK_VERSION="$(mod_version "$HERE/kwok/go.mod" sigs.k8s.io/kwok)"
VERSION="${K8S_VERSION}-etcd-${ETCD_VERSION}"
CACHE_ROOT="${NODEWRIGHT_CACHE:-$HOME/.cache/nodewright}"
BIN_DIR="$CACHE_ROOT/kube/$VERSION/bin"
KWOK_DIR="$CACHE_ROOT/kube/kwok-$KWOK_VERSION/bin"
APISERVER_BIN="$BIN_DIR/kube-apiserver"
CONTROLLER_MANAGER_BIN="$BIN_DIR/kube-controller-manager"
SCHEDULER_BIN="$BIN_DIR/kube-scheduler"
ETCD_BIN="$BIN_DIR/etcd"
KWOK_BIN="$KWOK_DIR/kwok"

need() { # CMD WHY
  command -v "$1" >/dev/null 2>&1 || die "'$1' is not installed; it is needed $2"
}

human_size() { du -h "$1" | cut -f1; }

# ------------------------------------------------------------------ build ----
# sound BIN: BIN runs and reports the version this script builds. A file
# that merely exists is not enough: a cache restored from a machine that
# stopped right after a build can hold an empty or truncated binary (an
# empty file even "runs", as an empty shell script, and exits 0 silently).
sound() { # BIN
  local bin="$1" want out
  case "${bin##*/}" in
    etcd) want="etcd Version: ${ETCD_VERSION#v}" ;;
    kwok) want="kwok version $KWOK_VERSION" ;;
    *) want="Kubernetes $K8S_VERSION" ;;
  esac
  [ -x "$bin" ] && [ -s "$bin" ] || return 1
  out="$(timeout 30 "$bin" --version 2>/dev/null || true)"
  case "$out" in *"$want"*) return 0 ;; esac
  return 1
}

all_built() {
  sound "$APISERVER_BIN" && sound "$ETCD_BIN" && sound "$CONTROLLER_MANAGER_BIN" \
    && sound "$SCHEDULER_BIN" && sound "$KWOK_BIN"
}

# build_one BIN MODULE_DIR PACKAGE LDFLAGS: go build PACKAGE in MODULE_DIR to BIN
# (through a temporary file, so an interrupted build leaves nothing half-written),
# unless BIN exists and --force was not given.
build_one() {
  local bin="$1" dir="$2" pkg="$3" ldflags="$4" t0 tmp
  if [ "$FORCE" = 0 ] && sound "$bin"; then
    return 0
  fi
  [ -e "$bin" ] && log "${bin##*/} in the cache does not run as $K8S_VERSION/$ETCD_VERSION/$KWOK_VERSION; rebuilding it"
  t0=$(date +%s)
  tmp="$bin.tmp.$$"
  if ! (cd "$dir" && go build -trimpath -ldflags="$ldflags" -o "$tmp" "$pkg"); then
    rm -f "$tmp"
    die "building ${bin##*/} failed (see the Go errors above)"
  fi
  # On disk before the rename: a machine stopped right after it must not
  # keep a name pointing at a file whose data was never written.
  sync "$tmp" 2>/dev/null || sync
  mv -f "$tmp" "$bin"
  sound "$bin" || die "${bin##*/} was built but does not report its version (\`$bin --version\`)"
  log "${bin##*/} built in $(( $(date +%s) - t0 ))s ($(human_size "$bin"))"
}

cmd_build() {
  FORCE=0
  [ "${1:-}" = "--force" ] && FORCE=1
  if [ $FORCE = 0 ] && all_built; then
    log "binaries for $VERSION and kwok $KWOK_VERSION already built in $BIN_DIR and $KWOK_DIR (use 'build --force' to rebuild)"
    return 0
  fi
  command -v go >/dev/null 2>&1 || die "Go is not installed (or not on PATH). Building Kubernetes $K8S_VERSION, etcd $ETCD_VERSION and kwok $KWOK_VERSION needs Go >= 1.26 and access to the Go module proxy."
  mkdir -p "$BIN_DIR" "$KWOK_DIR"

  # Serialise concurrent builds into the same cache directory.
  if command -v flock >/dev/null 2>&1; then
    exec 9>"$BIN_DIR/.build.lock"
    BUILD_LOCK_OPEN=1
    flock 9
    if [ $FORCE = 0 ] && all_built; then
      log "binaries for $VERSION and kwok $KWOK_VERSION were built by a concurrent run"
      exec 9>&-
      return 0
    fi
  fi

  log "building Kubernetes $K8S_VERSION (kube-apiserver, kube-controller-manager, kube-scheduler), etcd $ETCD_VERSION and kwok $KWOK_VERSION with $(go version | awk '{print $3}') into $CACHE_ROOT/kube"
  log "(a cold build takes ~10-15 min on 2 cores, more if the Go module cache is empty too)"
  # GOWORK=off: never pick up a go.work from a parent directory.
  # CGO_ENABLED=0: static binaries, as upstream ships them.
  export GOWORK=off CGO_ENABLED=0
  local total0
  total0=$(date +%s)

  local vpkg=k8s.io/component-base/version cpkg=k8s.io/client-go/pkg/version
  local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  local kldflags="-s -w"
  local p
  for p in $vpkg $cpkg; do
    kldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.gitCommit="
  done

  # The three share most of their packages: the Go build cache makes the
  # second and third far cheaper than the first.
  build_one "$APISERVER_BIN" "$HERE/kubernetes" k8s.io/kubernetes/cmd/kube-apiserver "$kldflags"
  build_one "$SCHEDULER_BIN" "$HERE/kubernetes" k8s.io/kubernetes/cmd/kube-scheduler "$kldflags"
  build_one "$CONTROLLER_MANAGER_BIN" "$HERE/kubernetes" k8s.io/kubernetes/cmd/kube-controller-manager "$kldflags"
  build_one "$ETCD_BIN" "$HERE/etcd" . "-s -w"
  build_one "$KWOK_BIN" "$HERE/kwok" sigs.k8s.io/kwok/cmd/kwok "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}"
  log "build done in $(( $(date +%s) - total0 ))s: $BIN_DIR, $KWOK_DIR"
  [ -n "${BUILD_LOCK_OPEN:-}" ] && exec 9>&-
  return 0
}

# ------------------------------------------------------------ helpers -------
# A port that nothing listens on, outside the kernel's ephemeral range
# (32768-60999 by default), so outgoing connections do not race for it.
# A remaining race (someone binds it before we do) is handled by retrying.
pick_port() { # VAR: sets VAR to the port
  local p
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 12000))
    case " ${USED_PORTS:-} " in *" $p "*) continue ;; esac
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      USED_PORTS="${USED_PORTS:-} $p"
      printf -v "$1" '%s' "$p"
      return 0
    fi
  done
  die "could not find a free port on 127.0.0.1"
}

# PIDFILE BIN -> prints pid if the process in PIDFILE is alive and runs a
# binary with BIN's file name (guards against a recycled pid).
live_pid() {
  local pidfile="$1" bin="$2" pid argv0
  [ -f "$pidfile" ] || return 1
  pid="$(cat "$pidfile" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [ -r "/proc/$pid/cmdline" ] || return 1
  argv0="$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -n1 || true)"
  [ "${argv0##*/}" = "${bin##*/}" ] || return 1
  printf '%s\n' "$pid"
}

# PIDFILE BIN NAME: SIGTERM, wait, SIGKILL. Only the recorded pid is touched,
# and only if it still runs the binary we started.
stop_pid() {
  local pidfile="$1" bin="$2" name="$3" pid
  if ! pid="$(live_pid "$pidfile" "$bin")"; then
    rm -f "$pidfile"
    return 0
  fi
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "$name (pid $pid) did not exit after 10s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
  fi
  rm -f "$pidfile"
}

abs_dir() { mkdir -p "$1" && (cd "$1" && pwd); }

gen_certs() { # DIR
  local d="$1" ext
  (
    umask 077
    openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 \
      -keyout "$d/ca.key" -out "$d/ca.crt" -subj "/CN=nodewright-test-ca" \
      -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -addext "subjectKeyIdentifier=hash" 2>/dev/null
    openssl req -new -newkey rsa:2048 -nodes -sha256 \
      -keyout "$d/apiserver.key" -out "$d/apiserver.csr" -subj "/CN=kube-apiserver" 2>/dev/null
    ext="$d/apiserver.ext"
    cat >"$ext" <<'EOF'
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid
EOF
    openssl x509 -req -sha256 -days 365 -in "$d/apiserver.csr" \
      -CA "$d/ca.crt" -CAkey "$d/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
      -extfile "$ext" -out "$d/apiserver.crt" 2>/dev/null
    rm -f "$d/apiserver.csr" "$ext"
    # Service-account token signing key pair.
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$d/sa.key" 2>/dev/null
    openssl pkey -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
  ) || die "generating certificates with openssl failed"
  chmod 644 "$d/ca.crt" "$d/apiserver.crt" "$d/sa.pub"
}

write_kubeconfig() { # FILE USER TOKEN URL CAFILE
  local file="$1" user="$2" token="$3" url="$4" ca_data
  ca_data="$(base64 -w0 <"$5")"
  (
    umask 077
    cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: nodewright-test
  cluster:
    server: $url
    certificate-authority-data: $ca_data
users:
- name: $user
  user:
    token: $token
contexts:
- name: $user
  context:
    cluster: nodewright-test
    user: $user
    namespace: default
current-context: $user
EOF
  )
}

tail_log() { # FILE
  echo "---- last lines of $1 ----" >&2
  tail -n 30 "$1" >&2 || true
  echo "----" >&2
}

# One attempt at starting both servers. Returns 0 on success, 2 if a port was
# taken (caller retries with new ports), dies on any other failure.
start_attempt() {
  local d="$1" timeout="$2"
  USED_PORTS=""
  pick_port ETCD_CLIENT_PORT
  pick_port ETCD_PEER_PORT
  pick_port APISERVER_PORT
  local etcd_url="http://127.0.0.1:$ETCD_CLIENT_PORT"
  local peer_url="http://127.0.0.1:$ETCD_PEER_PORT"
  APISERVER_URL="https://127.0.0.1:$APISERVER_PORT"
  rm -rf "$d/etcd-data"

  # setsid: own session, so a terminal's SIGINT/SIGHUP does not reach the servers;
  # all fds redirected, so callers reading our stdout/stderr see EOF when we exit.
  setsid "$ETCD_BIN" \
    --name nodewright-test \
    --data-dir "$d/etcd-data" \
    --listen-client-urls "$etcd_url" \
    --advertise-client-urls "$etcd_url" \
    --listen-peer-urls "$peer_url" \
    --initial-advertise-peer-urls "$peer_url" \
    --initial-cluster "nodewright-test=$peer_url" \
    --initial-cluster-state new \
    --unsafe-no-fsync \
    --log-outputs stderr \
    </dev/null >"$d/etcd.log" 2>&1 &
  echo $! >"$d/etcd.pid"

  local deadline=$(( $(date +%s) + timeout ))
  until curl -fsS --max-time 2 "$etcd_url/health" 2>/dev/null | grep -q '"health":"true"'; do
    if ! live_pid "$d/etcd.pid" "$ETCD_BIN" >/dev/null; then
      if grep -q 'address already in use' "$d/etcd.log"; then
        log "etcd: port taken, retrying with other ports"; rm -f "$d/etcd.pid"; return 2
      fi
      tail_log "$d/etcd.log"; rm -f "$d/etcd.pid"
      die "etcd exited during startup (log: $d/etcd.log)"
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      tail_log "$d/etcd.log"; stop_pid "$d/etcd.pid" "$ETCD_BIN" etcd
      die "etcd not healthy after ${timeout}s (log: $d/etcd.log)"
    fi
    sleep 0.2
  done

  # Admission: the defaults minus ServiceAccount, which rejects pods until the
  # (absent) service-account controller has created the namespace's `default`
  # ServiceAccount. Everything else in the default set runs inside the apiserver.
  setsid "$APISERVER_BIN" \
    --etcd-servers "$etcd_url" \
    --bind-address 127.0.0.1 \
    --advertise-address 127.0.0.1 \
    --secure-port "$APISERVER_PORT" \
    --cert-dir "$d/apiserver-certs" \
    --tls-cert-file "$d/apiserver.crt" \
    --tls-private-key-file "$d/apiserver.key" \
    --token-auth-file "$d/tokens.csv" \
    --authorization-mode RBAC \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$d/sa.pub" \
    --service-account-signing-key-file "$d/sa.key" \
    --service-cluster-ip-range 10.96.0.0/16 \
    --disable-admission-plugins ServiceAccount \
    --allow-privileged=true \
    --endpoint-reconciler-type none \
    --profiling=false \
    --v 1 \
    </dev/null >"$d/kube-apiserver.log" 2>&1 &
  echo $! >"$d/kube-apiserver.pid"

  local out=""
  while :; do
    out="$(curl -sS --max-time 3 --cacert "$d/ca.crt" \
      -H "Authorization: Bearer $ADMIN_TOKEN" "$APISERVER_URL/readyz" 2>/dev/null || true)"
    [ "$out" = "ok" ] && break
    if ! live_pid "$d/kube-apiserver.pid" "$APISERVER_BIN" >/dev/null; then
      rm -f "$d/kube-apiserver.pid"
      stop_pid "$d/etcd.pid" "$ETCD_BIN" etcd
      if grep -q 'address already in use' "$d/kube-apiserver.log"; then
        log "kube-apiserver: port taken, retrying with other ports"; return 2
      fi
      tail_log "$d/kube-apiserver.log"
      die "kube-apiserver exited during startup (log: $d/kube-apiserver.log)"
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      tail_log "$d/kube-apiserver.log"
      [ -n "$out" ] && echo "last /readyz answer: $out" >&2
      stop_pid "$d/kube-apiserver.pid" "$APISERVER_BIN" kube-apiserver
      stop_pid "$d/etcd.pid" "$ETCD_BIN" etcd
      die "kube-apiserver not ready after ${timeout}s (log: $d/kube-apiserver.log)"
    fi
    sleep 0.5
  done
  return 0
}

# ------------------------------------------------------- control plane ----
# start_control_plane DIR TIMEOUT: kube-controller-manager and kube-scheduler
# as the test admin (both on loopback, their health endpoints on free
# ports), and kwok playing the kubelets of the Nodes annotated
# kwok.x-k8s.io/node=fake (stages in kwok/stages.yaml). Waits until the
# three answer /healthz; dies (stopping everything) if one does not.
start_control_plane() {
  local d="$1" timeout="$2" kcm_port sched_port kwok_port
  USED_PORTS="${USED_PORTS:-}"
  pick_port kcm_port
  pick_port sched_port
  pick_port kwok_port
  local kubeconfig="$d/admin.kubeconfig"
  cp "$HERE/kwok/stages.yaml" "$d/kwok.yaml"

  # Client rate limits well above a 1,000-pod burst's (the defaults of
  # 20-50 requests/s would make the controllers, not nodewright, the
  # bottleneck of a scale-up). Node health as on a cluster (a kubelet
  # silent for 50 s is NotReady); the other controllers at their defaults.
  setsid "$CONTROLLER_MANAGER_BIN" \
    --kubeconfig "$kubeconfig" \
    --authentication-kubeconfig "$kubeconfig" \
    --authorization-kubeconfig "$kubeconfig" \
    --authorization-always-allow-paths /healthz,/readyz,/livez \
    --bind-address 127.0.0.1 \
    --secure-port "$kcm_port" \
    --cert-dir "$d/kube-controller-manager-certs" \
    --leader-elect=false \
    --root-ca-file "$d/ca.crt" \
    --service-account-private-key-file "$d/sa.key" \
    --use-service-account-credentials=false \
    --kube-api-qps 500 \
    --kube-api-burst 1000 \
    --profiling=false \
    --v 1 \
    </dev/null >"$d/kube-controller-manager.log" 2>&1 &
  echo $! >"$d/kube-controller-manager.pid"

  setsid "$SCHEDULER_BIN" \
    --kubeconfig "$kubeconfig" \
    --authentication-kubeconfig "$kubeconfig" \
    --authorization-kubeconfig "$kubeconfig" \
    --authorization-always-allow-paths /healthz,/readyz,/livez \
    --bind-address 127.0.0.1 \
    --secure-port "$sched_port" \
    --cert-dir "$d/kube-scheduler-certs" \
    --leader-elect=false \
    --kube-api-qps 500 \
    --kube-api-burst 1000 \
    --profiling=false \
    --v 1 \
    </dev/null >"$d/kube-scheduler.log" 2>&1 &
  echo $! >"$d/kube-scheduler.pid"

  # HOME in DIR: kwok would also read ~/.kwok/kwok.yaml.
  HOME="$d" setsid "$KWOK_BIN" \
    --kubeconfig "$kubeconfig" \
    --config "$d/kwok.yaml" \
    --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --node-lease-duration-seconds 40 \
    --cidr 10.0.0.1/16 \
    --node-ip 10.255.0.1 \
    --server-address "127.0.0.1:$kwok_port" \
    </dev/null >"$d/kwok.log" 2>&1 &
  echo $! >"$d/kwok.pid"

  local deadline=$(( $(date +%s) + timeout )) name port pidfile bin ok
  for name in kube-controller-manager:$kcm_port:https kube-scheduler:$sched_port:https kwok:$kwok_port:http; do
    port="${name#*:}"; port="${port%%:*}"
    local scheme="${name##*:}"
    name="${name%%:*}"
    pidfile="$d/$name.pid"
    case "$name" in
      kube-controller-manager) bin="$CONTROLLER_MANAGER_BIN" ;;
      kube-scheduler) bin="$SCHEDULER_BIN" ;;
      kwok) bin="$KWOK_BIN" ;;
    esac
    ok=0
    local why="no healthy answer on port $port within ${timeout}s"
    while :; do
      if [ "$(curl -ksS --max-time 2 "$scheme://127.0.0.1:$port/healthz" 2>/dev/null || true)" = "ok" ]; then
        ok=1; break
      fi
      if ! live_pid "$pidfile" "$bin" >/dev/null; then
        # Our own child: its exit status says how it ended (>128: a signal).
        local status=0
        wait "$(cat "$pidfile")" 2>/dev/null || status=$?
        why="it exited with status $status; binary: $(ls -l "$bin" 2>&1)"
        break
      fi
      [ "$(date +%s)" -ge "$deadline" ] && break
      sleep 0.3
    done
    if [ $ok = 0 ]; then
      tail_log "$d/$name.log"
      cmd_stop "$d" >/dev/null 2>&1 || true
      die "$name did not become healthy: $why (log: $d/$name.log)"
    fi
  done
  log "control plane up: kube-controller-manager (pid $(cat "$d/kube-controller-manager.pid")), kube-scheduler (pid $(cat "$d/kube-scheduler.pid")), kwok $KWOK_VERSION (pid $(cat "$d/kwok.pid"))"
}

# ------------------------------------------------------------------ start ----
cmd_start() {
  local control_plane=0
  if [ "${1:-}" = "--control-plane" ]; then
    control_plane=1
    shift
  fi
  [ $# -eq 1 ] || die "usage: kube.sh start [--control-plane] DIR"
  need curl "to probe the servers' health"
  need openssl "to generate certificates, keys and tokens"
  need setsid "to detach the servers (util-linux)"
  need base64 "to embed the CA in kubeconfigs (coreutils)"
  local d
  d="$(abs_dir "$1")"

  if live_pid "$d/kube-apiserver.pid" "$APISERVER_BIN" >/dev/null \
     || live_pid "$d/etcd.pid" "$ETCD_BIN" >/dev/null; then
    die "servers from an earlier 'start $d' are still running; run 'kube.sh stop $d' first"
  fi

  if ! sound "$APISERVER_BIN" || ! sound "$ETCD_BIN" \
     || { [ $control_plane = 1 ] && ! all_built; }; then
    log "binaries not built yet; building first"
    cmd_build
  fi

  local t0 timeout="${KUBE_START_TIMEOUT:-180}"
  t0=$(date +%s)
  # A fresh, empty cluster every time: drop whatever an earlier run left.
  rm -rf "$d/etcd-data" "$d/apiserver-certs"
  rm -f "$d/env" "$d/admin.kubeconfig" "$d/function.kubeconfig" "$d/tokens.csv"
  gen_certs "$d"

  ADMIN_TOKEN="$(openssl rand -hex 32)"
  FUNCTION_TOKEN="$(openssl rand -hex 32)"
  # token,user,uid,"groups"  (every authenticated user also gets system:authenticated)
  (
    umask 077
    printf '%s,nodewright-admin,nodewright-admin,"system:masters"\n' "$ADMIN_TOKEN" >"$d/tokens.csv"
    printf '%s,nodewright,nodewright\n' "$FUNCTION_TOKEN" >>"$d/tokens.csv"
  )

  local attempt rc
  for attempt in 1 2 3 4 5; do
    rc=0
    start_attempt "$d" "$timeout" || rc=$?
    [ $rc -eq 0 ] && break
    [ $rc -eq 2 ] || die "start failed"
    [ $attempt -lt 5 ] || die "could not find free ports after 5 attempts"
  done

  write_kubeconfig "$d/admin.kubeconfig" nodewright-admin "$ADMIN_TOKEN" "$APISERVER_URL" "$d/ca.crt"
  write_kubeconfig "$d/function.kubeconfig" nodewright "$FUNCTION_TOKEN" "$APISERVER_URL" "$d/ca.crt"
  if [ $control_plane = 1 ]; then
    start_control_plane "$d" "$timeout"
  fi

  local envtmp="$d/.env.tmp"
  (
    umask 077
    {
      echo "# Written by tests/harness/kube/kube.sh start; source it from a shell."
      printf 'KUBE_APISERVER_URL=%q\n' "$APISERVER_URL"
      printf 'KUBE_CA_FILE=%q\n' "$d/ca.crt"
      printf 'KUBE_ADMIN_TOKEN=%q\n' "$ADMIN_TOKEN"
      printf 'KUBE_ADMIN_USER=%q\n' nodewright-admin
      printf 'KUBE_FUNCTION_TOKEN=%q\n' "$FUNCTION_TOKEN"
      printf 'KUBE_FUNCTION_USER=%q\n' nodewright
      printf 'KUBE_ADMIN_KUBECONFIG=%q\n' "$d/admin.kubeconfig"
      printf 'KUBE_FUNCTION_KUBECONFIG=%q\n' "$d/function.kubeconfig"
      printf 'KUBE_ETCD_URL=%q\n' "http://127.0.0.1:$ETCD_CLIENT_PORT"
      printf 'KUBE_APISERVER_PID=%q\n' "$(cat "$d/kube-apiserver.pid")"
      printf 'KUBE_ETCD_PID=%q\n' "$(cat "$d/etcd.pid")"
      printf 'KUBE_VERSION=%q\n' "$K8S_VERSION"
      printf 'KUBE_ETCD_VERSION=%q\n' "$ETCD_VERSION"
      printf 'KUBE_HARNESS_DIR=%q\n' "$d"
      printf 'KUBE_CONTROL_PLANE=%q\n' "$control_plane"
      if [ $control_plane = 1 ]; then
        printf 'KUBE_CONTROLLER_MANAGER_PID=%q\n' "$(cat "$d/kube-controller-manager.pid")"
        printf 'KUBE_SCHEDULER_PID=%q\n' "$(cat "$d/kube-scheduler.pid")"
        printf 'KUBE_KWOK_PID=%q\n' "$(cat "$d/kwok.pid")"
        printf 'KUBE_KWOK_VERSION=%q\n' "$KWOK_VERSION"
      fi
    } >"$envtmp"
  )
  mv -f "$envtmp" "$d/env"
  log "kube-apiserver $K8S_VERSION ready at $APISERVER_URL after $(( $(date +%s) - t0 ))s" \
      "(pids: apiserver $(cat "$d/kube-apiserver.pid"), etcd $(cat "$d/etcd.pid")); env: $d/env"
}

# ------------------------------------------------------------------- stop ----
cmd_stop() {
  [ $# -eq 1 ] || die "usage: kube.sh stop DIR"
  [ -d "$1" ] || die "no such directory: $1"
  local d
  d="$(cd "$1" && pwd)"
  if [ ! -f "$d/kube-apiserver.pid" ] && [ ! -f "$d/etcd.pid" ] && [ ! -f "$d/kwok.pid" ] \
     && [ ! -f "$d/kube-scheduler.pid" ] && [ ! -f "$d/kube-controller-manager.pid" ]; then
    log "nothing to stop in $d"
    return 0
  fi
  # The control plane first (if started), then the server it talks to.
  stop_pid "$d/kwok.pid" "$KWOK_BIN" kwok
  stop_pid "$d/kube-scheduler.pid" "$SCHEDULER_BIN" kube-scheduler
  stop_pid "$d/kube-controller-manager.pid" "$CONTROLLER_MANAGER_BIN" kube-controller-manager
  stop_pid "$d/kube-apiserver.pid" "$APISERVER_BIN" kube-apiserver
  stop_pid "$d/etcd.pid" "$ETCD_BIN" etcd
  log "stopped (logs and data left in $d)"
}

usage() {
  sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

case "${1:-}" in
  build) shift; cmd_build "$@" ;;
  start) shift; cmd_start "$@" ;;
  stop) shift; cmd_stop "$@" ;;
  bindir) echo "$BIN_DIR" ;;
  -h|--help|help|"") usage ;;
  *) echo "kube.sh: unknown command: $1" >&2; usage ;;
esac
