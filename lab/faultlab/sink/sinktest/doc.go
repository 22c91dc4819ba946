// Package sinktest holds the fault lab's sinks that only tests use: Paced,
// which holds each batch until the wall clock reaches its simulated time, so
// that a run started at the wall clock's now arrives as a live fleet's
// telemetry would (the live benchmark in cmd/tailcause).
package sinktest
