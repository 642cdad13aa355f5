package transfer

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/sshapi/sshapi/internal/command"
	"github.com/sshapi/sshapi/internal/shell"
)

// Renames in one command. A verified temporary file that needs nothing more than its rename
// (its mode and times were set when it was written, see tarsmall.go) is renamed into place by one
// destination command per batch instead of one SFTP request each: on a tree of small files the
// requests' packets, through sshd and sftp-server, cost more than the renames themselves. The
// command is perl (in every Linux distribution's base system, and in macOS and the BSDs), and
// it reads the names, NUL-separated, from its stdin, temporary then final name, pair by pair,
// so no name is ever part of a command line and any byte but NUL may be in one. It renames
// with rename(2), as sftp-server's posix-rename does: a final name that is a directory fails,
// a file there is replaced. It prints one line per pair, in order: "0" when renamed, else the
// errno and its message. Names are the ones the SFTP path would rename (checked against the
// roots under the same holds, in the same place of the run), so confinement is unchanged.
//
// A pair without a line (perl stopped early) and every pair of a batch whose command could
// not start are left to the SFTP path (finalize); a perl that is missing or unusable switches
// the batch renames off for the rest of the run.

// renameScript renames NUL-separated pairs read from stdin, see above.
const renameScript = `$/ = "\0"; while (defined(my $t = <STDIN>)) { my $f = <STDIN>; last unless defined $f; chomp $t; chomp $f; ` +
	`if (rename $t, $f) { print "0\n" } else { my $n = $! + 0; print "$n $!\n" } }`

// renameBatchMin is the fewest renames worth a command: below it, SFTP requests are cheaper.
const renameBatchMin = 16

// batchRenamable reports whether finalize would only rename it.
func batchRenamable(setAttrs bool, done attrsDone) bool {
	return !setAttrs || done&(doneMode|doneTimes) == doneMode|doneTimes
}

// renameBatch renames items' temporary files to their final names with one command on the
// destination. renamed[i] says batch[i] was renamed; errs[i] is the rename's own failure. err
// says the command did not run (the items without either are left for the SFTP path).
func (r *run) renameBatch(ctx context.Context, batch []*Item) (renamed []bool, errs []error, err error) {
	renamed, errs = make([]bool, len(batch)), make([]error, len(batch))
	var in bytes.Buffer
	for _, it := range batch {
		in.WriteString(tempName(it.Destination, r.t.ID))
		in.WriteByte(0)
		in.WriteString(it.Destination)
		in.WriteByte(0)
	}
	ctx, cancel := context.WithTimeout(ctx, r.e.cfg.CommandTimeout)
	defer cancel()
	var out bytes.Buffer
	stderr := &cappedBuffer{max: tarStderrMax}
	status, err := command.Exec{Pool: r.dstR.pool, Target: r.dstR.t}.Run(ctx, shell.Command("perl", "-e", renameScript), &in, &out, stderr)
	if err != nil {
		return renamed, errs, fmt.Errorf("rename on the destination: %w", err)
	}
	sc := bufio.NewScanner(&out)
	i := 0
	for ; i < len(batch) && sc.Scan(); i++ {
		line := sc.Text()
		if line == "0" {
			renamed[i] = true
			continue
		}
		_, msg, _ := strings.Cut(line, " ")
		tmp := tempName(batch[i].Destination, r.t.ID)
		errs[i] = fmt.Errorf("rename %s to %s: %s", tmp, batch[i].Destination, msg)
	}
	if status != 0 {
		if status == 126 || status == 127 || i == 0 {
			if !r.renameOff.Swap(true) {
				r.e.log.Info("transfer: perl unusable; files are renamed over SFTP", "id", r.t.ID, "status", status, "stderr", firstLine(stderr.String()))
			}
		}
		return renamed, errs, fmt.Errorf("rename on the destination: perl exited with status %d: %s", status, firstLine(stderr.String()))
	}
	return renamed, errs, nil
}
