package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// FieldError is one configuration problem. Path is the YAML path of the
// offending key ("routes[1].match", "tiers.vip.place_order.rate"), or ""
// for a problem with the document as a whole (then Msg names the file).
// Line is the 1-based line in the YAML file, or 0 when the value did not
// come from the file. Env is the environment variable the value came from,
// or "" when it did not come from the environment.
type FieldError struct {
	// Path is the YAML path of the offending key; "" for the document.
	Path string
	// Line is the line in the YAML file; 0 when unknown or not from the file.
	Line int
	// Msg says what is wrong.
	Msg string
	// Env is the EXGATE_* variable that supplied the value; "" for none.
	Env string
}

// Error returns "path: msg", "path: msg (line N)" for values from the file,
// or "EXGATE_VAR (path): msg" for values from the environment.
func (e *FieldError) Error() string {
	var b strings.Builder
	switch {
	case e.Env != "" && e.Path != "":
		b.WriteString(e.Env + " (" + e.Path + "): ")
	case e.Env != "":
		b.WriteString(e.Env + ": ")
	case e.Path != "":
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	if e.Line > 0 {
		fmt.Fprintf(&b, " (line %d)", e.Line)
	}
	return b.String()
}

// Errors is every problem found in one configuration, in the order found:
// YAML decoding first, then environment overrides, then each section's
// checks, section by section, then the checks between sections. Load,
// Parse and Validate return an Errors value (never empty) or nil.
type Errors []*FieldError

// Error returns one problem per line.
func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Unwrap returns the problems as separate errors, so that errors.As can
// find a single *FieldError.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// maxErrors bounds how many problems one document reports; the rest are
// counted in a final summary line.
const maxErrors = 100

// collector accumulates the problems of one configuration, up to
// maxErrors: the decoder's, the environment's, then those of the
// sections' checks, which report through addf and its helpers. It is the
// one place problems are gathered, so that all of them are reported at
// once, each named by its YAML path.
type collector struct {
	errs    Errors
	dropped int
	// decoded holds the paths of the problems found before checking
	// began: a check's problem at or below one of them is a consequence
	// of a problem already reported, and is dropped.
	decoded []string
	// src, when set, gives each check's problem the line or the variable
	// its value came from.
	src *sources
}

// add records a problem, or counts it once maxErrors are recorded.
func (c *collector) add(e *FieldError) {
	if len(c.errs) >= maxErrors {
		c.dropped++
		return
	}
	c.errs = append(c.errs, e)
}

// startChecks marks the end of decoding: later problems within the paths
// already reported are dropped, and src (nil when there is no file or
// environment) annotates the rest.
func (c *collector) startChecks(src *sources) {
	c.src = src
	for _, fe := range c.errs {
		if fe.Path != "" {
			c.decoded = append(c.decoded, fe.Path)
		}
	}
}

// addf records a problem a check found at p.
func (c *collector) addf(p path, format string, args ...any) {
	for _, f := range c.decoded {
		if within(string(p), f) {
			return
		}
	}
	fe := &FieldError{Path: string(p), Msg: fmt.Sprintf(format, args...)}
	if c.src != nil {
		c.src.annotate(fe)
	}
	c.add(fe)
}

// positive reports a duration that is not greater than zero.
func (c *collector) positive(p path, d time.Duration) {
	if d <= 0 {
		c.addf(p, "must be greater than 0, got %s", d)
	}
}

// oneOf reports a value that is not one of the allowed ones.
func (c *collector) oneOf(p path, s string, allowed ...string) {
	if slices.Contains(allowed, s) {
		return
	}
	q := make([]string, len(allowed))
	for i, a := range allowed {
		q[i] = strconv.Quote(a)
	}
	list := strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
	c.addf(p, "want %s, got %q%s", list, s, didYouMean(s, allowed))
}

// envName reports a value that is not the name of an environment
// variable.
func (c *collector) envName(p path, s string) {
	if !isEnvName(s) {
		c.addf(p, "want an environment variable name ([A-Z_][A-Z0-9_]*), got %q", s)
	}
}

// result returns the collected problems, or nil when there are none.
func (c *collector) result() error {
	if len(c.errs) == 0 {
		return nil
	}
	es := c.errs
	if c.dropped > 0 {
		es = append(es[:len(es):len(es)], &FieldError{Msg: fmt.Sprintf("%d more problems not shown", c.dropped)})
	}
	return es
}
