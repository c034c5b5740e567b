package idempotency

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/exgate/exgate/internal/redistest"
)

// tripCount is a go-redis hook counting the round trips of finish runs: a
// script run sent alone, or a pipeline, the script runs it carries and
// the finishes they carry (finishAllScript carries many).
type tripCount struct {
	alone, pipelines, piped, finishes atomic.Int64
}

func (h *tripCount) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *tripCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := finishesIn(cmd); n > 0 {
			h.alone.Add(1)
			h.finishes.Add(n)
		}
		return next(ctx, cmd)
	}
}

func (h *tripCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		runs := int64(0)
		for _, c := range cmds {
			if n := finishesIn(c); n > 0 {
				runs++
				h.finishes.Add(n)
			}
		}
		if runs > 0 {
			h.pipelines.Add(1)
			h.piped.Add(runs)
		}
		return next(ctx, cmds)
	}
}

// finishesIn returns how many finishes cmd runs: 1 for the finish script
// (its ARGV[2] is a state; the claim script's is a fingerprint), the
// number of its runs for finishAllScript (ARGV[1] a key count, ARGV[3] a
// state), 0 for any other command.
func finishesIn(cmd redis.Cmder) int64 {
	a := cmd.Args()
	if len(a) < 4 || (a[0] != "evalsha" && a[0] != "eval") {
		return 0
	}
	n, _ := a[2].(int)
	isState := func(i int) bool {
		st, ok := a[i].(*string)
		return ok && (*st == "d" || *st == "u" || *st == "free")
	}
	switch {
	case len(a) >= 3+n+8 && isState(3+n+2):
		if _, batch := a[3+n].(int); batch {
			return int64(len(a)-3-n) / 8
		}
	case len(a) >= 3+n+2 && isState(3+n+1):
		return 1
	}
	return 0
}

// queuedFinishes claims n identifiers on s, then, with srv frozen, starts
// settle(i, claim) for each, in a goroutine of its own, and returns once
// every run the store does not have in flight is queued (finishInFlight
// are), with the claims and the channel of the runs' errors.
func queuedFinishes(t *testing.T, s *Redis, srv *redistest.Server, name string, n int,
	settle func(int, Claim) error) ([]Claim, <-chan error) {
	t.Helper()
	claims := make([]Claim, n)
	for i := range claims {
		claims[i] = mustClaim(t, s, k(name+strconv.Itoa(i)), fpA, Claimed)
	}
	srv.Freeze()
	t.Cleanup(srv.Thaw)
	errs := make(chan error, n)
	for i, c := range claims {
		go func() { errs <- settle(i, c) }()
	}
	for {
		s.finishes.mu.Lock()
		queued := len(s.finishes.queue)
		s.finishes.mu.Unlock()
		if queued == n-finishInFlight {
			return claims, errs
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRedisFinishesShareRoundTrips: the finish runs of concurrent orders
// share round trips: those that find finishInFlight round trips under way
// go in one pipeline once the first ends, and each is answered with its
// own reply, its response recorded for its own identifier.
func TestRedisFinishesShareRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr)
	o := testOptions(newClock())
	o.KeyPrefix, o.Timeout = uniquePrefix(), 30*time.Second
	s := NewRedis(client, o)
	warm := mustClaim(t, s, k("warm"), fpA, Claimed)
	if err := s.Complete(context.Background(), warm, Record{Status: 201}); err != nil { // the scripts loaded
		t.Fatal(err)
	}
	if err := s.finishAll.Load(context.Background(), client).Err(); err != nil {
		t.Fatal(err)
	}
	var trips tripCount
	client.AddHook(&trips)
	_, runsBefore := s.ScriptRuns()
	const n = 20
	claims, errs := queuedFinishes(t, s, srv, "f", n, func(i int, c Claim) error {
		return s.Complete(context.Background(), c, Record{Status: 201, ContentType: "application/json", Body: []byte(`{"id":` + strconv.Itoa(i) + `}`)})
	})
	srv.Thaw()
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("Complete: %v", err)
		}
	}
	if a, p, r, f := trips.alone.Load(), trips.pipelines.Load(), trips.piped.Load(), trips.finishes.Load(); a != finishInFlight || p != 1 || r != 1 || f != n {
		t.Errorf("%d script runs alone, %d in %d pipelines, %d finishes in all; want %d alone and the %d others in one script run",
			a, r, p, f, finishInFlight, n-finishInFlight)
	}
	if _, runs := s.ScriptRuns(); runs-runsBefore != 2 {
		t.Errorf("the store counts %d finish script runs, want 2 (one alone, one of the others)", runs-runsBefore)
	}
	for i, c := range claims {
		r := mustClaim(t, s, c.Key, fpA, Replay)
		if want := `{"id":` + strconv.Itoa(i) + `}`; string(r.Record.Body) != want || r.Record.Status != 201 {
			t.Errorf("%s replays %d %s, want 201 %s", c.Key, r.Record.Status, r.Record.Body, want)
		}
	}
}

// TestRedisFinishTripScriptsLost: a round trip of finish runs that Redis
// answers NOSCRIPT (its scripts lost in a restart or a failover) sends
// them again with the script, and each gets its own reply; a run whose
// context ended in the queue is not sent, and reports why.
func TestRedisFinishTripScriptsLost(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr)
	o := testOptions(newClock())
	o.KeyPrefix = uniquePrefix()
	s := NewRedis(client, o)
	var trips tripCount
	client.AddHook(&trips)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	var batch []*finishCall
	claims := make([]Claim, 3)
	for i := range claims {
		claims[i] = mustClaim(t, s, k("s"+strconv.Itoa(i)), fpA, Claimed)
		f := completion(s, claims[i], strconv.Itoa(i))
		if i == 1 {
			f.ctx = ended
		}
		batch = append(batch, f)
	}
	if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	s.finishTrip(client, batch)
	for i, f := range batch {
		switch {
		case i == 1 && !errors.Is(f.err, context.Canceled):
			t.Errorf("run %d of an ended context: %d, %v; want context.Canceled", i, f.n, f.err)
		case i != 1 && (f.err != nil || f.n != 1):
			t.Errorf("run %d: %d, %v; want 1", i, f.n, f.err)
		}
	}
	if p, r, f := trips.pipelines.Load(), trips.piped.Load(), trips.finishes.Load(); p != 2 || r != 2 || f != 4 {
		t.Errorf("%d script runs of %d finishes in %d pipelines, want one of the 2 live finishes, and again after NOSCRIPT", r, f, p)
	}
	mustClaim(t, s, claims[0].Key, fpA, Replay)
	mustClaim(t, s, claims[1].Key, fpA, InProgress)
	mustClaim(t, s, claims[2].Key, fpA, Replay)
}

// completion returns the finish run that completes claim c of s with body.
func completion(s *Redis, c Claim, body string) *finishCall {
	f := &finishCall{ctx: context.Background(), deadline: time.Now().Add(time.Minute), keys: c.keys, id: c.id, state: "d",
		rec: recordArg{appendRecord(nil, &Record{Status: 201, Body: []byte(body)})}, slot: c.slot}
	f.argv = [...]any{&f.id, &f.state, s.retentionArg, &f.rec, &f.slot, &f.charge, &f.grow}
	return f
}

// TestRedisFinishAllFailsAlone: the finishes of one script run fail alone.
// A claim whose key holds what no claim holds (WRONGTYPE) and one already
// completed (0) are answered so, and the others are recorded. A batch
// whose layout does not add up is refused whole, nothing written.
func TestRedisFinishAllFailsAlone(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv.Addr)
	o := testOptions(newClock())
	o.KeyPrefix = uniquePrefix()
	s := NewRedis(client, o)
	var batch []*finishCall
	claims := make([]Claim, 4)
	for i := range claims {
		claims[i] = mustClaim(t, s, k("w"+strconv.Itoa(i)), fpA, Claimed)
		batch = append(batch, completion(s, claims[i], strconv.Itoa(i)))
	}
	if err := s.Complete(context.Background(), claims[2], Record{Status: 201, Body: []byte("2")}); err != nil {
		t.Fatal(err)
	}
	if err := client.Del(context.Background(), claims[1].keys[0]).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.HSet(context.Background(), claims[1].keys[0], "x", "y").Err(); err != nil {
		t.Fatal(err)
	}
	s.finishTrip(client, batch)
	for i, f := range batch {
		switch i {
		case 1:
			if f.err == nil || !strings.Contains(f.err.Error(), "WRONGTYPE") {
				t.Errorf("finish of a key holding a hash: %d, %v; want its WRONGTYPE error", f.n, f.err)
			}
		case 2:
			if f.err != nil || f.n != 0 {
				t.Errorf("finish of a claim completed before: %d, %v; want 0", f.n, f.err)
			}
		default:
			if f.err != nil || f.n != 1 {
				t.Errorf("finish %d: %d, %v; want 1", i, f.n, f.err)
			}
			if r := mustClaim(t, s, claims[i].Key, fpA, Replay); string(r.Record.Body) != strconv.Itoa(i) {
				t.Errorf("%s replays %s", claims[i].Key, r.Record.Body)
			}
		}
	}

	c := mustClaim(t, s, k("layout"), fpA, Claimed)
	f := completion(s, c, "x")
	for _, tc := range []struct {
		name string
		keys []string
		args []any
	}{
		{"keys short of the count", c.keys[:1], append([]any{len(c.keys)}, f.argv[:]...)},
		{"a count that is not a number", c.keys, append([]any{"two"}, f.argv[:]...)},
		{"arguments short of a run", c.keys, append([]any{len(c.keys)}, f.argv[:6]...)},
	} {
		if err := s.finishAll.Eval(context.Background(), client, tc.keys, tc.args...).Err(); err == nil || !strings.Contains(err.Error(), "malformed finish batch") {
			t.Errorf("%s: %v, want the batch refused", tc.name, err)
		}
	}
	mustClaim(t, s, c.Key, fpA, InProgress) // nothing was written
}

// TestRedisFinishAllCluster: in a Cluster the finishes of a round trip go
// in one script run per hash slot (an account's keys share one), each
// answered and recorded.
func TestRedisFinishAllCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	client := cl.Client(t)
	o := testOptions(newClock())
	o.KeyPrefix = uniquePrefix()
	s := NewRedis(client, o)
	var batch []*finishCall
	var claims []Claim
	for i := range 8 {
		c := mustClaim(t, s, Key{"acct" + strconv.Itoa(i%4), "c" + strconv.Itoa(i)}, fpA, Claimed)
		claims = append(claims, c)
		batch = append(batch, completion(s, c, strconv.Itoa(i)))
	}
	var trips tripCount
	client.AddHook(&trips)
	s.finishTrip(client, batch)
	for i, f := range batch {
		if f.err != nil || f.n != 1 {
			t.Errorf("finish %d: %d, %v; want 1", i, f.n, f.err)
		}
		if r := mustClaim(t, s, claims[i].Key, fpA, Replay); string(r.Record.Body) != strconv.Itoa(i) {
			t.Errorf("%s replays %s", claims[i].Key, r.Record.Body)
		}
	}
	// The first pipeline: one script run per account (the second, if
	// any, sends them again with the script after NOSCRIPT).
	if r, f := trips.piped.Load(), trips.finishes.Load(); (r != 4 && r != 8) || f != 2*r {
		t.Errorf("%d script runs carried %d finishes, want 4 runs of 2 (per pipeline)", r, f)
	}
}

// TestRedisFinishesFailing: finish runs queued or in flight when Redis
// stops answering each report an error once their deadline passes (none
// waits for another's), and leave their claim in flight: a retry is held
// (InProgress) or, for a run Redis carried out after all, replayed, never
// claimed again. Runs queued when Redis is gone fail too, and the store
// works again once Redis is back.
func TestRedisFinishesFailing(t *testing.T) {
	srv := redistest.Start(t)
	o := testOptions(newClock())
	o.KeyPrefix, o.Timeout = uniquePrefix(), 300*time.Millisecond
	s := NewRedis(newClient(t, srv.Addr), o)
	const n = 12
	complete := func(_ int, c Claim) error {
		return s.Complete(context.Background(), c, Record{Status: 201, Body: []byte(`{}`)})
	}
	claims, errs := queuedFinishes(t, s, srv, "held", n, complete)
	for range n {
		if err := <-errs; err == nil || errors.Is(err, ErrClaimLost) {
			t.Errorf("Complete on a frozen Redis = %v, want a store error", err)
		}
	}
	srv.Thaw()
	retry := NewRedis(newClient(t, srv.Addr), withTimeout(o, 30*time.Second))
	for _, c := range claims {
		if r, err := retry.Claim(context.Background(), c.Key, fpA); err != nil || (r.Outcome != InProgress && r.Outcome != Replay) {
			t.Errorf("retry of %s after its record failed = %s, %v; want in progress (or the record Redis made after all)", c.Key, r.Outcome, err)
		}
	}

	// Redis gone while runs wait: they fail, and the lane empties.
	_, errs = queuedFinishes(t, s, srv, "gone", n, complete)
	srv.Stop()
	srv.Thaw()
	for range n {
		if err := <-errs; err == nil {
			t.Error("Complete with Redis gone succeeded")
		}
	}
	srv.Restart()
	s = NewRedis(newClient(t, srv.Addr), withTimeout(o, 30*time.Second))
	c := mustClaim(t, s, k("after"), fpA, Claimed)
	if err := s.Complete(context.Background(), c, Record{Status: 201}); err != nil {
		t.Errorf("Complete with Redis back: %v", err)
	}
}

func withTimeout(o Options, d time.Duration) Options { o.Timeout = d; return o }

// TestRedisFinishRacesRetries: a retry of an identifier whose response is
// being recorded, in a round trip shared with other orders', is held
// (InProgress) or replays that very response, never claimed again; on a
// standalone Redis and in a Cluster, whose pipelines go to each run's
// master.
func TestRedisFinishRacesRetries(t *testing.T) {
	srv := redistest.Start(t)
	cl := redistest.StartCluster(t, 3)
	for _, tc := range []struct {
		name   string
		client func() redis.Scripter
	}{
		{"standalone", func() redis.Scripter { return newClient(t, srv.Addr) }},
		{"cluster", func() redis.Scripter { return cl.Client(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(newClock())
			o.KeyPrefix, o.Timeout = uniquePrefix(), 30*time.Second
			raceFinishes(t, NewRedis(tc.client(), o), NewRedis(tc.client(), o))
		})
	}
}

// raceFinishes completes claims of many accounts on s while retrying each
// on retries.
func raceFinishes(t *testing.T, s, retries *Redis) {
	const n = 64
	claims := make([]Claim, n)
	for i := range claims {
		claims[i] = mustClaim(t, s, Key{"acct" + strconv.Itoa(i%8), "r" + strconv.Itoa(i)}, fpA, Claimed)
	}
	var wg sync.WaitGroup
	for i, c := range claims {
		body := `{"id":` + strconv.Itoa(i) + `}`
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := s.Complete(context.Background(), c, Record{Status: 201, Body: []byte(body)}); err != nil {
				t.Errorf("Complete(%s): %v", c.Key, err)
			}
		}()
		go func() {
			defer wg.Done()
			r, err := retries.Claim(context.Background(), c.Key, fpA)
			switch {
			case err != nil:
				t.Errorf("retry of %s: %v", c.Key, err)
			case r.Outcome == Replay && string(r.Record.Body) != body:
				t.Errorf("retry of %s replays %s, want %s", c.Key, r.Record.Body, body)
			case r.Outcome != Replay && r.Outcome != InProgress:
				t.Errorf("retry of %s = %s, want in progress or replay", c.Key, r.Outcome)
			}
		}()
	}
	wg.Wait()
	for i, c := range claims {
		if r := mustClaim(t, s, c.Key, fpA, Replay); string(r.Record.Body) != `{"id":`+strconv.Itoa(i)+`}` {
			t.Errorf("%s replays %s", c.Key, r.Record.Body)
		}
	}
}

// TestRedisFinishAllocations gates the allocations of a settling run that
// goes alone (here a Complete of a claim already completed: a whole round
// trip, answered 0): its call and arguments are pooled, its context is
// the round trip's, and go-redis's command and reply take the rest.
func TestRedisFinishAllocations(t *testing.T) {
	srv := redistest.Start(t)
	o := testOptions(newClock())
	o.KeyPrefix = uniquePrefix()
	s := NewRedis(newClient(t, srv.Addr), o)
	c := mustClaim(t, s, k("a"), fpA, Claimed)
	rec := Record{Status: 201, Body: []byte(`{}`)}
	if err := s.Complete(context.Background(), c, rec); err != nil {
		t.Fatal(err)
	}
	want := 17.0 // go-redis's command and reply, the round trip's context (a timer)
	if raceBuild {
		want += 2 // sync.Pool drops a quarter of what it is given
	}
	n := leastAllocsPerRun(100, func() {
		if err := s.Complete(context.Background(), c, rec); !errors.Is(err, ErrClaimLost) {
			t.Fatalf("Complete of a completed claim = %v, want ErrClaimLost", err)
		}
	})
	if n > want {
		t.Errorf("%v allocations per settling run, want at most %v", n, want)
	}
}

// leastAllocsPerRun is testing.AllocsPerRun's fewest of three tries: it
// counts every goroutine's allocations, and another test's client still
// dialling a Redis that test stopped, or a collection emptying the
// pools, adds to a try; a regression of the code measured shows in all
// three.
func leastAllocsPerRun(runs int, f func()) float64 {
	least := testing.AllocsPerRun(runs, f)
	for range 2 {
		least = min(least, testing.AllocsPerRun(runs, f))
	}
	return least
}
