// Package unreachable gives tests addresses where nothing answers: one
// whose connects time out (Addr) and one whose connects are refused
// (Refused), each held for the test so that no other process takes it.
package unreachable
