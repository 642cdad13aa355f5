package digest

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sshapi/sshapi/internal/shell"
)

// StreamScript returns a POSIX sh script that hashes file path with a while the file is still
// being written, in order, as far as its caller says it is complete: each line "N" on the
// script's stdin reads the next N blocks of block bytes (the last read may end early, at the
// end of the file) into the hash, and closing stdin ends the hash. The file is opened once,
// before the first read, and read with dd from one descriptor, so the blocks follow each other
// with no seek. Its stdout, for ParseStreamOutput, is the digest line of the same tool Script
// would use (openssl when it hashes right, else coreutils).
//
// A failed read ends the loop early, so the digest covers fewer bytes than asked for and
// cannot match the complete file's: a caller accepts a streamed digest only when it equals a
// digest it trusts (the source's) and otherwise hashes the file again with Script.
func StreamScript(a Algorithm, path string, block int64) string {
	info := algs[a]
	var sb strings.Builder
	fmt.Fprintf(&sb, "h=%s; case $(printf abc | openssl dgst -%s -r 2>/dev/null) in '%s '*) h='openssl dgst -%s -r';; esac\n",
		info.coreutil, a, info.abc, a)
	fmt.Fprintf(&sb, "exec 3<%s || exit 1\n", shell.Quote(path))
	fmt.Fprintf(&sb, "while read -r n; do dd bs=%d count=\"$n\" <&3 2>/dev/null || exit 1; done | $h\n", block)
	return sb.String()
}

// StreamLine is the stdin line of StreamScript that reads the next blocks blocks.
func StreamLine(blocks int64) string { return strconv.FormatInt(blocks, 10) + "\n" }

// ParseStreamOutput returns the digest StreamScript printed, or "" when its output holds none.
func ParseStreamOutput(a Algorithm, stdout string) string {
	line, _, _ := strings.Cut(stdout, "\n")
	sum, _, _ := strings.Cut(line, " ")
	if !isHex(sum, a.Size()*2) {
		return ""
	}
	return strings.ToLower(sum)
}
