package config

// Log configures logging.
type Log struct {
	// Level is debug, info, warn or error. Default "info".
	Level string `yaml:"level"`
	// Access enables the one-line-per-request access log. Default true.
	Access bool `yaml:"access"`
	// Sampling thins out repeated log lines.
	Sampling Sampling `yaml:"sampling"`
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
// access log, unsampled.
func DefaultLog() Log { return Log{Level: "info", Access: true} }

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
}
