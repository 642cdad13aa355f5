// Package api is sshapi's HTTP interface: routing, authentication middleware, one file per
// resource (systems, credentials, commands, the SSH-API study's routes), RFC 9457 problem+json
// errors, Prometheus metrics and the OpenAPI 3.1 document that describes every route.
//
// File routes serve two kinds of system: an SSH host through package files (files.go) and an
// S3 bucket through its storage.Backend (objects*.go, s3systems.go, s3credentials.go). The
// access decision is the same for both; byKind (and fileOp's one branch) picks the handler by
// what the decision carries, so no handler body asks which kind it serves.
package api
