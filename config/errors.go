package config

import (
	"fmt"
	"strings"
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
// YAML decoding first, then environment overrides, then validation. Load,
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

// collector accumulates problems up to maxErrors.
type collector struct {
	errs    Errors
	dropped int
}

// add records a problem, or counts it once maxErrors are recorded.
func (c *collector) add(e *FieldError) {
	if len(c.errs) >= maxErrors {
		c.dropped++
		return
	}
	c.errs = append(c.errs, e)
}

// addf records a formatted problem.
func (c *collector) addf(path string, line int, format string, args ...any) {
	c.add(&FieldError{Path: path, Line: line, Msg: fmt.Sprintf(format, args...)})
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
