// Package bench is sshapi's load generator: an open-loop engine that sends requests at a
// constant arrival rate and measures each one's latency from the time it was scheduled to be
// sent (so a slow server cannot hide its queueing: no coordinated omission), HDR-histogram
// summaries, error classification, the targets it drives (sshapi over HTTP, OpenSSH's ssh with
// and without connection multiplexing, and Python peers over a line protocol), and the JSON,
// Markdown and PNG reports.
//
// The engine knows nothing about what a request is: a target is a function that performs one
// request and returns nil or an error. Classify turns errors into a few stable kinds ("http 503",
// "timeout", "transport: connection reset", ...), so reports count errors by kind.
package bench
