// Package openloop is an open-loop load generator: requests are scheduled at a fixed rate
// whatever the target's answers (so a slow target's queue shows in the latencies, corrected for
// coordinated omission), bounded in flight and drained before a deadline, and summarized as
// HDR latency percentiles and failures by kind. The service's load route and the benchmark
// harness (package bench) both use it.
package openloop
