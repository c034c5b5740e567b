package idempotency

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/internal/redistest"
)

// TestReplicaAcks: with ReplicaAcks set, a Claimed answer means the
// replica holds the claim; without a replica to acknowledge it (none, or
// one that hangs), the claim fails with ErrNotReplicated within the
// deadline and the identifier is left free for the retry.
func TestReplicaAcks(t *testing.T) {
	master := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	replica := redistest.StartReplica(t, master)
	alone := redistest.Start(t)
	o := testOptions(newClock())
	o.ReplicaAcks = 1
	// WAIT blocks for half the deadline (1s), leaving the other half for
	// the round trip itself on a loaded machine: a read timing out would
	// be a refusal all the same, but not the ErrNotReplicated under test.
	o.Timeout = 2 * time.Second
	o.KeyPrefix = "acks:"

	t.Run("acknowledged", func(t *testing.T) {
		s := NewRedis(newClient(t, master.Addr), o)
		for i := range 20 {
			k := Key{Account: "acct", Identifier: "k" + strconv.Itoa(i)}
			cl := mustClaim(t, s, k, fpA, Claimed)
			// Asked right after the claim returned, without waiting: the
			// replica already has it, in flight.
			if v, err := replica.Do("GET", s.keyOf(k)[0]); err != nil || !strings.HasPrefix(v.(string), "p") {
				t.Fatalf("replica's copy of claim %v right after Claimed: %q %v", k, v, err)
			}
			must(t, s.Complete(context.Background(), cl, Record{Status: 201, Body: []byte("{}")}))
			mustClaim(t, s, k, fpA, Replay)
		}
		// A script unknown to the master (flushed, or a new master) is
		// sent whole.
		if _, err := master.Do("SCRIPT", "FLUSH"); err != nil {
			t.Fatal(err)
		}
		mustClaim(t, s, Key{Account: "acct", Identifier: "after-flush"}, fpA, Claimed)
	})

	t.Run("no replica", func(t *testing.T) {
		s := NewRedis(newClient(t, alone.Addr), o)
		start := time.Now()
		k := Key{Account: "acct", Identifier: "k"}
		_, err := s.Claim(context.Background(), k, fpA)
		if !errors.Is(err, ErrNotReplicated) {
			t.Fatalf("Claim without a replica = %v, want ErrNotReplicated", err)
		}
		if d := time.Since(start); d > 30*time.Second { // only bounds a WAIT with no deadline
			t.Errorf("refused after %v, want the %v deadline", d, o.Timeout)
		}
		if n, err := alone.Do("EXISTS", s.keyOf(k)[0]); err != nil || n != int64(0) {
			t.Errorf("unacknowledged claim left on the master: EXISTS = %v %v", n, err)
		}
	})

	t.Run("replica hangs", func(t *testing.T) {
		s := NewRedis(newClient(t, master.Addr), o)
		replica.Freeze()
		defer replica.Thaw()
		start := time.Now()
		k := Key{Account: "acct", Identifier: "frozen"}
		_, err := s.Claim(context.Background(), k, fpA)
		if !errors.Is(err, ErrNotReplicated) {
			t.Fatalf("Claim with the replica frozen = %v, want ErrNotReplicated", err)
		}
		if d := time.Since(start); d > 30*time.Second { // only bounds a WAIT with no deadline
			t.Errorf("refused after %v, want the %v deadline", d, o.Timeout)
		}
		replica.Thaw()
		// The retry, once the replica answers, goes through.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			c, err := s.Claim(context.Background(), k, fpA)
			if err == nil && c.Outcome == Claimed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("retry after the replica came back: %+v %v", c, err)
			}
		}
	})
}

// TestReplicaAcksCluster: in a Cluster with a replica per master, each
// claim waits for its own master's replica.
func TestReplicaAcksCluster(t *testing.T) {
	cl := redistest.StartReplicatedCluster(t, 3, 2*time.Second)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	o := testOptions(newClock())
	o.ReplicaAcks = 1
	o.Timeout = 2 * time.Second // see TestReplicaAcks
	o.KeyPrefix = "acks:"
	s := NewRedis(c, o)
	masters := map[string]bool{}
	for i := range 30 {
		k := Key{Account: "acct" + strconv.Itoa(i), Identifier: "k"}
		mustClaim(t, s, k, fpA, Claimed)
		node, err := c.MasterForKey(context.Background(), s.keyOf(k)[0])
		if err != nil {
			t.Fatal(err)
		}
		masters[node.Options().Addr] = true
	}
	if len(masters) != 3 {
		t.Errorf("claims reached %d masters, want 3", len(masters))
	}
	// o.ReplicaAcks = 2 cannot be met with one replica per master.
	o.ReplicaAcks = 2
	if _, err := NewRedis(c, o).Claim(context.Background(), Key{Account: "acct", Identifier: "two"}, fpA); !errors.Is(err, ErrNotReplicated) {
		t.Errorf("two acknowledgements from one replica: %v, want ErrNotReplicated", err)
	}
}

// TestFailoverLosesUnacknowledgedClaim shows why claims wait for a
// replica. The replica is cut off (frozen, and its link closed by the
// master with CLIENT KILL TYPE replica) while a claim is taken, the
// master is lost (SIGKILL) and the replica promoted (REPLICAOF NO ONE, as
// Sentinel does). Without acknowledgements the claim was Claimed, so the order
// was sent, yet the new master does not have it: the retry is Claimed
// again and sent a second time. With ReplicaAcks 1 the claim is refused
// (the order is not sent) and the retry is the only placement.
func TestFailoverLosesUnacknowledgedClaim(t *testing.T) {
	for _, tc := range []struct {
		acks   int
		placed int // times the order is sent: the claim, then the retry
	}{
		{0, 2},
		{1, 1},
	} {
		t.Run("replica_acks="+strconv.Itoa(tc.acks), func(t *testing.T) {
			master := redistest.Start(t, "--repl-diskless-sync-delay", "0")
			replica := redistest.StartReplica(t, master)
			o := testOptions(newClock())
			o.ReplicaAcks = tc.acks
			o.Timeout = 2 * time.Second // see TestReplicaAcks
			before := NewRedis(newClient(t, master.Addr), o)
			k := Key{Account: "acct", Identifier: "order-1"}

			placed := 0
			replica.Freeze()
			if _, err := master.Do("CLIENT", "KILL", "TYPE", "replica"); err != nil {
				t.Fatal(err)
			}
			c, err := before.Claim(context.Background(), k, fpA)
			master.Stop()
			replica.Thaw()
			switch {
			case err == nil && c.Outcome == Claimed:
				placed++
			case !errors.Is(err, ErrNotReplicated):
				t.Fatalf("claim with the replica cut off: %+v, %v", c, err)
			}
			if _, err := replica.Do("REPLICAOF", "NO", "ONE"); err != nil {
				t.Fatal(err)
			}
			after := NewRedis(newClient(t, replica.Addr), Options{Now: o.Now, KeyPrefix: o.KeyPrefix, Timeout: o.Timeout})
			if c, err := after.Claim(context.Background(), k, fpA); err == nil && c.Outcome == Claimed {
				placed++
			}
			if placed != tc.placed {
				t.Errorf("with replica_acks %d the order is sent %d times across the failover, want %d", tc.acks, placed, tc.placed)
			}
		})
	}
}

// BenchmarkClaimReplicaAcks measures what waiting for a replica adds to
// a claim (a new identifier each time) on a master with one replica on
// the same host: the replica's acknowledgement round trip.
func BenchmarkClaimReplicaAcks(b *testing.B) {
	master := redistest.Start(b, "--repl-diskless-sync-delay", "0")
	redistest.StartReplica(b, master)
	for _, acks := range []int{0, 1} {
		b.Run("replica_acks="+strconv.Itoa(acks), func(b *testing.B) {
			c := redis.NewClient(&redis.Options{Addr: master.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
			b.Cleanup(func() { _ = c.Close() })
			o := Options{ReplicaAcks: acks, KeyPrefix: "bench" + strconv.Itoa(acks) + ":", Timeout: time.Second}
			s := NewRedis(c, o)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if _, err := s.Claim(ctx, Key{Account: "acct", Identifier: strconv.Itoa(i)}, fpA); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
