# shellcheck shell=bash
# Implementation of e2e/cluster. Sourced; expects HERE, REPO, D, CACHE, STATE.

NODE_NAME=tusk-node
BRIDGE=tusk0
NODE_IP=198.18.0.1
NODE_POD_CIDR=198.18.0.0/24
CLUSTER_CIDR=198.18.0.0/16
SERVICE_CIDR=198.19.0.0/16
API_SERVICE_IP=198.19.0.1
DNS_IP=198.19.0.10
DOMAIN=cluster.local
API_PORT=6443
ETCD_PORT=12379
ETCD_PEER_PORT=12380
COREDNS_VERSION=${COREDNS_VERSION:-v1.12.4}
LOCALPATH_VERSION=${LOCALPATH_VERSION:-v0.0.30}
METALLB_VERSION=${METALLB_VERSION:-v0.15.2}
KUBE_ROUTER_VERSION=${KUBE_ROUTER_VERSION:-v2.1.0}
export COREDNS_VERSION LOCALPATH_VERSION METALLB_VERSION KUBE_ROUTER_VERSION
# The "outside" network on the bridge: clients outside Kubernetes (this host,
# network namespaces of e2e/src/outside.rs) and MetalLB's L2 pool. TEST-NET-2:
# TEST-NET-1 (192.0.2.0/24) is this machine's uplink. e2e/src/outside.rs
# carries the same numbers.
OUTSIDE_IP=198.51.100.1
OUTSIDE_NET=198.51.100.0/24
LB_POOL=198.51.100.64/26
# network namespaces the e2e tests create (e2e/src/outside.rs), removed by down
OUTSIDE_NETNS_PREFIX=tusk-e2e-out-

K8S_VERSION=$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v1\./ {print $2; exit}' "$HERE/tools/go.mod")
BIN=$CACHE/k8s/$K8S_VERSION/bin
PKI=$STATE/pki
CONF=$STATE/conf
LOGS=$STATE/logs
RUN=$STATE/run
CTRD=$STATE/containerd
SOCK=$CTRD/containerd.sock
KUBECONFIG_ADMIN=$STATE/kubeconfig
VOLUMES=$STATE/volumes
# start order; stop order is the reverse
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy)
# the CSI driver e2e/csi-loop and its sidecars (StorageClass tusk-expandable)
CSI_COMPONENTS=(csi-loop csi-provisioner csi-resizer)
CSI_DRIVER=csi-loop.tusk.dev
CSI_DIR=$STATE/csi-loop
CSI_SOCK=$CSI_DIR/csi.sock
CSI_VOLUMES=$CSI_DIR/volumes
CSI_BIN=$("$D/build-csi" --dir)
METALLB_DIR=$CACHE/metallb/$METALLB_VERSION
# NetworkPolicy enforcement (kube-router's policy controller only); started
# once the node is registered, stopped first
NETPOL_COMPONENTS=(kube-router)
# cert-manager's controller (e2e/cert-manager, built by build-cert-manager)
# and the namespace its ClusterIssuers keep their Secrets in
CERTMANAGER_DIR=$("$D/build-cert-manager" --dir)
CERTMANAGER_COMPONENTS=(cert-manager)
CERTMANAGER_NS=cert-manager

# fd 3 = the caller's stderr, so messages survive wait_for's redirections
exec 3>&2
log() { printf '[cluster] %s\n' "$*" >&3; }
die() { printf '[cluster] error: %s\n' "$*" >&3; exit 1; }
kc() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }
ctr_() { ctr --address "$SOCK" --namespace k8s.io "$@"; }

# --- processes ---------------------------------------------------------------
comp_bin() {
  case $1 in
    etcd) echo /usr/bin/etcd ;;
    containerd) echo /usr/bin/containerd ;;
    csi-*) echo "$CSI_BIN/$1" ;;
    kube-router) echo "$CACHE/kube-router/$KUBE_ROUTER_VERSION/kube-router" ;;
    cert-manager) echo "$CERTMANAGER_DIR/cert-manager" ;;
    *) echo "$BIN/$1" ;;
  esac
}

comp_pid() { # prints the pid if the component runs
  local f=$RUN/$1.pid pid exe
  [[ -f $f ]] || return 1
  pid=$(<"$f")
  [[ -n $pid && -d /proc/$pid ]] || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  [[ ${exe% (deleted)} == "$(comp_bin "$1")" ]] || return 1
  echo "$pid"
}

start_comp() { # name args...: returns once the component's binary runs
  local name=$1
  shift
  if comp_pid "$name" >/dev/null; then return 0; fi
  mkdir -p "$LOGS" "$RUN"
  printf '\n==== %s start %s\n' "$name" "$(date -Is)" >>"$LOGS/$name.log"
  setsid "$(comp_bin "$name")" "$@" </dev/null >>"$LOGS/$name.log" 2>&1 3>&- &
  local pid=$!
  await_exec "$name" "$pid"
  echo "$pid" >"$RUN/$name.pid"
}

# $! is the forked shell, which becomes the component only once it has exec'd
# setsid and setsid the binary; on a busy machine that can take a while, and
# comp_pid would meanwhile call the component dead. So wait for the exec here,
# and record the pid only then: whoever reads the pid file judges the binary.
# A pid without an exe (gone, or a zombie) exited. (No job control here, so
# setsid execs in place instead of forking: $! does become the binary.)
await_exec() { # name pid
  local name=$1 pid=$2 want exe=unknown i
  want=$(comp_bin "$name")
  for ((i = 0; i < 1200; i++)); do
    exe=$(readlink "/proc/$pid/exe" 2>/dev/null) ||
      die "$name exited as it started; see $LOGS/$name.log: $(tail -5 "$LOGS/$name.log")"
    [[ ${exe% (deleted)} == "$want" ]] && return 0
    sleep 0.05
  done
  kill -KILL "$pid" 2>/dev/null || true
  die "$name did not start within 60s: pid $pid still ran $exe, not $want (killed)"
}

stop_comps() { # names...: TERM them all, wait up to 15s, then KILL
  local name pid pids=() i
  for name in "$@"; do
    if pid=$(comp_pid "$name"); then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
    rm -f "$RUN/$name.pid"
  done
  for ((i = 0; i < 150; i++)); do
    local alive=0
    for pid in "${pids[@]}"; do [[ -d /proc/$pid ]] && alive=1; done
    ((alive)) || return 0
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
}

wait_for() { # description timeout-seconds command...
  local what=$1 t=$2 i
  shift 2
  for ((i = 0; i < t * 2; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  die "timed out after ${t}s waiting for $what"
}

comp_alive() { comp_pid "$1" >/dev/null || die "$1 exited; see $LOGS/$1.log: $(tail -5 "$LOGS/$1.log")"; }

# --- build & install -----------------------------------------------------------
ensure_parts() {
  "$D/install-deps"
  "$D/build-k8s"
  "$D/build-extras"
  "$D/build-csi" >/dev/null
  "$D/build-cert-manager" >/dev/null
}

# --- PKI -------------------------------------------------------------------------
cert() { # name CN O ext-usage(client|server|both) [SAN]
  local name=$1 cn=$2 o=$3 usage=$4 san=${5:-} subj eku ext
  [[ -s $PKI/$name.crt ]] && return 0
  subj="/CN=$cn"
  [[ -n $o ]] && subj="/O=$o$subj"
  case $usage in
    client) eku=clientAuth ;;
    server) eku=serverAuth ;;
    both) eku=serverAuth,clientAuth ;;
  esac
  ext=$PKI/$name.ext
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$eku"
    [[ -n $san ]] && echo "subjectAltName=$san"
  } >"$ext"
  openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/$name.key" 2>/dev/null
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/${CA_NAME:-ca}.crt" -CAkey "$PKI/${CA_NAME:-ca}.key" \
    -CAcreateserial -days 3650 -sha256 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$ext"
  chmod 600 "$PKI/$name.key"
}

make_ca() { # name CN
  [[ -s $PKI/$1.crt ]] && return 0
  openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/$1.key" 2>/dev/null
  openssl req -x509 -new -key "$PKI/$1.key" -subj "/CN=$2" -days 3650 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -out "$PKI/$1.crt" 2>/dev/null
  chmod 600 "$PKI/$1.key"
}

make_pki() {
  mkdir -p "$PKI"
  chmod 700 "$PKI"
  make_ca ca tusk-ca
  make_ca front-proxy-ca tusk-front-proxy-ca
  cert apiserver kube-apiserver "" server \
    "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.$DOMAIN,DNS:localhost,DNS:$NODE_NAME,IP:127.0.0.1,IP:$API_SERVICE_IP,IP:$NODE_IP"
  cert apiserver-kubelet-client kube-apiserver-kubelet-client "" client
  cert admin tusk-admin system:masters client
  cert controller-manager system:kube-controller-manager "" client
  cert scheduler system:kube-scheduler "" client
  cert kube-proxy system:kube-proxy "" client
  cert kubelet-client "system:node:$NODE_NAME" system:nodes client
  cert kubelet-serving "system:node:$NODE_NAME" system:nodes server "DNS:$NODE_NAME,DNS:localhost,IP:$NODE_IP,IP:127.0.0.1"
  CA_NAME=front-proxy-ca cert front-proxy-client front-proxy-client "" client
  if [[ ! -s $PKI/sa.key ]]; then
    openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
    openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
    chmod 600 "$PKI/sa.key"
  fi
}

kubeconfig() { # file user cert-name
  local f=$1
  [[ -s $f ]] && return 0
  cat >"$f" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: tusk
  cluster:
    server: https://$NODE_IP:$API_PORT
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$3.crt")
    client-key-data: $(base64 -w0 "$PKI/$3.key")
contexts:
- name: tusk
  context: {cluster: tusk, user: $2}
current-context: tusk
EOF
  chmod 600 "$f"
}

# --- network ---------------------------------------------------------------------
net_up() {
  modprobe br_netfilter 2>/dev/null || true
  modprobe overlay 2>/dev/null || true
  modprobe nf_conntrack 2>/dev/null || true
  sysctl -qw net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1 net.ipv4.ip_forward=1
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
  fi
  ip addr replace "$NODE_IP/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  outside_net_up
  # Service IPs are answered by kube-proxy's DNAT; keep anything else on the bridge.
  ip route replace "$SERVICE_CIDR" dev "$BRIDGE" src "$NODE_IP"
  # Pods may talk to each other and to this host, never be forwarded off the machine.
  iptables -w -N TUSK-FORWARD 2>/dev/null || iptables -w -F TUSK-FORWARD
  pod_forward_rules TUSK-FORWARD ACCEPT
  iptables -w -C FORWARD -j TUSK-FORWARD 2>/dev/null || iptables -w -I FORWARD 1 -j TUSK-FORWARD
}

pod_forward_rules() { # chain verdict-for-pod-traffic-that-stays-on-the-bridge
  iptables -w -A "$1" -s "$CLUSTER_CIDR" -o "$BRIDGE" -j "$2"
  iptables -w -A "$1" -s "$CLUSTER_CIDR" -j DROP
  iptables -w -A "$1" -d "$CLUSTER_CIDR" ! -i "$BRIDGE" -j DROP
}

purge_chains() { # iptables|ip6tables: remove jumps to, then flush and delete, KUBE-/CNI-/TUSK- chains
  local ipt=$1 t line c
  command -v "$ipt-save" >/dev/null || return 0
  for t in filter nat mangle; do
    while read -r line; do
      [[ -n $line ]] && eval "$ipt -w -t $t -D ${line#-A }" 2>/dev/null || true
    done < <("$ipt-save" -t "$t" 2>/dev/null | awk '$1=="-A" && $2 !~ /^(KUBE|CNI|TUSK)-/ { for (i = 3; i < NF; i++) if ($i == "-j" && $(i+1) ~ /^(KUBE|CNI|TUSK)-/) { print; break } }')
    for c in $("$ipt-save" -t "$t" 2>/dev/null | awk '$1 ~ /^:(KUBE|CNI|TUSK)-/ {print substr($1, 2)}'); do
      "$ipt" -w -t "$t" -F "$c" 2>/dev/null || true
    done
    for c in $("$ipt-save" -t "$t" 2>/dev/null | awk '$1 ~ /^:(KUBE|CNI|TUSK)-/ {print substr($1, 2)}'); do
      "$ipt" -w -t "$t" -X "$c" 2>/dev/null || true
    done
  done
}

# The outside network's host address on the bridge. Refuses a network some
# other interface already routes: taking its addresses over would cut this
# machine off (that is how TEST-NET-1 was ruled out).
outside_net_up() {
  local other
  other=$(ip -4 -o route show to match "${OUTSIDE_NET%/*}" | awk -v b="$BRIDGE" '$1 != "default" { for (i = 1; i < NF; i++) if ($i == "dev" && $(i+1) != b) print $(i+1) }')
  [[ -z $other ]] || die "outside network $OUTSIDE_NET is already routed via $other; pick another in lib.sh and e2e/src/outside.rs"
  ip addr replace "$OUTSIDE_IP/${OUTSIDE_NET#*/}" dev "$BRIDGE"
}

# Network namespaces (and their veths) that e2e tests left behind.
outside_netns_down() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk -v p="$OUTSIDE_NETNS_PREFIX" 'index($1, p) == 1 {print $1}'); do
    ip netns del "$ns" 2>/dev/null || true
  done
}

net_down() {
  outside_netns_down
  if iptables -w -C FORWARD -j TUSK-FORWARD 2>/dev/null; then iptables -w -D FORWARD -j TUSK-FORWARD; fi
  iptables -w -F TUSK-FORWARD 2>/dev/null || true
  iptables -w -X TUSK-FORWARD 2>/dev/null || true
  # rules and chains of kube-proxy, kube-router, the kubelet and CNI portmap
  # (KUBE-*, CNI-*), and ours (TUSK-*); then kube-router's ipsets, which its
  # rules no longer reference
  purge_chains iptables
  purge_chains ip6tables
  netpol_ipsets_down
  ip link del "$BRIDGE" 2>/dev/null || true
}

# --- configs ---------------------------------------------------------------------
write_configs() {
  mkdir -p "$CONF" "$CTRD" "$STATE/cni/net.d" "$STATE/kubelet" "$VOLUMES"
  kubeconfig "$KUBECONFIG_ADMIN" tusk-admin admin
  kubeconfig "$CONF/controller-manager.kubeconfig" system:kube-controller-manager controller-manager
  kubeconfig "$CONF/scheduler.kubeconfig" system:kube-scheduler scheduler
  kubeconfig "$CONF/kube-proxy.kubeconfig" system:kube-proxy kube-proxy
  kubeconfig "$CONF/kubelet.kubeconfig" "system:node:$NODE_NAME" kubelet-client

  # no off-machine nameserver for pods with dnsPolicy Default (CoreDNS itself)
  printf '# tusk: pods resolve through CoreDNS only; no upstream nameserver\noptions ndots:1\n' >"$CONF/resolv.conf"

  cat >"$CTRD/config.toml" <<EOF
version = 2
root = "$CTRD/root"
state = "$CTRD/state"
disabled_plugins = ["io.containerd.internal.v1.tracing", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$CTRD/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$CTRD/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:3.10"
  netns_mounts_under_state_dir = true
  enable_unprivileged_ports = false
  # this machine's root lacks CAP_SYS_RESOURCE, so oom_score_adj can't go below
  # containerd's own (kubelet asks -998 for sandboxes/critical pods): clamp it
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$CTRD/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni/net.d"
    max_conf_num = 1
EOF

  cat >"$STATE/cni/net.d/10-tusk.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "tusk",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$STATE/cni/ipam",
        "ranges": [[{"subnet": "$NODE_POD_CIDR", "gateway": "$NODE_IP"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  # the CRI plugin adds the loopback interface itself; keep the conf for completeness
  printf '{"cniVersion": "0.4.0", "name": "lo", "type": "loopback"}\n' >"$STATE/cni/net.d/99-loopback.conf"

  cat >"$CONF/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization:
  mode: Webhook
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
clusterDNS: [$DNS_IP]
clusterDomain: $DOMAIN
containerRuntimeEndpoint: unix://$SOCK
resolvConf: $CONF/resolv.conf
# Disk signals off ("0%" is ignored by the kubelet): the node's disk is the
# host's, shared with the build cache and other tenants, and a percentage of
# it says nothing about this cluster. A CI run once lost its operator pod to
# DiskPressure eviction with 1 GiB still free; a truly full disk fails the
# test that hits it, loudly, instead.
evictionHard:
  memory.available: 100Mi
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 110
podPidsLimit: -1
rotateCertificates: false
serverTLSBootstrap: false
registerNode: true
EOF

  cat >"$CONF/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $CONF/kube-proxy.kubeconfig
mode: iptables
clusterCIDR: $CLUSTER_CIDR
hostnameOverride: $NODE_NAME
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: [primary]
conntrack:
  maxPerCore: 0
EOF
}

# --- components --------------------------------------------------------------------
start_etcd() {
  start_comp etcd --name tusk --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "tusk=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls "" \
    --quota-backend-bytes 4294967296 --auto-compaction-retention 1h --log-level warn
}

start_apiserver() {
  start_comp kube-apiserver \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address "$NODE_IP" --advertise-address "$NODE_IP" --secure-port "$API_PORT" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --client-ca-file "$PKI/ca.crt" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$PKI/ca.crt" --kubelet-preferred-address-types InternalIP \
    --service-account-issuer "https://kubernetes.default.svc.$DOMAIN" \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction,PodSecurity \
    --allow-privileged=true \
    --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" \
    --proxy-client-cert-file "$PKI/front-proxy-client.crt" --proxy-client-key-file "$PKI/front-proxy-client.key" \
    --requestheader-allowed-names front-proxy-client \
    --requestheader-extra-headers-prefix X-Remote-Extra- --requestheader-group-headers X-Remote-Group \
    --requestheader-username-headers X-Remote-User \
    --profiling=false --v=1
}

start_controller_manager() {
  local k=$CONF/controller-manager.kubeconfig
  start_comp kube-controller-manager \
    --kubeconfig "$k" --authentication-kubeconfig "$k" --authorization-kubeconfig "$k" \
    --bind-address 127.0.0.1 --leader-elect=false --controllers '*' \
    --use-service-account-credentials \
    --allocate-node-cidrs --cluster-cidr "$CLUSTER_CIDR" --node-cidr-mask-size 24 \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --root-ca-file "$PKI/ca.crt" --service-account-private-key-file "$PKI/sa.key" \
    --requestheader-client-ca-file "$PKI/front-proxy-ca.crt" \
    --profiling=false --v=1
}

start_scheduler() {
  local k=$CONF/scheduler.kubeconfig
  start_comp kube-scheduler --kubeconfig "$k" --authentication-kubeconfig "$k" --authorization-kubeconfig "$k" \
    --bind-address 127.0.0.1 --leader-elect=false --profiling=false --v=1
}

start_containerd() {
  start_comp containerd --config "$CTRD/config.toml"
}

start_kubelet() {
  start_comp kubelet --config "$CONF/kubelet.yaml" --kubeconfig "$CONF/kubelet.kubeconfig" \
    --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" --root-dir "$STATE/kubelet" \
    --node-labels "tusk.dev/e2e=true" --v=1
}

start_kube_proxy() {
  start_comp kube-proxy --config "$CONF/kube-proxy.yaml" --v=1
}

api_ready() { kc get --raw /readyz; }
node_ready() {
  [[ $(kc get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

# --- images & add-ons ----------------------------------------------------------------
load_images() {
  local t
  if [[ ${TUSK_SKIP_IMAGES:-} == 1 ]]; then
    log "TUSK_SKIP_IMAGES=1: not building/loading the project images"
  elif [[ -x $REPO/e2e/images/build-all && -x $REPO/e2e/images/load ]]; then
    log "images: e2e/images/build-all"
    "$REPO/e2e/images/build-all"
    log "images: e2e/images/load $SOCK"
    "$REPO/e2e/images/load" "$SOCK"
  else
    log "WARNING: e2e/images/build-all or e2e/images/load missing; project images (pause, busybox, postgres, tusk) not loaded"
  fi
  # the add-on images are built here, around the Go-built static binaries
  for t in $("$D/build-images"); do import_image "$t"; done
}

import_image() { # docker-archive tarball named <name>-<version>.tar
  local ref
  ref=localhost/$(basename "$1" .tar | sed -E 's/-(v[0-9][^-]*)$/:\1/')
  if ! ctr_ images ls -q | grep -qx "$ref"; then
    ctr_ images import "$1" >/dev/null
  fi
}

addons() {
  sed -e "s|@DNS_IP@|$DNS_IP|g" -e "s|@DOMAIN@|$DOMAIN|g" -e "s|@COREDNS_VERSION@|$COREDNS_VERSION|g" \
    -e "s|@LOCALPATH_VERSION@|$LOCALPATH_VERSION|g" -e "s|@VOLUMES@|$VOLUMES|g" -e "s|@NODE_NAME@|$NODE_NAME|g" \
    "$D/addons.yaml" | kc apply --server-side --force-conflicts -f - >/dev/null
}

# --- CSI driver ------------------------------------------------------------------
# csi-loop (e2e/csi-loop) serves the CSI services on $CSI_SOCK and registers
# with the kubelet through its plugins_registry; the upstream external-
# provisioner and external-resizer drive it with the admin kubeconfig. All run
# as host processes. Volumes are XFS files under $CSI_VOLUMES, loop-mounted.
csi_registered() {
  kc get csinode "$NODE_NAME" -o 'jsonpath={.spec.drivers[*].name}' | grep -qw "$CSI_DRIVER"
}

# A component still running an older build (the driver's source or a sidecar
# pin changed) is stopped, so the current one starts.
csi_stop_stale() {
  local c pid exe
  for c in "${CSI_COMPONENTS[@]}"; do
    [[ -f $RUN/$c.pid ]] || continue
    pid=$(<"$RUN/$c.pid")
    exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || continue
    exe=${exe% (deleted)}
    if [[ $exe == "$CACHE"/csi-loop/*/bin/"$c" && $exe != "$CSI_BIN/$c" ]]; then
      log "stopping $c of an older build ($exe)"
      kill -TERM "$pid" 2>/dev/null || true
      wait_for "old $c to exit" 15 csi_gone "$pid"
    fi
  done
}
csi_gone() { [[ ! -d /proc/$1 ]]; }

# (Re)start the driver and its sidecars; callable alone on a running cluster
# (`e2e/cluster csi-up`): it touches nothing else.
csi_up() {
  [[ $(id -u) == 0 ]] || die "must run as root (loop devices, mounts)"
  comp_pid kubelet >/dev/null || die "kubelet does not run; start the cluster with: e2e/cluster up"
  CSI_BIN=$("$D/build-csi")
  csi_stop_stale
  mkdir -p "$CSI_VOLUMES"
  log "starting the CSI driver $CSI_DRIVER (csi-loop, csi-provisioner, csi-resizer)"
  start_comp csi-loop --endpoint "$CSI_SOCK" --state-dir "$CSI_VOLUMES" --node-id "$NODE_NAME" \
    --registration-dir "$STATE/kubelet/plugins_registry"
  wait_for "csi-loop socket" 30 test -S "$CSI_SOCK"
  start_comp csi-provisioner --kubeconfig "$KUBECONFIG_ADMIN" --csi-address "$CSI_SOCK" \
    --timeout 60s --retry-interval-max 30s --v 2
  start_comp csi-resizer --kubeconfig "$KUBECONFIG_ADMIN" --csi-address "$CSI_SOCK" \
    --timeout 60s --retry-interval-max 30s --v 2
  kc apply --server-side --force-conflicts -f "$D/csi-loop.yaml" >/dev/null
  wait_for "csi-loop registration with the kubelet (CSINode $NODE_NAME)" 60 csi_registered
}

# After the mounts are gone: detach the loop devices of our volume files
# (a lazily unmounted one is flagged to detach once its last user goes).
csi_detach_loops() {
  local dev back
  command -v losetup >/dev/null || return 0
  while read -r dev back; do
    if [[ $back == "$CSI_VOLUMES"/* ]]; then losetup -d "$dev" 2>/dev/null || true; fi
  done < <(losetup -l -n -O NAME,BACK-FILE 2>/dev/null)
}

csi_loops() { # "dev file" per loop device of ours
  losetup -l -n -O NAME,BACK-FILE 2>/dev/null | awk -v d="$CSI_VOLUMES/" 'index($2, d) == 1 {print $1, $2, $3}'
}

# --- MetalLB ---------------------------------------------------------------------
# Services of type LoadBalancer: MetalLB (controller + speaker, built by
# build-extras, images by build-images) assigns addresses from $LB_POOL and
# answers ARP for them on $BRIDGE; kube-proxy's rules do the rest (DNAT,
# loadBalancerSourceRanges). Pods, not host processes: the speaker looks up
# its own Pod at start (the owner of its ServiceL2Status objects) and exits
# without one.
METALLB_NS=metallb-system
METALLB_PARTS=(metallb-controller metallb-speaker)

lb_manifest() {
  sed -e "s|@METALLB_VERSION@|$METALLB_VERSION|g" -e "s|@BRIDGE@|$BRIDGE|g" \
    -e "s|@OUTSIDE_NET@|$OUTSIDE_NET|g" -e "s|@LB_POOL@|$LB_POOL|g" "$D/metallb.yaml"
}

lb_ready() {
  [[ $(kc -n "$METALLB_NS" get deploy controller -o 'jsonpath={.status.availableReplicas}' 2>/dev/null) == 1 ]] &&
    [[ $(kc -n "$METALLB_NS" get ds speaker -o 'jsonpath={.status.numberReady}' 2>/dev/null) == 1 ]] &&
    kc -n "$METALLB_NS" get l2advertisement outside >/dev/null 2>&1
}

# Install or update MetalLB; callable alone on a running cluster
# (`e2e/cluster lb-up`): it touches nothing else. Pods of an older image are
# replaced by the apply (the image tag is the version).
lb_up() {
  local t
  [[ $(id -u) == 0 ]] || die "must run as root (bridge address)"
  comp_pid kubelet >/dev/null || die "kubelet does not run; start the cluster with: e2e/cluster up"
  "$D/build-extras" >/dev/null
  outside_net_up
  for t in $("$D/build-images"); do
    case $t in */metallb-*) import_image "$t" ;; esac
  done
  log "starting MetalLB $METALLB_VERSION (L2, pool $LB_POOL on $BRIDGE)"
  kc apply --server-side --force-conflicts -f "$METALLB_DIR/crds.yaml" >/dev/null
  kc wait --for condition=established --timeout=60s -f "$METALLB_DIR/crds.yaml" >/dev/null
  # the namespace, then the RBAC (its ServiceAccounts before the pods), then the rest
  lb_manifest | awk -v rbac="$METALLB_DIR/rbac.yaml" '/^---$/ && !done { while ((getline l < rbac) > 0) print l; done = 1 } { print }' |
    kc apply --server-side --force-conflicts -f - >/dev/null
  wait_for "MetalLB controller rollout" 120 kc -n "$METALLB_NS" rollout status deploy/controller --timeout=5s
  wait_for "MetalLB speaker rollout" 120 kc -n "$METALLB_NS" rollout status ds/speaker --timeout=5s
}

lb_parts_status() { # one line per MetalLB part, like the host processes'
  local part sel pod ready rc=0
  for part in "${METALLB_PARTS[@]}"; do
    sel=app=metallb,component=${part#metallb-}
    pod=$(kc -n "$METALLB_NS" get pods -l "$sel" -o 'jsonpath={.items[0].metadata.name}' 2>/dev/null)
    ready=$(kc -n "$METALLB_NS" get pods -l "$sel" -o 'jsonpath={.items[0].status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)
    if [[ $ready == True ]]; then
      printf '%-24s running (pod %s/%s)\n' "$part" "$METALLB_NS" "$pod"
    else
      printf '%-24s not ready%s\n' "$part" "${pod:+ (pod $METALLB_NS/$pod)}"
      rc=1
    fi
  done
  return $rc
}

lb_status() {
  kc -n "$METALLB_NS" get pods -o wide
  kc -n "$METALLB_NS" get ipaddresspools,l2advertisements
  echo "outside network $OUTSIDE_NET on $BRIDGE: host $OUTSIDE_IP, LoadBalancer pool $LB_POOL"
  ip netns list 2>/dev/null | awk -v p="$OUTSIDE_NETNS_PREFIX" 'index($1, p) == 1 {print "  e2e client network namespace " $1}'
}

# --- NetworkPolicy ---------------------------------------------------------------
# kube-router (built by build-extras) as a NetworkPolicy controller only: no
# routing, no service proxy, no CNI, no health or metrics listener. It
# enforces with iptables (filter table) and ipsets: a chain per local pod,
# reached from jumps it keeps at the top of INPUT, FORWARD and OUTPUT
# (KUBE-ROUTER-*), ending in an ACCEPT of all pod traffic its policies allow.
# That ACCEPT would come before kube-proxy's REJECT/DROP rules (services
# without endpoints, loadBalancerSourceRanges) and TUSK-FORWARD, so
# netpol_hooks puts a TUSK-NETPOL-* chain first in each KUBE-ROUTER-* chain
# that applies those drop-only chains early; kube-router keeps rules it
# does not own in its chains.
# What it does not do: cut established connections (its pod chains accept
# RELATED,ESTABLISHED first; deleting the pod's conntrack entries does), or
# stop the node itself (kubelet probes, host processes, hostNetwork pods)
# reaching a pod (it accepts sources of type LOCAL).
# It rewrites the whole filter table on each sync (iptables-save, then
# iptables-restore, some 50-150 ms): a kube-proxy filter change in between
# is lost until kube-proxy's next sync (the next Service or EndpointSlice
# change, at most an hour). Those rules only drop what kube-proxy's nat
# rules did not DNAT, so such a loss changes little: a REJECT comes late or
# stays a while for traffic that finds no endpoint either way.
KUBE_ROUTER_LOG=$LOGS/kube-router.log

kube_proxy_filter_chains() {
  local c
  for c in KUBE-PROXY-FIREWALL KUBE-SERVICES KUBE-EXTERNAL-SERVICES KUBE-FIREWALL; do
    iptables -w -n -L "$c" >/dev/null 2>&1 || return 1
  done
}

# The last start of kube-router has completed a full policy sync.
netpol_synced() {
  comp_alive kube-router
  awk 'index($0, "==== kube-router start") == 1 { n = 0 } /sync iptables took/ { n = 1 } END { exit !n }' "$KUBE_ROUTER_LOG"
}

# The rules of a TUSK-NETPOL-<builtin> chain: kube-proxy's drop-only chains
# in the order kube-proxy jumps to them from <builtin>, then (FORWARD) what
# TUSK-FORWARD drops. What kube-proxy's KUBE-FORWARD accepts (masquerade-
# marked or established) never meets the chains after it in FORWARD, so here
# it returns to kube-router's policy chains unexamined too. KUBE-NODEPORTS
# (INPUT) is left out: it only accepts.
netpol_hook_rules() { # builtin-chain
  local c=TUSK-NETPOL-$1
  case $1 in
    INPUT)
      iptables -w -A "$c" -m conntrack --ctstate NEW -j KUBE-PROXY-FIREWALL
      iptables -w -A "$c" -m conntrack --ctstate NEW -j KUBE-EXTERNAL-SERVICES
      iptables -w -A "$c" -j KUBE-FIREWALL
      ;;
    FORWARD)
      iptables -w -A "$c" -m conntrack --ctstate NEW -j KUBE-PROXY-FIREWALL
      iptables -w -A "$c" -m mark --mark 0x4000/0x4000 -j RETURN
      iptables -w -A "$c" -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN
      iptables -w -A "$c" -m conntrack --ctstate NEW -j KUBE-SERVICES
      iptables -w -A "$c" -m conntrack --ctstate NEW -j KUBE-EXTERNAL-SERVICES
      pod_forward_rules "$c" RETURN
      ;;
    OUTPUT)
      iptables -w -A "$c" -m conntrack --ctstate NEW -j KUBE-PROXY-FIREWALL
      iptables -w -A "$c" -m conntrack --ctstate NEW -j KUBE-SERVICES
      iptables -w -A "$c" -j KUBE-FIREWALL
      ;;
  esac
}
declare -gA NETPOL_HOOK_RULES=([INPUT]=3 [FORWARD]=8 [OUTPUT]=3)

netpol_hooks_ok() {
  local b n
  for b in INPUT FORWARD OUTPUT; do
    iptables -w -C "KUBE-ROUTER-$b" -j "TUSK-NETPOL-$b" 2>/dev/null || return 1
    n=$(iptables -w -S "TUSK-NETPOL-$b" 2>/dev/null | grep -c '^-A') || return 1
    [[ $n == "${NETPOL_HOOK_RULES[$b]}" ]] || return 1
  done
}

netpol_hooks_install() {
  local b
  for b in INPUT FORWARD OUTPUT; do
    iptables -w -N "TUSK-NETPOL-$b" 2>/dev/null || iptables -w -F "TUSK-NETPOL-$b"
    netpol_hook_rules "$b"
    iptables -w -C "KUBE-ROUTER-$b" -j "TUSK-NETPOL-$b" 2>/dev/null ||
      iptables -w -I "KUBE-ROUTER-$b" 1 -j "TUSK-NETPOL-$b"
  done
}

# A sync of kube-router's that read the table before our change and writes
# it back after undoes the change: install, wait out such a sync, check.
netpol_hooks() {
  local i
  for ((i = 0; i < 10; i++)); do
    # (not `ok || install`: errexit would not stop a failing install there)
    if ! netpol_hooks_ok; then netpol_hooks_install; fi
    sleep 2
    netpol_hooks_ok && return 0
  done
  die "kube-router keeps undoing the TUSK-NETPOL-* hooks; see $KUBE_ROUTER_LOG"
}

netpol_hooks_down() {
  local b
  for b in INPUT FORWARD OUTPUT; do
    while iptables -w -D "KUBE-ROUTER-$b" -j "TUSK-NETPOL-$b" 2>/dev/null; do :; done
    iptables -w -F "TUSK-NETPOL-$b" 2>/dev/null || true
    iptables -w -X "TUSK-NETPOL-$b" 2>/dev/null || true
  done
}

# kube-router's policy ipsets (KUBE-SRC-*, KUBE-DST-*), once no rule uses them
netpol_ipsets_down() {
  local s
  command -v ipset >/dev/null || return 0
  for s in $(ipset list -n 2>/dev/null | grep -E '^(inet6:)?KUBE-(SRC|DST)-'); do
    ipset destroy "$s" 2>/dev/null || true
  done
}

# A kube-router of another version (KUBE_ROUTER_VERSION changed) is stopped,
# so the current one starts.
netpol_stop_stale() {
  local pid exe
  [[ -f $RUN/kube-router.pid ]] || return 0
  pid=$(<"$RUN/kube-router.pid")
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 0
  exe=${exe% (deleted)}
  if [[ $exe == "$CACHE"/kube-router/*/kube-router && $exe != "$(comp_bin kube-router)" ]]; then
    log "stopping kube-router of another version ($exe)"
    kill -TERM "$pid" 2>/dev/null || true
    wait_for "old kube-router to exit" 15 csi_gone "$pid"
  fi
}

# Start kube-router, wait for its first full sync, then hook kube-proxy's and
# our drops in ahead of its accepts; callable alone on a running cluster
# (`e2e/cluster netpol-up`): it touches nothing else.
netpol_up() {
  [[ $(id -u) == 0 ]] || die "must run as root (iptables, ipset)"
  comp_pid kubelet >/dev/null || die "kubelet does not run; start the cluster with: e2e/cluster up"
  command -v ipset >/dev/null || die "no ipset command; run e2e/cluster.d/install-deps"
  "$D/build-extras" >/dev/null
  netpol_stop_stale
  # the hooks jump to kube-proxy's chains, and the node object names our IP
  wait_for "kube-proxy's filter chains" 60 kube_proxy_filter_chains
  wait_for "node $NODE_NAME registration" 60 kc get node "$NODE_NAME"
  log "starting kube-router $KUBE_ROUTER_VERSION (NetworkPolicy only)"
  start_comp kube-router --run-firewall=true --run-router=false --run-service-proxy=false \
    --run-loadbalancer=false --enable-cni=false --enable-ipv4=true --enable-ipv6=false \
    --kubeconfig "$KUBECONFIG_ADMIN" --hostname-override "$NODE_NAME" \
    --service-cluster-ip-range "$SERVICE_CIDR" --health-port 0 --metrics-port 0 --v=1
  wait_for "kube-router's first NetworkPolicy sync" 90 netpol_synced
  netpol_hooks
}

# --- cert-manager ------------------------------------------------------------------------
# cert-manager's controller as a host process (it only needs a kubeconfig),
# with its CRDs; no webhook and no cainjector (see e2e/cert-manager/main.go).
# Only Issuers and Certificates the tests create: nothing cluster-wide.

# A cert-manager built from another module state (a version bump) is
# stopped, so the current one starts.
certmanager_stop_stale() {
  local pid exe
  [[ -f $RUN/cert-manager.pid ]] || return 0
  pid=$(<"$RUN/cert-manager.pid")
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 0
  exe=${exe% (deleted)}
  if [[ $exe == "$CACHE"/cert-manager/*/cert-manager && $exe != "$(comp_bin cert-manager)" ]]; then
    log "stopping cert-manager of another build ($exe)"
    kill -TERM "$pid" 2>/dev/null || true
    wait_for "old cert-manager to exit" 15 csi_gone "$pid"
  fi
}

certmanager_crds_established() {
  kc wait --for condition=established --timeout=5s -f "$CERTMANAGER_DIR/crds.yaml"
}

# Apply the CRDs and start the controller; callable alone on a running
# cluster (`e2e/cluster certmanager-up`): it touches nothing else.
certmanager_up() {
  api_ready >/dev/null 2>&1 || die "kube-apiserver does not answer; start the cluster with: e2e/cluster up"
  CERTMANAGER_DIR=$("$D/build-cert-manager")
  certmanager_stop_stale
  kc apply --server-side --force-conflicts -f "$CERTMANAGER_DIR/crds.yaml" >/dev/null
  wait_for "cert-manager's CRDs" 60 certmanager_crds_established
  kc create namespace "$CERTMANAGER_NS" --dry-run=client -o yaml | kc apply -f - >/dev/null
  log "starting cert-manager's controller ($CERTMANAGER_DIR)"
  start_comp cert-manager --kubeconfig "$KUBECONFIG_ADMIN" \
    --cluster-resource-namespace "$CERTMANAGER_NS" --v=1
  sleep 1
  comp_alive cert-manager
}

# --- verbs -------------------------------------------------------------------------------
all_running() {
  local c
  for c in "${COMPONENTS[@]}" "${NETPOL_COMPONENTS[@]}" "${CSI_COMPONENTS[@]}" "${CERTMANAGER_COMPONENTS[@]}"; do comp_pid "$c" >/dev/null || return 1; done
  node_ready && lb_ready && netpol_hooks_ok
}

print_export() { echo "export KUBECONFIG=$KUBECONFIG_ADMIN"; }

cluster_up() {
  local t0=$SECONDS
  [[ $(id -u) == 0 ]] || die "must run as root (bridges, iptables, mounts, cgroups)"
  if [[ -s $KUBECONFIG_ADMIN && -x $BIN/kubectl ]] && all_running; then
    log "already running ($NODE_NAME Ready)"
    print_export
    return 0
  fi
  ensure_parts
  mkdir -p "$STATE" "$LOGS" "$RUN"
  make_pki
  write_configs
  net_up

  log "starting etcd, kube-apiserver"
  start_etcd
  start_apiserver
  start_containerd
  wait_for "kube-apiserver /readyz" 120 api_ready_or_die

  log "starting controller-manager, scheduler, kubelet, kube-proxy"
  start_controller_manager
  start_scheduler
  kc apply --server-side --force-conflicts -f "$D/rbac.yaml" >/dev/null
  wait_for "containerd socket" 30 ctr_ version
  start_kubelet
  start_kube_proxy

  load_images
  wait_for "node $NODE_NAME registration" 60 kc get node "$NODE_NAME"
  kc label node "$NODE_NAME" --overwrite node-role.kubernetes.io/control-plane= tusk.dev/e2e=true >/dev/null
  wait_for "node $NODE_NAME Ready" 120 node_ready_or_die
  netpol_up

  log "deploying CoreDNS and local-path-provisioner"
  addons
  wait_for "CoreDNS rollout" 120 kc -n kube-system rollout status deploy/coredns --timeout=5s
  wait_for "local-path-provisioner rollout" 120 kc -n local-path-storage rollout status deploy/local-path-provisioner --timeout=5s
  csi_up
  lb_up
  certmanager_up

  log "up in $((SECONDS - t0))s: Kubernetes $K8S_VERSION, node $NODE_NAME, containerd $SOCK"
  print_export
}

api_ready_or_die() { comp_alive etcd; comp_alive kube-apiserver; api_ready; }
node_ready_or_die() {
  local c
  for c in "${COMPONENTS[@]}"; do comp_alive "$c"; done
  node_ready
}

remove_pods() {
  # Kill every container of our containerd, then drop the records (keeps images).
  local id cg
  if comp_pid containerd >/dev/null && ctr_ version >/dev/null 2>&1; then
    for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -a -s SIGKILL "$id" >/dev/null 2>&1 || true; done
    sleep 0.5
    for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks rm -f "$id" >/dev/null 2>&1 || true; done
    for id in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers rm "$id" >/dev/null 2>&1 || true; done
  fi
  # anything left in the kubelet's cgroups, and shims of our socket
  for cg in /sys/fs/cgroup/pids/kubepods /sys/fs/cgroup/memory/kubepods; do
    [[ -d $cg ]] || continue
    find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
  done
  pgrep -f -- "containerd-shim-runc-v2 .*-address $SOCK( |$)" | xargs -r kill -KILL 2>/dev/null || true
}

unmount_state() {
  local m
  # deepest first
  for m in $(awk -v s="$STATE/" 'index($5, s) == 1 {print $5}' /proc/self/mountinfo | sort -r | uniq); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
}

remove_cgroups() {
  local cg
  for cg in /sys/fs/cgroup/*/kubepods; do
    [[ -d $cg ]] || continue
    find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
}

cluster_down() {
  [[ $(id -u) == 0 ]] || die "must run as root"
  stop_comps cert-manager
  stop_comps kube-router
  netpol_hooks_down
  stop_comps csi-resizer csi-provisioner csi-loop
  stop_comps kube-proxy kubelet
  remove_pods
  stop_comps containerd kube-scheduler kube-controller-manager kube-apiserver
  stop_comps etcd
  pgrep -f -- "containerd-shim-runc-v2 .*-address $SOCK( |$)" | xargs -r kill -KILL 2>/dev/null || true
  unmount_state
  csi_detach_loops
  remove_cgroups
  [[ -x $BIN/kube-proxy ]] && "$BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true
  net_down
  # cluster data goes; PKI, configs, logs and containerd's images stay
  rm -rf "$STATE/etcd" "$STATE/kubelet" "$CTRD/state" "$STATE/cni/ipam" "$VOLUMES" "$CSI_DIR" "$RUN"
  log "down"
}

cluster_status() {
  local c pid rc=0
  for c in "${COMPONENTS[@]}" "${NETPOL_COMPONENTS[@]}" "${CSI_COMPONENTS[@]}" "${CERTMANAGER_COMPONENTS[@]}"; do
    if pid=$(comp_pid "$c"); then
      printf '%-24s running (pid %s)\n' "$c" "$pid"
    else
      printf '%-24s stopped\n' "$c"
      rc=1
    fi
  done
  if comp_pid kube-apiserver >/dev/null; then
    lb_parts_status || rc=1
    kc get nodes -o wide || rc=1
    kc get storageclass || rc=1
    echo "csi-loop volumes in $CSI_VOLUMES, loop devices:"
    csi_loops | sed 's/^/  /'
    lb_status || rc=1
    if netpol_hooks_ok; then
      echo "NetworkPolicy: kube-router $KUBE_ROUTER_VERSION, TUSK-NETPOL-* hooks in place"
    else
      echo "NetworkPolicy: TUSK-NETPOL-* hooks missing (e2e/cluster netpol-up)"
      rc=1
    fi
    echo "export KUBECONFIG=$KUBECONFIG_ADMIN"
  fi
  return $rc
}

cluster_logs() {
  local c=${1:-}
  if [[ -z $c ]]; then
    echo "components: ${COMPONENTS[*]} ${NETPOL_COMPONENTS[*]} ${CSI_COMPONENTS[*]} ${CERTMANAGER_COMPONENTS[*]} ${METALLB_PARTS[*]}"
    echo "logs in $LOGS (MetalLB's: kubectl logs of its pods in $METALLB_NS)"
    return 0
  fi
  case $c in
    metallb-controller | metallb-speaker)
      local w=deploy/controller
      [[ $c == metallb-speaker ]] && w=ds/speaker
      if [[ -t 1 ]]; then kc -n "$METALLB_NS" logs -f --tail 200 "$w"; else kc -n "$METALLB_NS" logs --tail "${TUSK_LOG_LINES:-200}" "$w"; fi
      return
      ;;
  esac
  [[ -f $LOGS/$c.log ]] || die "no log for '$c' (components: ${COMPONENTS[*]} ${NETPOL_COMPONENTS[*]} ${CSI_COMPONENTS[*]} ${CERTMANAGER_COMPONENTS[*]})"
  if [[ -t 1 ]]; then tail -n 200 -F "$LOGS/$c.log"; else tail -n "${TUSK_LOG_LINES:-200}" "$LOGS/$c.log"; fi
}

# A control-plane outage for the failover suite: kube-apiserver stopped
# (SIGSTOP: connections stay open and unanswered, as with a hung or
# partitioned server) for SECONDS, then continued. Prints "stopped <unix time>"
# and "continued <unix time>". An interrupted run (INT, TERM) continues the
# server too; a caller that goes away leaves the run to finish on its own.
cluster_freeze_apiserver() {
  local seconds=${1:-} pid
  [[ $seconds =~ ^[0-9]+$ ]] || die "usage: e2e/cluster freeze-apiserver SECONDS"
  [[ $(id -u) == 0 ]] || die "must run as root"
  pid=$(comp_pid kube-apiserver) || die "kube-apiserver does not run"
  # shellcheck disable=SC2064 # the pid is meant to be expanded now
  trap "kill -CONT $pid 2>/dev/null || true" EXIT
  kill -STOP "$pid"
  echo "stopped $(date +%s.%N)"
  sleep "$seconds"
  kill -CONT "$pid"
  echo "continued $(date +%s.%N)"
}
