#!/usr/bin/env bash
# Builds the release binaries: static (no cgo), -trimpath, stripped (-s -w),
# -tags grpcnotrace (docs/deploy.md), one per platform, with the version
# stamped, into dist/ with their SHA-256 sums.
#
#   scripts/release.sh v1.2.3            # the three platforms below
#   PLATFORMS=linux/amd64 scripts/release.sh v1.2.3
#   OUT=/tmp/rel scripts/release.sh      # version: git describe
#
# `sluice version` of each binary prints the version, then the module and
# the commit from the build info (go records vcs.revision in a checkout).
set -euo pipefail
cd "$(dirname "$0")/.."

version=${1:-$(git describe --tags --always --dirty 2>/dev/null || echo "")}
if [ -z "$version" ]; then
  echo "release: no version given and git describe found none" >&2
  exit 2
fi
# The commit is stamped too, for builds where go records none (a git
# worktree, whose .git is a file go does not follow).
revision=$(git rev-parse HEAD 2>/dev/null || echo "")
platforms=${PLATFORMS:-"linux/amd64 linux/arm64 darwin/arm64"}
out=${OUT:-dist}
mkdir -p "$out"

for platform in $platforms; do
  goos=${platform%/*} goarch=${platform#*/}
  bin="$out/sluice-$version-$goos-$goarch"
  start=$SECONDS
  # GOFLAGS is cleared so that a machine-wide -buildvcs=false cannot drop
  # the commit from the build info.
  GOFLAGS= CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build -trimpath -buildvcs=auto -tags grpcnotrace \
    -ldflags "-s -w -X main.version=$version -X main.revision=$revision" -o "$bin" ./cmd/sluice
  echo "release: $bin ($((SECONDS - start)) s)"
done
(cd "$out" && sha256sum sluice-"$version"-* > "SHA256SUMS-$version")
echo "release: $out/SHA256SUMS-$version"
