package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Health is what a store can say of its room, for readiness, metrics and
// the operator console.
type Health struct {
	// Bytes is what the store holds and MaxBytes its bound: the memory
	// store's charged bytes (MemoryBytes) and Options.MaxBytes; in Redis
	// used_memory and maxmemory of its fullest master (MaxBytes 0: Redis
	// has no maxmemory).
	Bytes, MaxBytes int64
	// Identifiers is how many identifiers the memory store holds; 0 in
	// Redis.
	Identifiers int
	// Full reports a store that takes no new identifier for lack of
	// room: the memory store at Options.MaxEntries or MaxBytes, Redis at
	// maxmemory (where it refuses writes, limits' and claims' alike).
	Full bool
}

// ErrReplicasMissing: a Redis master has fewer replicas online than
// Options.ReplicaAcks asks to acknowledge each claim, so every claim it
// holds would be refused (ErrNotReplicated) and every order with an
// identifier answered 503.
var ErrReplicasMissing = errors.New("idempotency: fewer Redis replicas online than replica_acks")

// healthError is a finding of Health that is not a failure to reach the
// store: is is ErrFull or ErrReplicasMissing.
type healthError struct {
	msg string
	is  error
}

func (e healthError) Error() string        { return e.msg }
func (e healthError) Is(target error) bool { return target == e.is }

// masterError names the master a finding or failure is of.
type masterError struct {
	addr string
	err  error
}

func (e masterError) Error() string { return e.addr + ": " + e.err.Error() }
func (e masterError) Unwrap() error { return e.err }

// joined is the findings of several masters, said in one line.
type joined []error

func (j joined) Error() string {
	msgs := make([]string, len(j))
	for i, e := range j {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

func (j joined) Unwrap() []error { return j }

// Health reports the memory store's room; its error is ErrFull when it
// is full.
func (s *Memory) Health(context.Context) (Health, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(s.o.Now())
	h := Health{Bytes: s.bytes, MaxBytes: s.o.MaxBytes, Identifiers: s.ids}
	// Full when even an order of one short identifier would not fit.
	h.Full = s.ids >= s.o.MaxEntries || s.bytes+MemoryBytes(1, 32, 0) > s.o.MaxBytes
	if h.Full {
		return h, healthError{fmt.Sprintf("memory store full: %d of %d identifiers, %d of %d bytes", s.ids, s.o.MaxEntries, s.bytes, s.o.MaxBytes), ErrFull}
	}
	return h, nil
}

// Health reports Redis's room and, with Options.ReplicaAcks, whether
// every master has the replicas its claims wait for, from INFO on each
// master (every master of a Cluster). Its error is the master's failure,
// ErrFull for a master at maxmemory (within 64KiB, or 1%, of it), or
// ErrReplicasMissing, naming the master. A Redis user not allowed INFO is
// reported as reachable, its room unknown.
func (s *Redis) Health(ctx context.Context) (Health, error) {
	var mu sync.Mutex
	var h Health
	var errs joined
	probe := func(ctx context.Context, c *redis.Client) error {
		mh, err := s.probe(ctx, c)
		mu.Lock()
		defer mu.Unlock()
		if mh.Bytes > h.Bytes || (mh.MaxBytes > 0 && (h.MaxBytes == 0 || mh.MaxBytes-mh.Bytes < h.MaxBytes-h.Bytes)) {
			h.Bytes, h.MaxBytes = mh.Bytes, mh.MaxBytes
		}
		h.Full = h.Full || mh.Full
		if err != nil {
			errs = append(errs, masterError{c.Options().Addr, err})
		}
		return nil
	}
	switch c := s.c.(type) {
	case *redis.ClusterClient:
		if err := c.ForEachMaster(ctx, probe); err != nil {
			return h, err
		}
	case *redis.Client:
		_ = probe(ctx, c)
	default:
		uc, ok := s.c.(interface {
			Ping(context.Context) *redis.StatusCmd
		})
		if !ok {
			return h, nil
		}
		return h, uc.Ping(ctx).Err()
	}
	if len(errs) == 0 {
		return h, nil
	}
	return h, errs
}

// probe reads one master's room and replicas.
func (s *Redis) probe(ctx context.Context, c *redis.Client) (Health, error) {
	var h Health
	mem, err := c.Info(ctx, "memory").Result()
	if err != nil {
		if strings.HasPrefix(err.Error(), "NOPERM") {
			return h, c.Ping(ctx).Err()
		}
		return h, err
	}
	h.Bytes, h.MaxBytes = infoInt(mem, "used_memory"), infoInt(mem, "maxmemory")
	if !s.cluster {
		s.measureRoom(ctx, c, h.Bytes, h.MaxBytes)
	}
	var errs joined
	if h.MaxBytes > 0 && h.Bytes+fullMargin(h.MaxBytes) >= h.MaxBytes {
		// Within 64KiB (or 1%) of it: Redis refuses the next writes
		// that take memory, and has refused some already.
		h.Full = true
		errs = append(errs, healthError{fmt.Sprintf("Redis at maxmemory: used_memory %d of %d bytes (the limits' writes are refused too)", h.Bytes, h.MaxBytes), ErrFull})
	}
	if s.o.ReplicaAcks > 0 {
		repl, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return h, err
		}
		if n := onlineReplicas(repl); n < s.o.ReplicaAcks {
			errs = append(errs, healthError{fmt.Sprintf("%d replica(s) online, idempotency.replica_acks %d: give the master a replica, or set replica_acks: 0 to go without",
				n, s.o.ReplicaAcks), ErrReplicasMissing})
		}
	}
	if len(errs) == 0 {
		return h, nil
	}
	return h, errs
}

// fullMargin is how near maxmemory Health calls Redis full: 64KiB, or 1%
// of maxmemory.
func fullMargin(maxmemory int64) int64 { return max(64<<10, maxmemory/100) }

// measureRoom sets the room a claim compares its client's share with
// (Redis.room), outside a Cluster, from the master's used_memory and
// maxmemory and the store's counter (storeCounter): what the store's
// claims hold, and what Redis has free short of fullMargin. Redis's other
// keys and buffers (the limits', its clients') are what they were when it
// was read; the store's own claims are counted exactly as they come and
// go. Without maxmemory the room is unknown (0): shares are bounded by
// their static size alone.
func (s *Redis) measureRoom(ctx context.Context, c *redis.Client, used, maxmemory int64) {
	if maxmemory <= 0 {
		s.room.Store(0)
		return
	}
	slots, err := c.HGetAll(ctx, s.o.KeyPrefix+storeCounter).Result()
	if err != nil {
		return // the last room stands
	}
	oldest := (s.o.Now().UnixMilli() - (s.o.Retention + s.o.InFlightTimeout).Milliseconds()) / s.slotMS
	var held int64
	for f, v := range slots {
		slot, err := strconv.ParseInt(f[1:], 10, 64)
		if f[0] != 'b' || err != nil || slot < oldest {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		held += n
	}
	s.room.Store(max(1, held+maxmemory-fullMargin(maxmemory)-used))
}

// infoInt reads an integer field of an INFO reply, 0 when absent.
func infoInt(info, field string) int64 {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// onlineReplicas counts the replicas INFO replication lists online
// (slave<i>:ip=…,state=online,…).
func onlineReplicas(info string) int {
	n := 0
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "slave") && strings.Contains(line, ":ip=") && strings.Contains(line, ",state=online,") {
			n++
		}
	}
	return n
}
