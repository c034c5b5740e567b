//go:build !race

package idempotency

// raceBuild is true when the tests run under the race detector, whose
// instrumentation makes some buffers escape to the heap.
const raceBuild = false
