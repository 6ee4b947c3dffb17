#!/usr/bin/env bash
# Builds the container images Kubernetes v1.34.0's conformance tests run, here and offline,
# under their upstream names and tags, into one docker-format archive:
# _out/conformance/images/e2e-images.tar (its image list and sizes in images.txt beside it).
#
#   hack/e2e-images.sh            # build (cached: again with the same inputs is immediate)
#   hack/e2e-images.sh push CLUSTER_DIR HOST:PORT
#                                 # push them to a cluster's registry (cluster create --with-registry)
#
# agnhost and sample-apiserver are built from their Go source in the Kubernetes module (the
# module setup of hack/conformance.sh), pause and etcd are this repository's cmd/pause and
# cmd/etcd (the node's own), nonewprivs' program is hack/e2eimages/nnp; busybox, nginx, httpd
# and the network tools (dig, getent, curl, nc: in agnhost and jessie-dnsutils) are Debian
# bookworm's packages (apt-get download, dpkg-deb -x), with the shared libraries ldd finds.
# Every image but pause has busybox (sh and its applets) as its first layer, as the tests exec
# shell commands in them. docs/conformance.md lists which image is built from what.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
export GOWORK=off GOTOOLCHAIN=local CGO_ENABLED=0

OUT=$PWD/_out/conformance/images
CACHE=$PWD/_out/cache/e2e-images
MODULE=$PWD/_out/cache/conformance/module # hack/conformance.sh's copy of build/kubernetes
K8S=registry.k8s.io/e2e-test-images
DEBS=(busybox-static nginx nginx-common apache2-bin libapr1 libaprutil1
  bind9-dnsutils bind9-libs libjemalloc2 libuv1 libmaxminddb0 libfstrm0 libprotobuf-c1 liblmdb0
  libc-bin curl libcurl4 netcat-openbsd dash)
ARCHIVE=$OUT/e2e-images.tar

if [ "${1:-}" = push ]; then
  dir=${2:?give the cluster folder (~/.talos/clusters/NAME)} host=${3:?give the registry, HOST:PORT}
  exec go run ./hack/e2eimages push -archive "$ARCHIVE" -registry "$host" -ca "$dir/registry/ca.crt" -users "$dir/registry/users.json"
fi

command -v dpkg-deb >/dev/null || { apt-get update && apt-get install -y --no-install-recommends dpkg; }
mkdir -p "$OUT" "$CACHE"

# The cache key: this script, the tool, the Kubernetes module, Go, the packages' versions.
versions=$(apt-cache policy "${DEBS[@]}" | awk '/^[a-z]/ {p=$1} /Candidate/ {print p, $2}')
key=$( (cat "$0" hack/e2eimages/*.go hack/e2eimages/nnp/*.go cmd/pause/*.go cmd/etcd/*.go go.sum build/kubernetes/go.sum; go version; echo "$versions") | sha256sum | cut -c1-16)
if [ -f "$ARCHIVE" ] && [ "$(cat "$OUT/key" 2>/dev/null)" = "$key" ]; then
  echo "e2e images: cached in $ARCHIVE"
  cat "$OUT/images.txt"
  exit 0
fi

stage=$CACHE/stage
rm -rf "$stage" && mkdir -p "$stage/debs" "$stage/x"

echo "downloading ${DEBS[*]} (apt-get download)"
(cd "$stage/debs" && apt-get download -q "${DEBS[@]}")
for d in "$stage"/debs/*.deb; do dpkg-deb -x "$d" "$stage/x"; done
X=$stage/x

# libs ROOT FILE...: copies the shared libraries (and the loader) FILEs need into ROOT, found in
# the extracted packages first, then on this machine (Debian's, installed).
libs() {
  local root=$1 lib src dst
  shift
  for lib in $(LD_LIBRARY_PATH="$X/usr/lib/x86_64-linux-gnu:$X/lib/x86_64-linux-gnu" ldd "$@" |
    awk '/:$/ { next } /not found/ { print "MISSING:" $1; next } /=>/ { print $3; next } /^[ \t]*\// { print $1 }' | sort -u); do
    case $lib in MISSING:*)
      echo "ldd $*: ${lib#MISSING:} not found: add its package to DEBS in $0" >&2
      exit 1
      ;;
    esac
    src=$lib dst=${lib#"$X"}
    dst=/usr${dst#/usr} # merged /usr: /lib/x86_64-linux-gnu/x is /usr/lib/x86_64-linux-gnu/x
    [ "$dst" = /usr/lib64/ld-linux-x86-64.so.2 ] && dst=/lib64/ld-linux-x86-64.so.2
    mkdir -p "$root$(dirname "$dst")"
    cp -L "$src" "$root$dst"
  done
}

# busybox: Debian's static busybox and a link for each of its applets (/bin/sh, sleep, wget,
# nslookup, ...), /etc/passwd and /etc/group (root, nobody; agnhost's users and group are
# added to its own), /tmp. The first layer of every image but pause.
bb=$stage/busybox
mkdir -p "$bb/bin" "$bb/etc" "$bb/tmp" "$bb/root"
chmod 1777 "$bb/tmp"
cp "$X/bin/busybox" "$bb/bin/busybox"
for app in $("$bb/bin/busybox" --list-full); do
  [ "$app" = bin/busybox ] && continue
  mkdir -p "$bb/$(dirname "$app")"
  ln -sf /bin/busybox "$bb/$app"
done
printf 'root:x:0:0:root:/root:/bin/sh\ndaemon:x:1:1:daemon:/usr/sbin:/bin/false\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$bb/etc/passwd"
printf 'root:x:0:\ndaemon:x:1:\nnogroup:x:65534:\n' >"$bb/etc/group"

# The network tools upstream's agnhost (Alpine's bind-tools, curl, netcat-openbsd) and
# jessie-dnsutils (Debian's dnsutils) carry, which the DNS and Service tests run in them: dig,
# getent (with nsswitch.conf: files, then DNS), curl, nc; and dash as /bin/sh: Debian's
# busybox shell runs its own applets before PATH (its nc has no -v, which the Services tests
# pass), as upstream's Alpine sh does not. With their libraries (dig's libxml2
# brings ICU's 30 MB of data) they weigh 60 MB.
nt=$stage/nettools
mkdir -p "$nt/usr/bin" "$nt/etc"
cp "$X/usr/bin/dig" "$X/usr/bin/getent" "$X/usr/bin/curl" "$nt/usr/bin/"
cp "$X/bin/nc.openbsd" "$nt/usr/bin/nc"
mkdir -p "$nt/bin" && cp "$X/bin/dash" "$nt/bin/dash" && ln -s dash "$nt/bin/sh"
libs "$nt" "$nt"/usr/bin/* "$nt/bin/dash"
echo 'hosts: files dns' >"$nt/etc/nsswitch.conf"
# busybox with them: the first layer of agnhost, nautilus and jessie-dnsutils, stored once.
bn=$stage/busybox-nettools
cp -a "$bb" "$bn" && cp -a --remove-destination "$nt/." "$bn/" # nc and sh replace the applets

# agnhost: its Go source, built static in hack/conformance.sh's module (the same Kubernetes
# sources as e2e.test); upstream's Dockerfile: /agnhost, the agnhost-2 link, /uploads, porter's
# certificate, user-defined-in-image (1000) in group-defined-in-image (50000).
[ -f "$MODULE/go.mod" ] || hack/conformance.sh build
ag=$stage/agnhost
mkdir -p "$ag/uploads" "$ag/etc"
agnhost_version=$(cd "$MODULE" && cat "$(GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' k8s.io/kubernetes)/test/images/agnhost/VERSION")
kdir=$(cd "$MODULE" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' k8s.io/kubernetes)
echo "building agnhost $agnhost_version"
(cd "$MODULE" && GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w -buildid=" -o "$ag/agnhost" k8s.io/kubernetes/test/images/agnhost)
ln -s agnhost "$ag/agnhost-2"
cp "$kdir/test/images/agnhost/porter/localhost.crt" "$kdir/test/images/agnhost/porter/localhost.key" "$ag/"
chmod 644 "$ag/localhost.crt" "$ag/localhost.key"
{
  cat "$bb/etc/passwd"
  echo 'user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh'
} >"$ag/etc/passwd"
{
  cat "$bb/etc/group"
  printf 'user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n'
} >"$ag/etc/group"

# sample-apiserver and etcd, the Aggregator test's pair: Kubernetes' sample-apiserver from the
# module (v0.34.0, the suite's own version; upstream's 1.29.2 serves the same wardle.example.com
# API), and this repository's cmd/etcd (the node's etcd, v3.6 as upstream's 3.6.4) at
# /usr/local/bin/etcd, where the test runs it.
sa=$stage/sample-apiserver
mkdir -p "$sa"
(cd "$MODULE" && GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w -buildid=" -o "$sa/sample-apiserver" k8s.io/sample-apiserver)
ed=$stage/etcd
mkdir -p "$ed/usr/local/bin" "$ed/var/etcd"
go build -trimpath -ldflags "-s -w -buildid=" -o "$ed/usr/local/bin/etcd" ./cmd/etcd

# nautilus: agnhost serving / (test-webserver) with upstream's data.json naming nautilus.jpg,
# what kubectl's Update Demo tests read through the API server's pod proxy. The picture is not
# in the Kubernetes module: the image has none.
na=$stage/nautilus
cp -a "$ag" "$na"
printf '{\n  "image": "nautilus.jpg"\n}\n' >"$na/data.json"

# pause: this repository's cmd/pause, the node's own pause (3.10 in the node image), a static
# program that waits for a signal, as upstream's pause.c.
pz=$stage/pause
mkdir -p "$pz"
go build -trimpath -ldflags "-s -w -buildid=" -o "$pz/pause" ./cmd/pause

# nonewprivs: a setuid-root program that prints its effective uid (upstream's nnp.c).
nn=$stage/nonewprivs
mkdir -p "$nn/usr/local/bin"
go build -trimpath -ldflags "-s -w -buildid=" -o "$nn/usr/local/bin/nnp" ./hack/e2eimages/nnp
chmod 4755 "$nn/usr/local/bin/nnp"

# nginx: Debian's nginx, serving its welcome page on port 80, logging to the container's
# output, as upstream's nginx image.
ng=$stage/nginx
mkdir -p "$ng/usr/sbin" "$ng/etc/nginx" "$ng/usr/share/nginx/html" "$ng/var/lib/nginx" "$ng/var/log/nginx" "$ng/run"
cp "$X/usr/sbin/nginx" "$ng/usr/sbin/"
cp "$X/etc/nginx/mime.types" "$ng/etc/nginx/"
cp "$X/usr/share/nginx/html/index.html" "$ng/usr/share/nginx/html/"
libs "$ng" "$ng/usr/sbin/nginx"
cat >"$ng/etc/nginx/nginx.conf" <<'EOF'
user nobody nogroup;
worker_processes 1;
pid /run/nginx.pid;
error_log stderr;
events { worker_connections 1024; }
http {
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log /dev/stdout;
    server {
        listen 80 default_server;
        root /usr/share/nginx/html;
        index index.html;
    }
}
EOF

# httpd: Debian's Apache (apache2-bin) as upstream's httpd image lays it out: the document root
# /usr/local/apache2/htdocs with its "It works!" page (the StatefulSet tests move it away and
# back to fail and pass the readiness probe), httpd-foreground, port 80, logs to the output.
hd=$stage/httpd
mods="mpm_event authz_core authn_core dir mime unixd log_config"
mkdir -p "$hd/usr/sbin" "$hd/usr/lib/apache2/modules" "$hd/usr/local/apache2/htdocs" "$hd/usr/local/apache2/conf" "$hd/usr/local/apache2/logs" "$hd/usr/local/bin"
cp "$X/usr/sbin/apache2" "$hd/usr/sbin/"
for m in $mods; do
  [ -f "$X/usr/lib/apache2/modules/mod_$m.so" ] && cp "$X/usr/lib/apache2/modules/mod_$m.so" "$hd/usr/lib/apache2/modules/"
done
libs "$hd" "$hd/usr/sbin/apache2" "$hd"/usr/lib/apache2/modules/*.so
echo '<html><body><h1>It works!</h1></body></html>' >"$hd/usr/local/apache2/htdocs/index.html"
{
  echo 'ServerRoot /usr/local/apache2'
  echo 'ServerName localhost'
  for m in $mods; do
    [ -f "$hd/usr/lib/apache2/modules/mod_$m.so" ] && echo "LoadModule ${m}_module /usr/lib/apache2/modules/mod_$m.so"
  done
  cat <<'EOF'
Listen 80
User daemon
Group daemon
PidFile /usr/local/apache2/logs/httpd.pid
DefaultRuntimeDir /usr/local/apache2/logs
ErrorLog /proc/self/fd/2
LogFormat "%h %l %u %t \"%r\" %>s %b" common
CustomLog /proc/self/fd/1 common
TypesConfig conf/mime.types
DocumentRoot /usr/local/apache2/htdocs
DirectoryIndex index.html
<Directory /usr/local/apache2/htdocs>
    Require all granted
</Directory>
EOF
} >"$hd/usr/local/apache2/conf/httpd.conf"
printf 'text/html html htm\ntext/plain txt\napplication/json json\n' >"$hd/usr/local/apache2/conf/mime.types"
cat >"$hd/usr/local/bin/httpd-foreground" <<'EOF'
#!/bin/sh
rm -f /usr/local/apache2/logs/httpd.pid
exec /usr/sbin/apache2 -f /usr/local/apache2/conf/httpd.conf -DFOREGROUND "$@"
EOF
chmod 755 "$hd/usr/local/bin/httpd-foreground"

# Checks that the servers start in their staged trees (as root, in a network namespace of their
# own, so port 80 is theirs, /dev and /proc mounted as a container has them): each one's page
# is served. In a PID namespace too: the server ends with the check's shell, its first process.
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
  for t in nginx:/usr/sbin/nginx:-g:daemon\ off\; httpd:/usr/local/bin/httpd-foreground; do
    img=${t%%:*}
    root=$stage/check-$img
    rm -rf "$root" && mkdir -p "$root" && cp -a "$bb/." "$root/" && cp -a "$stage/$img/." "$root/"
    IFS=: read -r -a argv <<<"${t#*:}"
    mkdir -p "$root/dev" "$root/proc"
    # shellcheck disable=SC2016 # the $0, $@ and $(...) are the inner shells'
    page=$(unshare -n -m -p --fork --propagation private sh -c 'mount --rbind /dev "$0/dev" && mount -t proc proc "$0/proc" && exec chroot "$0" "$@"' "$root" /bin/sh -c 'ip link set lo up; "$@" >/tmp/out 2>&1 & for i in $(seq 50); do wget -q -O - http://127.0.0.1/ 2>/dev/null && exit 0; sleep 0.1; done; cat /tmp/out; exit 1' sh "${argv[@]}") || {
      echo "$img does not serve in its staged tree: $page" >&2
      exit 1
    }
    echo "checked: $img serves $(echo "$page" | grep -o -m1 -e 'It works!' -e 'Welcome to nginx!')"
    rm -rf "$root"
  done
fi

path=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
cat >"$stage/spec.json" <<EOF
[
  {"ref": "$K8S/busybox:1.37.0-1", "root": "$bb", "cmd": ["sh"], "env": ["$path"]},
  {"ref": "$K8S/busybox:1.36.1-1", "root": "$bb", "cmd": ["sh"], "env": ["$path"]},
  {"ref": "$K8S/nonroot:1.4", "root": "$bb", "cmd": ["sh"], "env": ["$path"], "user": "1234"},
  {"ref": "$K8S/agnhost:$agnhost_version", "base": "$bn", "root": "$ag", "entrypoint": ["/agnhost"], "cmd": ["pause"], "env": ["$path"]},
  {"ref": "$K8S/nonewprivs:1.3", "base": "$bb", "root": "$nn", "cmd": ["nnp"], "env": ["$path"]},
  {"ref": "$K8S/nginx:1.14-4", "base": "$bb", "root": "$ng", "cmd": ["nginx", "-g", "daemon off;"], "env": ["$path"]},
  {"ref": "$K8S/nginx:1.15-4", "base": "$bb", "root": "$ng", "cmd": ["nginx", "-g", "daemon off;"], "env": ["$path"]},
  {"ref": "$K8S/httpd:2.4.38-4", "base": "$bb", "root": "$hd", "cmd": ["httpd-foreground"], "env": ["$path"]},
  {"ref": "$K8S/httpd:2.4.39-4", "base": "$bb", "root": "$hd", "cmd": ["httpd-foreground"], "env": ["$path"]},
  {"ref": "$K8S/nautilus:1.7", "base": "$bn", "root": "$na", "entrypoint": ["/agnhost"], "cmd": ["test-webserver"], "env": ["$path"]},
  {"ref": "$K8S/jessie-dnsutils:1.7", "root": "$bn", "cmd": ["sh"], "env": ["$path"]},
  {"ref": "$K8S/sample-apiserver:1.29.2", "base": "$bb", "root": "$sa", "entrypoint": ["/sample-apiserver"], "env": ["$path"]},
  {"ref": "registry.k8s.io/etcd:3.6.4-0", "base": "$bb", "root": "$ed", "cmd": ["/usr/local/bin/etcd"], "env": ["$path"]},
  {"ref": "registry.k8s.io/pause:3.10.1", "root": "$pz", "entrypoint": ["/pause"]}
]
EOF

echo "writing $ARCHIVE"
go run ./hack/e2eimages build -spec "$stage/spec.json" -out "$ARCHIVE" | tee "$OUT/images.txt"
echo "$key" >"$OUT/key"
echo "$(du -m "$ARCHIVE" | cut -f1) MB: $ARCHIVE"
