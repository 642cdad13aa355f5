// Package bench is sshapi's benchmark harness around the open-loop engine of package openloop
// (constant arrival rate, latency measured from each request's scheduled send time, so a slow
// server cannot hide its queueing; HDR-histogram summaries; error classification): the targets
// it drives (sshapi over HTTP, OpenSSH's ssh with
// and without connection multiplexing, and Python peers over a line protocol), and the JSON,
// Markdown and PNG reports.
//
// The engine knows nothing about what a request is: a target is a function that performs one
// request and returns nil or an error. Classify turns errors into a few stable kinds ("http 503",
// "timeout", "transport: connection reset", ...), so reports count errors by kind.
package bench
