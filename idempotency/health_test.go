package idempotency

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/internal/redistest"
)

// TestMemoryHealth: the memory store says how much it holds, and that it
// is full once it takes no new identifier.
func TestMemoryHealth(t *testing.T) {
	o := testOptions(newClock())
	o.MaxEntries = 3
	s := NewMemory(o)
	for i := range 3 { // three accounts: one alone may take half the store
		if h, err := s.Health(context.Background()); err != nil || h.Full || h.Identifiers != i {
			t.Fatalf("with %d identifiers: %+v %v", i, h, err)
		}
		mustClaim(t, s, Key{"acct" + strconv.Itoa(i), "a"}, fpA, Claimed)
	}
	h, err := s.Health(context.Background())
	if !h.Full || !errors.Is(err, ErrFull) || h.Bytes == 0 || h.MaxBytes != 1<<30 {
		t.Errorf("at max_entries: %+v %v, want full", h, err)
	}
}

// TestRedisHealth: Redis at maxmemory is named full (its writes, claims
// and limits alike, are refused), and with replica_acks a master without
// the replicas its claims wait for is named, in a Cluster too: every
// order with an identifier would be refused.
func TestRedisHealth(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	o := testOptions(newClock())
	o.KeyPrefix = uniquePrefix()
	s := NewRedis(newClient(t, srv.Addr), o)
	ctx := context.Background()
	if h, err := s.Health(ctx); err != nil || h.Full || h.MaxBytes != 4<<20 || h.Bytes == 0 {
		t.Fatalf("a fresh server: %+v %v", h, err)
	}
	// Fill it to maxmemory: claims are then refused as a full store. The
	// filler has never measured Redis's room (Health): its shares are
	// their static size alone (TestRedisRoomFromMaxmemory tests the room).
	filler := NewRedis(newClient(t, srv.Addr), o)
	var err error
	for i := 0; err == nil && i < 200000; i++ {
		_, err = filler.ClaimAll(ctx, "filler"+strconv.Itoa(i%1000), "", footprintIDs(i*10, 10), fpA)
	}
	if !errors.Is(err, ErrFull) {
		t.Fatalf("claims into a full Redis: %v, want ErrFull", err)
	}
	h, err := s.Health(ctx)
	if !h.Full || !errors.Is(err, ErrFull) || !strings.Contains(err.Error(), "maxmemory") || !strings.Contains(err.Error(), srv.Addr) {
		t.Errorf("at maxmemory: %+v %v, want full, naming the server", h, err)
	}

	o.ReplicaAcks = 1
	if _, err := NewRedis(newClient(t, redistest.Start(t).Addr), o).Health(ctx); !errors.Is(err, ErrReplicasMissing) {
		t.Errorf("replica_acks 1, no replica: %v, want ErrReplicasMissing", err)
	}
	master := redistest.Start(t)
	redistest.StartReplica(t, master)
	if _, err := NewRedis(newClient(t, master.Addr), o).Health(ctx); err != nil {
		t.Errorf("replica_acks 1, one replica: %v", err)
	}

	cl := redistest.StartCluster(t, 3) // masters without replicas
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	_, err = NewRedis(c, o).Health(ctx)
	if !errors.Is(err, ErrReplicasMissing) {
		t.Fatalf("Cluster without replicas, replica_acks 1: %v, want ErrReplicasMissing", err)
	}
	for _, a := range cl.Addrs {
		if !strings.Contains(err.Error(), a) {
			t.Errorf("%q does not name master %s", err, a)
		}
	}
	o.ReplicaAcks = 0
	if _, err := NewRedis(c, o).Health(ctx); err != nil {
		t.Errorf("Cluster without replicas, replica_acks 0: %v", err)
	}
}

// TestRedisRoomFromMaxmemory: outside a Cluster, Health measures the room
// a claim compares its client's share with (Redis.room): maxmemory short
// of fullMargin, less what Redis holds besides the store's claims. Ten
// addresses filling it in an outage are each refused their share
// (ErrAccountFull), never the store full, and a newcomer's order finds
// room; without maxmemory the room is unknown and shares are static.
func TestRedisRoomFromMaxmemory(t *testing.T) {
	srv := redistest.Start(t)
	o := testOptions(newClock())
	o.KeyPrefix = uniquePrefix()
	s := NewRedis(newClient(t, srv.Addr), o)
	ctx := context.Background()
	if _, err := s.Health(ctx); err != nil || s.room.Load() != 0 {
		t.Fatalf("without maxmemory: room %d (%v), want 0", s.room.Load(), err)
	}
	// Redis's first script run takes about 240 KB of its own, once.
	cl := mustClaim(t, s, k("warm"), fpA, Claimed)
	must(t, s.Release(ctx, cl))
	const room = 512 << 10
	for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", strconv.FormatInt(redisUsed(t, srv)+room, 10)}} {
		if _, err := srv.Do("CONFIG", "SET", kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Health(ctx); err != nil || s.room.Load() < room-fullMargin(room)-(32<<10) || s.room.Load() > room-fullMargin(room)+(32<<10) {
		t.Fatalf("room %d (%v), want about %d", s.room.Load(), err, room-fullMargin(room))
	}
	held := map[string]int{}
	for a := range 10 {
		addr := "addr 198.51.100." + strconv.Itoa(10+a)
		for i := 10000; ; i++ {
			cl, err := s.ClaimAll(ctx, "tok"+strconv.Itoa(10+a), addr, []string{"i" + strconv.Itoa(i)}, fpA)
			if errors.Is(err, ErrAccountFull) {
				break
			}
			if err != nil {
				t.Fatalf("address %d's order %d: %v; want claimed or ErrAccountFull (its share), never the store full", a, i, err)
			}
			must(t, s.MarkUnknown(ctx, cl))
			held[addr]++
		}
		if a == 4 {
			must(t, func() error { _, err := s.Health(ctx); return err }()) // measured again, the claims counted
		}
	}
	if cl, err := s.ClaimAll(ctx, "tok99", "addr 203.0.113.99", []string{"i99999"}, fpA); err != nil || cl.Outcome != Claimed {
		t.Fatalf("a newcomer after ten addresses filled Redis (%v): %+v, %v; want claimed", held, cl, err)
	}
	if held["addr 198.51.100.10"] <= held["addr 198.51.100.19"] {
		t.Errorf("the first address took %d, the last %d: want fewer as the room shrinks", held["addr 198.51.100.10"], held["addr 198.51.100.19"])
	}
}
