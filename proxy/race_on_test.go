//go:build race

package proxy

// raceBuild is true when the tests run under the race detector, whose
// sync.Pool drops a quarter of what is put back (a request's state is
// then made anew) and whose instrumentation makes some values escape.
const raceBuild = true
