// Package api is sshapi's HTTP interface: routing, authentication middleware, one file per
// resource (systems, credentials, commands, the SSH-API study's routes), RFC 9457 problem+json
// errors, Prometheus metrics and the OpenAPI 3.1 document that describes every route.
package api
