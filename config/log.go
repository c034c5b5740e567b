package config

import "time"

// Log configures logging.
type Log struct {
	// Level is debug, info, warn or error. Default "info".
	Level string `yaml:"level"`
	// Access enables the one-line-per-request access log. Default true.
	Access bool `yaml:"access"`
	// Sampling thins out repeated log lines.
	Sampling Sampling `yaml:"sampling"`
	// RefusalsPerClient is each client's share of the access log's lines
	// of refusals exgate answers itself before a request reaches the
	// backend (docs/pools.md): past it, the client's such lines are
	// counted, not written, and summed up in one line per client every
	// ten seconds. Default 20/1s, burst 200.
	RefusalsPerClient RefusalShare `yaml:"refusals_per_client"`
}

// RefusalShare is a client's share of refusal lines: Rate per period,
// Burst at once, per client (an account, else an address).
type RefusalShare struct {
	// Rate is how many refusal lines a client may write per period; ""
	// turns the share off (every line written). Default 20/1s.
	Rate Rate `yaml:"rate"`
	// Burst is how many may come at once; 0 means Rate's N. Default 200.
	Burst int `yaml:"burst"`
}

// Sampling keeps, of the lines with the same level and message in each
// second, the first Initial and then every Thereafter-th. Access log
// lines all share one message, so this bounds their rate.
type Sampling struct {
	// Initial is how many lines per second are always kept; 0 turns
	// sampling off. Default 0.
	Initial int `yaml:"initial"`
	// Thereafter keeps every Thereafter-th line past Initial; 0 drops them
	// all. Default 0.
	Thereafter int `yaml:"thereafter"`
}

// DefaultLog returns the logging defaults: info and above, with the
// access log, unsampled, each client's refusal lines shared at 20 a
// second, 200 at once.
func DefaultLog() Log {
	return Log{Level: "info", Access: true,
		RefusalsPerClient: RefusalShare{Rate: Rate{N: 20, Period: time.Second}, Burst: 200}}
}

// check reports problems in the log section at p.
func (l *Log) check(col *collector, p path) {
	col.oneOf(p.key("level"), l.Level, "debug", "info", "warn", "error")
	sp := p.key("sampling")
	if l.Sampling.Initial < 0 {
		col.addf(sp.key("initial"), "must not be negative (0 turns sampling off), got %d", l.Sampling.Initial)
	}
	if l.Sampling.Thereafter < 0 {
		col.addf(sp.key("thereafter"), "must not be negative, got %d", l.Sampling.Thereafter)
	}
	rp := p.key("refusals_per_client")
	if rs := l.RefusalsPerClient; !rs.Rate.IsZero() {
		checkRate(col, rp.key("rate"), rs.Rate)
		if rs.Burst < 0 {
			col.addf(rp.key("burst"), "must not be negative (0: the rate's N), got %d", rs.Burst)
		}
	}
}
