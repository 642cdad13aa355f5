#!/usr/bin/env bash
# third_party/golang.org/x/crypto is golang.org/x/crypto at the version go.mod requires, cut down
# to the packages sshapi builds and tests with, gofmt'd, with third_party/x-crypto.patch applied
# (see third_party/README.md for why). This script makes that tree from the pristine module:
#
#   third_party/x-crypto.sh check   rebuild it in a temporary directory and fail if the committed
#                                   tree differs, or a generated assembly file (GENERATED below)
#                                   is not what its generator writes (make test runs this)
#   third_party/x-crypto.sh write   replace the committed tree with the rebuilt one
#   third_party/x-crypto.sh diff    write the committed tree's changes to the pristine one into
#                                   x-crypto.patch (after editing the tree by hand)
#
#   third_party/x-crypto.sh upgrade vX.Y.Z
#                                   require and replace that version in go.mod, then write
#
# go.mod replaces only the version the tree was made from, so a dependency bump that raises
# x/crypto would silently build the unpatched upstream; check fails on that too. Upgrading:
# upgrade vX.Y.Z (if the patch no longer applies, port the change by hand in the tree and run
# diff), go mod tidy, make test.
set -euo pipefail
cd "$(dirname "$0")/.."

# The packages (directories, not recursive) kept from the module: what `go list -deps -test ./...`
# of sshapi needs from x/crypto, and what the tests of the fork's packages need. A missing one
# shows as a build failure.
PKGS=(
  blowfish chacha20 chacha20poly1305 cryptobyte cryptobyte/asn1 curve25519
  internal/alias internal/poly1305 internal/testenv sha3
  ssh ssh/agent ssh/internal/bcrypt_pbkdf ssh/knownhosts ssh/terminal ssh/test ssh/testdata
)
FILES=(go.mod go.sum LICENSE PATENTS README.md)
# The assembly files the patch adds that a generator writes: directory, generator, output.
GENERATED=(
  "ssh _asm/chacha_avx512.go chacha_avx512_amd64.s"
  "internal/poly1305 _asm/sum_vector.go sum_vector_amd64.s"
  "internal/poly1305 _asm/sum_ifma.go sum_ifma_amd64.s"
)
TREE=third_party/golang.org/x/crypto
PATCH=third_party/x-crypto.patch

version=$(go list -m -f '{{.Version}}' golang.org/x/crypto)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Downloaded outside this module, whose go.mod replaces x/crypto (the module cache is read-only
# and checked against the checksum database, as for any dependency).
(cd "$tmp" && go mod download "golang.org/x/crypto@$version")
src=$(go env GOMODCACHE)/golang.org/x/crypto@$version

# pristine: the kept files of the module, gofmt'd (upstream has a file gofmt changes, and the
# repository's gofmt check covers this tree too).
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
  go mod edit -dropreplace="golang.org/x/crypto@$version" -require="golang.org/x/crypto@$2" \
    -replace="golang.org/x/crypto@$2=./$TREE"
  exec "$0" write
  ;;
check | write)
  pristine "$tmp/tree"
  if [ -s "$PATCH" ]; then (cd "$tmp/tree" && patch -s -p1 --no-backup-if-mismatch) <"$PATCH"; fi
  if [ "$1" = write ]; then
    rm -rf "$TREE" && mkdir -p "$(dirname "$TREE")" && cp -r "$tmp/tree" "$TREE"
    echo "$TREE: golang.org/x/crypto@$version + $PATCH"
  elif [ "$(go list -m -f '{{with .Replace}}{{.Path}}{{end}}' golang.org/x/crypto)" != "./$TREE" ]; then
    echo "go.mod does not replace golang.org/x/crypto@$version with ./$TREE" >&2
    exit 1
  elif ! diff -r "$tmp/tree" "$TREE" >"$tmp/diff"; then
    echo "$TREE is not golang.org/x/crypto@$version + $PATCH:" >&2
    head -50 "$tmp/diff" >&2
    echo "(third_party/x-crypto.sh diff turns edits of the tree into the patch; write rebuilds the tree)" >&2
    exit 1
  fi
  if [ "$1" = check ]; then
    for g in "${GENERATED[@]}"; do
      read -r dir gen out <<<"$g"
      if ! (cd "$TREE/$dir" && go run "./$gen") | diff - "$TREE/$dir/$out" >"$tmp/diff"; then
        echo "$TREE/$dir/$out is not what its generator writes:" >&2
        head -50 "$tmp/diff" >&2
        echo "(cd $TREE/$dir && go run ./$gen > $out)" >&2
        exit 1
      fi
    done
  fi
  ;;
diff)
  pristine "$tmp/a"
  cp -r "$TREE" "$tmp/b"
  # diff exits 1 when the trees differ, which is the point.
  (cd "$tmp" && diff -ruN a b >"$tmp/patch" || [ $? -eq 1 ])
  sed -E 's/^(---|\+\+\+) ([^\t]*)\t.*/\1 \2/' "$tmp/patch" >"$PATCH"
  echo "$PATCH: $(grep -c '^+++ ' "$PATCH") files changed against golang.org/x/crypto@$version"
  ;;
*)
  echo "usage: $0 [check|write|diff|upgrade vX.Y.Z]" >&2
  exit 2
  ;;
esac
