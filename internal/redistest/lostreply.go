package redistest

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// LostReply is a go-redis hook (redis.Client.AddHook) that, once armed,
// lets the next script run (EVALSHA or EVAL) or pipeline reach Redis and
// run there, and then answers its caller Err instead of Redis's reply: a
// reply that did not come back in time, or a connection cut after the
// command was sent. The zero LostReply is disarmed and answers
// context.DeadlineExceeded once armed. With Unsent, the armed run or
// pipeline never reaches Redis: a request lost on its way (Redis down, a
// connection that could not be written to).
type LostReply struct {
	// Err is the error the lost reply is answered with; nil means
	// context.DeadlineExceeded.
	Err error
	// Unsent keeps the armed run from Redis: it never runs.
	Unsent bool
	armed  atomic.Bool
}

// Arm makes the next script run or pipeline lose its reply.
func (h *LostReply) Arm() { h.armed.Store(true) }

func (h *LostReply) err() error {
	if h.Err == nil {
		return context.DeadlineExceeded
	}
	return h.Err
}

// DialHook implements redis.Hook.
func (h *LostReply) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h *LostReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := cmd.Name()
		script := name == "evalsha" || name == "eval"
		if script && h.Unsent && h.armed.CompareAndSwap(true, false) {
			cmd.SetErr(h.err())
			return h.err()
		}
		err := next(ctx, cmd)
		if script && !h.Unsent && h.armed.CompareAndSwap(true, false) {
			cmd.SetErr(h.err())
			return h.err()
		}
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h *LostReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.Unsent && h.armed.CompareAndSwap(true, false) {
			for _, c := range cmds {
				c.SetErr(h.err())
			}
			return h.err()
		}
		err := next(ctx, cmds)
		if !h.Unsent && h.armed.CompareAndSwap(true, false) {
			for _, c := range cmds {
				c.SetErr(h.err())
			}
			return h.err()
		}
		return err
	}
}
