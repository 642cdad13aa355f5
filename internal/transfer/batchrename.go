package transfer

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
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

// Verified and renamed in one command. A tar batch's file whose source sum came from the stream
// (tarsmall.go) needs only the destination's sum and, when they match, its rename: one perl per
// batch does both, reading NUL-separated triples (temporary name, final name, the source's sum)
// on its stdin. For each it takes the sha256 of the temporary file as read back from disk and
// prints the sum, then "0" when it matched and the rename succeeded, "-" when it did not match
// (nothing renamed), or the rename's errno and message; a file it could not read prints "!", the
// errno and message.
//
// The sums come from `openssl dgst -sha256 -r` run by the perl (no shell; the names as its
// arguments, at most verifyOpensslArgBytes of them per run): it reads each file by its name as
// Digest::SHA would, and with the CPU's SHA instructions it hashes several times faster (on a
// tree of 30,000 files of 4 KiB the perl's hashing was its largest share of the destination's
// CPU). Its lines are "<64 hex> *<name>" in the order given; a name with a newline or backslash
// (which openssl escapes) is not given to it, and a name with no such line of openssl's (openssl
// missing, a file it could not read) is hashed by Digest::SHA instead, so every file's sum is
// still of the file on disk, taken after tar -x wrote it, by one of the two. Where Digest::SHA is
// needed and missing (Debian's perl-base has no Digest::SHA) the command stops there and fails,
// and the files it did not judge go back to sha256sum and renameBatch.

// verifyOpensslArgBytes bounds the bytes of names one openssl run takes as arguments (well under
// Linux's 2 MiB ARG_MAX, and the BSDs' 256 KiB).
const verifyOpensslArgBytes = 128 << 10

// verifyRenameScript hashes, compares and renames NUL-separated triples read from stdin. Only
// absolute names go to openssl (so none can be taken for an option; a tar batch's are).
var verifyRenameScript = `$/ = "\0"; my @t; ` +
	`while (defined(my $t = <STDIN>)) { my $f = <STDIN>; my $w = <STDIN>; last unless defined $w; chomp $t; chomp $f; chomp $w; push @t, [$t, $f, $w] } ` +
	`my %o; my @n = grep { m{^/} && !/[\n\\]/ } map { $_->[0] } @t; ` +
	`while (@n) { my @p; my $l = 0; while (@n && $l < ` + strconv.Itoa(verifyOpensslArgBytes) + `) { $l += length($n[0]) + 1; push @p, shift @n } ` +
	`if (open(my $h, "-|", "openssl", "dgst", "-sha256", "-r", @p)) { local $/ = "\n"; while (my $x = <$h>) { chomp $x; $o{$2} = $1 if $x =~ /^([0-9a-f]{64}) \*(.*)$/s } close $h } } ` +
	`for my $e (@t) { my ($t, $f, $w) = @$e; my $s = $o{$t}; ` +
	`unless (defined $s) { require Digest::SHA; if (open(my $h, "<:raw", $t)) { $s = eval { Digest::SHA->new(256)->addfile($h)->hexdigest }; close $h } } ` +
	`unless (defined $s) { my $n = $! + 0; print "! $n $!\n"; next } ` +
	`if ($s ne $w) { print "$s -\n"; next } ` +
	`if (rename $t, $f) { print "$s 0\n" } else { my $n = $! + 0; print "$s $n $!\n" } }`

// verifyRenameBatch verifies batch's temporary files against srcSums (the sources' sums, by
// index) and renames the matching ones, with one command on the destination. renamed[i] says
// batch[i] was verified and renamed; errs[i] is its failure (a mismatch, an unreadable
// temporary file, a failed rename). err says the command did not run or stopped early; the
// items without either are left to the usual verification.
func (r *run) verifyRenameBatch(ctx context.Context, batch []*Item, srcSums []string) (renamed []bool, errs []error, err error) {
	renamed, errs = make([]bool, len(batch)), make([]error, len(batch))
	var in bytes.Buffer
	for i, it := range batch {
		in.WriteString(tempName(it.Destination, r.t.ID))
		in.WriteByte(0)
		in.WriteString(it.Destination)
		in.WriteByte(0)
		in.WriteString(srcSums[i])
		in.WriteByte(0)
	}
	ctx, cancel := context.WithTimeout(ctx, r.e.cfg.CommandTimeout)
	defer cancel()
	var out bytes.Buffer
	stderr := &cappedBuffer{max: tarStderrMax}
	status, err := command.Exec{Pool: r.dstR.pool, Target: r.dstR.t}.Run(ctx, shell.Command("perl", "-e", verifyRenameScript), &in, &out, stderr)
	if err != nil {
		return renamed, errs, fmt.Errorf("verify and rename on the destination: %w", err)
	}
	sc := bufio.NewScanner(&out)
	i := 0
	for ; i < len(batch) && sc.Scan(); i++ {
		it, tmp := batch[i], tempName(batch[i].Destination, r.t.ID)
		sum, rest, _ := strings.Cut(sc.Text(), " ")
		switch {
		case sum == "!":
			// The temporary file is gone or unreadable: not the source's fault, so retry.
			_, msg, _ := strings.Cut(rest, " ")
			errs[i] = fmt.Errorf("%w: %s: %s", errMismatch, tmp, msg)
		case rest == "-":
			errs[i] = fmt.Errorf("%w: sha256 of %s is %s at the source, %s at the destination", errMismatch, it.Source, srcSums[i], sum)
		case rest == "0" && sum == srcSums[i]:
			renamed[i] = true
		default:
			_, msg, _ := strings.Cut(rest, " ")
			errs[i] = fmt.Errorf("rename %s to %s: %s", tmp, it.Destination, msg)
		}
	}
	if status != 0 || i < len(batch) {
		if i == 0 && !r.verifyRenameOff.Swap(true) {
			r.e.log.Info("transfer: perl with Digest::SHA unusable; files are verified by sha256sum", "id", r.t.ID, "status", status, "stderr", firstLine(stderr.String()))
		}
		return renamed, errs, fmt.Errorf("verify and rename on the destination: perl exited with status %d after %d of %d files: %s", status, i, len(batch), firstLine(stderr.String()))
	}
	return renamed, errs, nil
}
