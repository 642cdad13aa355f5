// Package shell builds command lines for a remote login shell in which every argument stays one
// literal word, whatever bytes it holds. It is the only place sshapi quotes for a shell.
//
// sshd runs every command as `LOGIN_SHELL -c LINE`, and the login shell is the remote account's
// choice: POSIX shells (sh, bash, dash, ksh, zsh), fish and the csh family all occur on HPC
// systems. A word is therefore written so that each of them reads it the same way:
//   - inside single quotes nothing is special to a POSIX shell, but fish reads \' and \\ as
//     escapes there and csh expands history (!) there, even under -c;
//   - so single quotes hold everything but ', \ and !, which are written outside them,
//     backslash-escaped (\' \\ \!), as all of these shells read them.
//
// A newline inside quotes is refused by the csh family ("Unmatched '."): the whole line fails
// and runs nothing. Without this, a word holding `\';cmd;#` ran cmd under fish, and one holding
// `!#:0:s/x/y/` arrived rewritten under tcsh; paths chosen by grantees reach these lines.
package shell

import "strings"

// Quote quotes s as one word: single-quoted runs of s, with each ', \ and ! written outside the
// quotes and backslash-escaped (see the package doc for why each).
func Quote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\'', '\\', '!':
			b.WriteByte('\'')
			b.WriteByte('\\')
			b.WriteByte(c)
			b.WriteByte('\'')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// Command quotes every word of argv and prefixes `env LC_ALL=C`, so that error messages are in
// English for classification (and `env` works from csh-family and fish login shells too).
func Command(argv ...string) string {
	var b strings.Builder
	b.WriteString("env LC_ALL=C")
	for _, a := range argv {
		b.WriteByte(' ')
		b.WriteString(Quote(a))
	}
	return b.String()
}
