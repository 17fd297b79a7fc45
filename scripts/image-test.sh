#!/usr/bin/env bash
# Builds the Dockerfile with buildah (vfs storage, chroot isolation: no
# daemon, no container engine) and runs the image's binary: `sluice version`
# inside the image's own root, then `sluice serve` as the image's user
# against the image's /data, checked on /healthz and /readyz, then
# stopped with SIGTERM. Needs root, buildah and busybox-static (.ci/run
# installs both).
#
# With no registry in reach, the builder stage runs on an image made here
# from the host's Go toolchain (GO_IMAGE overrides it), with modules from
# the host's module cache (GOPROXY overrides it).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS

storage=$(mktemp -d /tmp/sluice-image.XXXXXX)
ba() { buildah --root "$storage/root" --runroot "$storage/run" --storage-driver vfs "$@"; }
serve_pid=""
cleanup() {
  [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null || true
  ba rm --all >/dev/null 2>&1 || true
  rm -rf "$storage"
}
trap cleanup EXIT

version="v0.0.0-imagetest"
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
tag=localhost/sluice:imagetest

# The builder: busybox and CA certificates, with the host's Go mounted at
# /usr/local/go for the build (copying the toolchain into vfs storage takes
# minutes).
go_image=${GO_IMAGE:-}
goroot_volume=()
if [ -z "$go_image" ]; then
  b=$(ba from scratch)
  m=$(ba mount "$b")
  mkdir -p "$m/usr/local/go" "$m/bin" "$m/etc/ssl/certs" "$m/tmp" "$m/root"
  cp /bin/busybox "$m/bin/busybox"
  for applet in $("$m/bin/busybox" --list); do [ -e "$m/bin/$applet" ] || ln -s busybox "$m/bin/$applet"; done
  cp /etc/ssl/certs/ca-certificates.crt "$m/etc/ssl/certs/"
  ba umount "$b" >/dev/null
  ba config --env PATH=/usr/local/go/bin:/bin --env GOTOOLCHAIN=local --env HOME=/root "$b"
  ba commit -q "$b" localhost/sluice-go-builder >/dev/null
  ba rm "$b" >/dev/null
  go_image=localhost/sluice-go-builder
  goroot_volume=(--volume "$(go env GOROOT):/usr/local/go:ro")
  echo "image-test: builder image (busybox, host Go $(go env GOVERSION)) made in $((SECONDS - start)) s"
fi
goproxy=${GOPROXY_FOR_IMAGE:-file:///goproxy}
modcache="$(go env GOMODCACHE)/cache/download"
go mod download

echo "image-test: buildah build ($go_image)"
t0=$SECONDS
ba build -q --isolation chroot --pull=never --layers=false \
  --build-arg GO_IMAGE="$go_image" --build-arg GOPROXY="$goproxy" \
  --build-arg VERSION="$version" --build-arg REVISION="$revision" \
  --volume "$modcache:/goproxy:ro" "${goroot_volume[@]}" -t "$tag" . >/dev/null
echo "image-test: built in $((SECONDS - t0)) s"

# The image's configuration.
cfg=$(ba inspect --type image --format '{{.OCIv1.Config.User}}|{{.OCIv1.Config.Entrypoint}}|{{.OCIv1.Config.ExposedPorts}}|{{.OCIv1.Config.Volumes}}' "$tag")
echo "image-test: config $cfg"
case "$cfg" in
  "65532:65532|[/usr/local/bin/sluice serve]|map[8080/tcp:{} 8081/tcp:{}]|map[/data:{}]") ;;
  *) echo "image-test: unexpected image config: $cfg" >&2; exit 1 ;;
esac

ctr=$(ba from --pull=never "$tag")
# Inside the image's own root: nothing there but the binary, the CA
# certificates and the passwd and group files.
out=$(ba run --isolation chroot "$ctr" -- /usr/local/bin/sluice version)
echo "$out" | sed 's/^/image-test: in the image: /'
grep -q "^sluice $version" <<<"$out" || { echo "image-test: version not stamped" >&2; exit 1; }
grep -q "$revision" <<<"$out" || { echo "image-test: revision not stamped" >&2; exit 1; }

mnt=$(ba mount "$ctr")
# The image's user must reach its root through the storage directories
# (created 0700).
d=$mnt
while [ "$d" != "$storage" ] && [ "$d" != / ]; do chmod o+x "$d"; d=$(dirname "$d"); done
chmod o+x "$storage"
[ "$(stat -c %u:%g "$mnt/data")" = 65532:65532 ] || { echo "image-test: /data is not the user's" >&2; exit 1; }
grep -q '^sluice:x:65532:65532:' "$mnt/etc/passwd"
if file "$mnt/usr/local/bin/sluice" | grep -q 'dynamically linked'; then
  echo "image-test: the binary is not static" >&2; exit 1
fi

# serve as the image's user, on the image's data directory, as the
# entrypoint would (production mode needs an admin token).
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
listen="127.0.0.1:$(freeport)"; admin="127.0.0.1:$(freeport)"
log="$storage/serve.log"
env -i PATH=/usr/bin:/bin SLUICE_DATA_DIR="$mnt/data" SLUICE_LISTEN="$listen" SLUICE_ADMIN_LISTEN="$admin" \
  SLUICE_ENV=production SLUICE_ADMIN_TOKEN="$(openssl rand -hex 32)" \
  setpriv --reuid 65532 --regid 65532 --clear-groups "$mnt/usr/local/bin/sluice" serve >"$log" 2>&1 &
serve_pid=$!
ready=""
for _ in $(seq 1 150); do
  if curl -fsS "http://$listen/readyz" >/dev/null 2>&1; then ready=1; break; fi
  sleep 0.2
done
[ -n "$ready" ] || { echo "image-test: serve not ready" >&2; cat "$log" >&2; exit 1; }
curl -fsS "http://$listen/healthz" | grep -q ok
curl -fsS "http://$admin/healthz" | grep -q ok
[ "$(stat -c %u "$mnt/data/catalog.db")" = 65532 ] || { echo "image-test: catalog.db not written by the image's user" >&2; exit 1; }
kill -TERM "$serve_pid"
status=0; wait "$serve_pid" || status=$?
serve_pid=""
[ "$status" = 0 ] || { echo "image-test: serve exited $status after SIGTERM" >&2; cat "$log" >&2; exit 1; }
grep -q "shutting down" "$log" || { echo "image-test: no drain on SIGTERM" >&2; cat "$log" >&2; exit 1; }
ba umount "$ctr" >/dev/null
echo "image-test: ok in $((SECONDS - start)) s"
