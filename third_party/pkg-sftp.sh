#!/usr/bin/env bash
# third_party/github.com/pkg/sftp is github.com/pkg/sftp at the version go.mod requires, cut down
# to the packages sshapi builds with, gofmt'd, with third_party/pkg-sftp.patch applied (see
# third_party/pkg-sftp.md for why). This script makes that tree from the pristine module, as
# x-crypto.sh does for golang.org/x/crypto:
#
#   third_party/pkg-sftp.sh check   rebuild it in a temporary directory and fail if the committed
#                                   tree differs (make test runs this)
#   third_party/pkg-sftp.sh write   replace the committed tree with the rebuilt one
#   third_party/pkg-sftp.sh diff    write the committed tree's changes to the pristine one into
#                                   pkg-sftp.patch (after editing the tree by hand)
#
#   third_party/pkg-sftp.sh upgrade vX.Y.Z
#                                   require and replace that version in go.mod, then write
#
# go.mod replaces only the version the tree was made from, so a dependency bump that raises
# pkg/sftp would silently build the unpatched upstream; check fails on that too. Upgrading:
# upgrade vX.Y.Z (if the patch no longer applies, port the change by hand in the tree and run
# diff), go mod tidy, make test.
set -euo pipefail
cd "$(dirname "$0")/.."

# The packages (directories, not recursive) kept from the module: what `go list -deps -test ./...`
# of sshapi needs from pkg/sftp (its root package and the filexfer encoding it imports), and one
# example, whose directory the root package's tests list (TestRunLsWithExamplesDirectory). A
# missing one shows as a build or test failure.
PKGS=(. internal/encoding/ssh/filexfer internal/encoding/ssh/filexfer/openssh examples/go-sftp-server)
FILES=(go.mod go.sum LICENSE README.md)
MODULE=github.com/pkg/sftp
TREE=third_party/github.com/pkg/sftp
PATCH=third_party/pkg-sftp.patch

version=$(go list -m -f '{{.Version}}' "$MODULE")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Downloaded outside this module, whose go.mod replaces pkg/sftp (the module cache is read-only
# and checked against the checksum database, as for any dependency).
(cd "$tmp" && go mod download "$MODULE@$version")
src=$(go env GOMODCACHE)/$MODULE@$version

# pristine: the kept files of the module, gofmt'd (the repository's gofmt check covers this tree
# too).
pristine() {
  local out=$1 p f
  for f in "${FILES[@]}"; do install -D -m 0644 "$src/$f" "$out/$f"; done
  for p in "${PKGS[@]}"; do
    mkdir -p "$out/$p"
    find "$src/$p" -maxdepth 1 -type f -exec install -m 0644 {} "$out/$p/" \;
  done
  gofmt -w "$out"
}

case "${1:-check}" in
upgrade)
  [ $# -eq 2 ] || { echo "usage: $0 upgrade vX.Y.Z" >&2; exit 2; }
  go mod edit -dropreplace="$MODULE@$version" -require="$MODULE@$2" -replace="$MODULE@$2=./$TREE"
  exec "$0" write
  ;;
check | write)
  pristine "$tmp/tree"
  if [ -s "$PATCH" ]; then (cd "$tmp/tree" && patch -s -p1 --no-backup-if-mismatch) <"$PATCH"; fi
  if [ "$1" = write ]; then
    rm -rf "$TREE" && mkdir -p "$(dirname "$TREE")" && cp -r "$tmp/tree" "$TREE"
    echo "$TREE: $MODULE@$version + $PATCH"
  elif [ "$(go list -m -f '{{with .Replace}}{{.Path}}{{end}}' "$MODULE")" != "./$TREE" ]; then
    echo "go.mod does not replace $MODULE@$version with ./$TREE" >&2
    exit 1
  elif ! diff -r "$tmp/tree" "$TREE" >"$tmp/diff"; then
    echo "$TREE is not $MODULE@$version + $PATCH:" >&2
    head -50 "$tmp/diff" >&2
    echo "(third_party/pkg-sftp.sh diff turns edits of the tree into the patch; write rebuilds the tree)" >&2
    exit 1
  fi
  ;;
diff)
  pristine "$tmp/a"
  cp -r "$TREE" "$tmp/b"
  # diff exits 1 when the trees differ, which is the point.
  (cd "$tmp" && diff -ruN a b >"$tmp/patch" || [ $? -eq 1 ])
  sed -E 's/^(---|\+\+\+) ([^\t]*)\t.*/\1 \2/' "$tmp/patch" >"$PATCH"
  echo "$PATCH: $(grep -c '^+++ ' "$PATCH") files changed against $MODULE@$version"
  ;;
*)
  echo "usage: $0 [check|write|diff|upgrade vX.Y.Z]" >&2
  exit 2
  ;;
esac
