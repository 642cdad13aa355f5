package api

import (
	"regexp"
	"slices"
	"strings"

	"github.com/sshapi/sshapi/internal/store"
)

// S3 systems: a bucket at an endpoint, optionally under a key prefix that acts as the root.

var (
	// bucketPattern is S3's rule for bucket names (3-63 lower-case letters, digits, '.', '-').
	bucketPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)
	regionPattern = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)
)

// validateS3System checks an S3 system's fields: SSH fields are refused (naming the first one
// given), the endpoint must be an http(s) URL without user info, query or path (its host is
// judged by the network policy in checkRoute), the bucket a valid bucket name, the prefix a
// relative key prefix without dot segments.
func validateS3System(s *store.System) error {
	if f := sshFieldSet(s); f != "" {
		return badField(f, "is a field of SSH systems, not of S3 systems (kind s3)")
	}
	if s.Endpoint == "" {
		return badField("endpoint", "is required for an S3 system (e.g. https://s3.example.org)")
	}
	if s.Region == "" {
		s.Region = "us-east-1"
	}
	if !regionPattern.MatchString(s.Region) {
		return badField("region", "must be a region name such as us-east-1")
	}
	if !bucketPattern.MatchString(s.Bucket) || strings.Contains(s.Bucket, "..") {
		return badField("bucket", "must be an S3 bucket name: 3-63 lower-case letters, digits, '.' or '-'")
	}
	s.Prefix = strings.Trim(s.Prefix, "/")
	if len(s.Prefix) > 512 || strings.ContainsRune(s.Prefix, 0) || strings.Contains(s.Prefix, "//") ||
		slices.ContainsFunc(strings.Split(s.Prefix, "/"), func(seg string) bool { return seg == "." || seg == ".." }) {
		return badField("prefix", "must be a key prefix of at most 512 characters without empty, '.' or '..' segments")
	}
	if len(s.Description) > 1000 {
		return badField("description", "must be at most 1000 characters")
	}
	return nil
}

// sshFieldSet names the first SSH-only field s has a value in, or "".
func sshFieldSet(s *store.System) string {
	switch {
	case s.Host != "":
		return "host"
	case s.Port != 0:
		return "port"
	case len(s.HostKeys) > 0:
		return "host_keys"
	case len(s.HostKeyFingerprints) > 0:
		return "host_key_fingerprints"
	case s.TrustOnFirstUse:
		return "trust_on_first_use"
	case s.MaxSessions != 0:
		return "max_sessions"
	case s.RootDir != "":
		return "root_dir"
	case s.Jump != "":
		return "jump"
	case len(s.Ciphers) > 0:
		return "ciphers"
	case len(s.KeyExchanges) > 0:
		return "kex"
	}
	return ""
}

// s3FieldSet names the first S3-only field s has a value in, or "".
func s3FieldSet(s *store.System) string {
	switch {
	case s.Endpoint != "":
		return "endpoint"
	case s.Region != "":
		return "region"
	case s.Bucket != "":
		return "bucket"
	case s.Prefix != "":
		return "prefix"
	case s.PathStyle:
		return "path_style"
	}
	return ""
}

// systemAddress is where a system is, for the audit: an SSH host, or an S3 endpoint and bucket.
func systemAddress(s *store.System) string {
	if s.KindOf() == store.KindS3 {
		return s.Endpoint + " " + s.Bucket
	}
	return s.Host
}
