package ratelimit

import "time"

// Claims decided with a request. A Redis store built with a claim
// function (RedisOptions.ClaimFunc: the Lua source of a function
// claim(KEYS, ARGV), exgate's duplicate protection's) runs a request's
// ClaimPart in the round trip that decides the request's limits: the
// claim costs no round trip, and no deadline, of its own. Such requests
// are sent in round trips of their own, with the claim's deadline
// (ClaimPart.Timeout), and wait there for the replicas the claim asks for
// (WAIT, on the connection of the claim's run, after it).
//
// Outside a Cluster the claim runs in the one script run that decides
// the request, right after its limits and only when they let it pass: a
// request refused by a limit claims nothing, and a request whose claim
// does not take what it claims (its reply does not start with
// ClaimTaken: a duplicate, a refusal, an error) is charged nothing
// (Answer.Uncharged), all or nothing both ways. In a Cluster a request's
// limits and its claim may live on different nodes: the claim runs in
// the script run of its keys' slot, right after the request's part in
// that slot and only when that part passes, or, when the request has no
// part there, on its own, whatever the other parts decide. All the runs
// go at once, one round trip. A request refused (or failed) by a part in
// another slot may then come back with a claim that ran
// (ClaimReply.Run): the script runs are each all or nothing, the request
// is not, and freeing such a claim is the caller's, who knows what it
// means (the proxy frees an order's claim before answering it, as split
// requests' charges are given back before theirs).
//
// The parts in other slots that charged a request whose claim was not
// taken are given back as a refused split request's are.
//
// A request answered by its claim (not taken) is charged in its
// allowance checks instead (Check.Allowance: exgate's allowance of an
// account's orders answered by duplicate protection, so that a client
// re-sending them is throttled like any other): in the claim's script
// run when they are there, else in the round trip that gives back the
// other parts. An allowance check refuses the request like any other
// once it cannot take its cost; in a Cluster a claim with no part in
// its slot runs all the same, and the deny cache answers the client's
// next requests. A request refused by another part after its claim's
// run charged its allowance is given that charge back.
//
// A request carrying a claim is never answered from a hot key's lease:
// it goes to Redis with its claim, one round trip for both. A ClaimPart
// is not sent (ClaimReply.Sent is false) when the request does not reach
// Redis: the Memory store, a DenyCache refusal, calls failing fast
// after a failed round trip, a request with no limit to decide, a
// request past its deadline before its round trip, and in a Cluster a
// request whose spray guard, sent alone first, failed. The caller then
// claims on its own, when the request passed.

// ClaimTaken is the first element of the reply of a claim that took what
// it claims: only then is its request charged.
const ClaimTaken = "claimed"

// ClaimPart is a claim decided with a Request: the claim function's
// KEYS and ARGV, and what its round trip honours.
type ClaimPart struct {
	// Keys and Args are the claim function's KEYS and ARGV.
	Keys []string
	Args []any
	// Timeout is the deadline of the round trip carrying the claim; it
	// replaces RedisOptions.Timeout when longer.
	Timeout time.Duration
	// ReplicaAcks, when above 0, is how many replicas must acknowledge
	// the round trip's writes: WAIT is sent after the script, blocking
	// at most WaitTimeout.
	ReplicaAcks int
	WaitTimeout time.Duration
}

// ClaimReply is what a ClaimPart came to.
type ClaimReply struct {
	// Sent reports that the claim went to Redis with the request's
	// limits: it was run if the part it rode with passed (Reply), or its
	// run failed (Err) and it may have been. When Sent is false the
	// claim was not run: no round trip carried it.
	Sent bool
	// Run reports that the claim function ran: outside a Cluster, the
	// request passed; in a Cluster, the part in the claim's slot passed
	// (or there was none), whatever the request's other parts, on other
	// nodes, came to.
	Run bool
	// Reply is the claim function's reply.
	Reply []any
	// Err is the failure of the claim's run, or the error the claim
	// function raised (ClaimError). A claim that ran keeps its Reply
	// when a run on another node failed.
	Err error
	// Acked is how many replicas the WAIT after the claim's run
	// reported, and AckErr WAIT's failure, with ClaimPart.ReplicaAcks.
	Acked  int64
	AckErr error
}

// ClaimError is an error the claim function raised or returned in the
// script run (a malformed entry, Redis refusing writes at maxmemory);
// the run's other requests are decided all the same.
type ClaimError string

func (e ClaimError) Error() string { return string(e) }
