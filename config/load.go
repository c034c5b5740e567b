package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// MaxFileSize is the largest configuration document Load and Parse accept,
// in bytes.
const MaxFileSize = 1 << 20

const (
	// maxDepth bounds how deep the decoder follows the document (the
	// schema itself is far shallower; this guards merge-key cycles).
	maxDepth = 32
	// maxNodes bounds how many YAML nodes one document may make the
	// decoder visit, aliases counted every time they are used.
	maxNodes = 100000
)

// Load reads the YAML file at path over Default, applies EXGATE_*
// overrides from getenv, and validates the result. Path "" means no file:
// the defaults plus the environment. A nil getenv means an empty
// environment. Every problem is returned at once as an Errors value.
func Load(path string, getenv func(string) (string, bool)) (*Config, error) {
	if path == "" {
		return Parse("", nil, getenv)
	}
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data, getenv)
}

// ReadFile reads the configuration file at path, whatever it is (a
// regular file, a pipe such as /dev/stdin, a device), once: up to one
// byte past MaxFileSize, so that Parse can say it is too large. A problem
// is returned as Errors.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, Errors{{Msg: err.Error()}}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, Errors{{Msg: fmt.Sprintf("%s: %v", path, err)}}
	}
	return data, nil
}

// Parse is Load for a document already in memory; name (typically the
// file name) labels problems with the document as a whole. Empty data, or
// data holding only comments, means the defaults.
//
// Mappings merge into the defaults key by key; a sequence replaces the
// default list whole (so giving routes replaces the entire default route
// table, and each new list element starts from its zero value). A key
// given as null (or with nothing after it) leaves the default in place.
func Parse(name string, data []byte, getenv func(string) (string, bool)) (*Config, error) {
	c, col := parse(name, data, getenv)
	if err := col.result(); err != nil {
		return nil, err
	}
	return c, nil
}

// parse decodes data over the defaults, applies the environment and
// validates the result, collecting every problem in the collector it
// returns. The configuration is nil only when data is too large;
// otherwise it holds what could be decoded, problems and all.
func parse(name string, data []byte, getenv func(string) (string, bool)) (*Config, *collector) {
	c := Default()
	src := &sources{lines: map[string]int{}, envs: map[string]string{}}
	col := &collector{}
	if len(data) > MaxFileSize {
		col.add(&FieldError{Msg: fmt.Sprintf("%slarger than %d bytes", label(name), MaxFileSize)})
		return nil, col
	}
	if root, err := decodeDocument(name, data); err != nil {
		col.add(err)
	} else if root != nil {
		d := &decoder{name: name, col: col, src: src}
		d.value(root, reflect.ValueOf(c).Elem(), "", 0)
	}
	if getenv == nil {
		getenv = func(string) (string, bool) { return "", false }
	}
	e := &envApplier{getenv: getenv, col: col, src: src}
	e.walk(reflect.ValueOf(c).Elem(), "", "EXGATE")
	c.Tracing.applyOTelEnv(getenv, col, src)
	checkRemovedEnv(getenv, col)

	col.startChecks(src)
	c.validate(col)
	return c, col
}

// label returns "name: " or "" for messages about the whole document.
func label(name string) string {
	if name == "" {
		return ""
	}
	return name + ": "
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parserProblems are the problems yaml.v3's parser (as opposed to its
// scanner) reports; their line numbers are 0-based.
var parserProblems = map[string]bool{
	"did not find expected <stream-start>":   true,
	"did not find expected <document start>": true,
	"found undefined tag handle":             true,
	"did not find expected node content":     true,
	"did not find expected '-' indicator":    true,
	"did not find expected key":              true,
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"found duplicate %YAML directive":        true,
	"found incompatible YAML document":       true,
	"found duplicate %TAG directive":         true,
}

// isReaderProblem reports whether msg is one of yaml.v3's input decoding
// problems, which carry no position at all.
func isReaderProblem(msg string) bool {
	for _, p := range []string{"control characters", "invalid ", "incomplete ", "expected low surrogate", "unexpected low surrogate", "input error"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// decodeDocument parses data into its single document's root node, or nil
// when the document is empty. yaml.v3 has panicked on hostile input in
// the past; a panic becomes an ordinary error here.
func decodeDocument(name string, data []byte) (root *yaml.Node, fe *FieldError) {
	defer func() {
		if r := recover(); r != nil {
			root, fe = nil, &FieldError{Msg: fmt.Sprintf("%scannot parse YAML: %v", label(name), r)}
		}
	}()
	syntax := func(err error) *FieldError {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		line := 0
		if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = m[2]
			if parserProblems[msg] {
				// yaml.v3 reports parser (as opposed to scanner) problems
				// with a 0-based line (go-yaml/yaml#205).
				line++
			}
		} else if !isReaderProblem(msg) {
			line = 1 // yaml.v3 omits the line when it is the first
		}
		return &FieldError{Line: line, Msg: label(name) + "invalid YAML: " + msg}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if err == io.EOF {
			return nil, nil
		}
		return nil, syntax(err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == io.EOF:
	case err != nil:
		return nil, syntax(err)
	default:
		return nil, &FieldError{Line: extra.Line, Msg: label(name) + "more than one YAML document; a configuration is one document"}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, nil
	}
	return doc.Content[0], nil
}

// sources remembers where each value came from, so that validation
// problems can carry a line number or an environment variable name.
type sources struct {
	lines map[string]int    // YAML path -> line of its key or item
	envs  map[string]string // YAML path -> EXGATE_* variable that set it
}

// annotate gives a problem found after decoding the line or variable of
// its path, or of the nearest enclosing path that has one.
func (s *sources) annotate(fe *FieldError) {
	if fe.Line > 0 || fe.Env != "" || fe.Path == "" {
		return
	}
	for p := fe.Path; p != ""; p = parentPath(p) {
		if v, ok := s.envs[p]; ok {
			fe.Env = v
			return
		}
		if l, ok := s.lines[p]; ok {
			fe.Line = l
			return
		}
	}
}

// decoder walks a yaml.Node tree alongside the Config it decodes into.
type decoder struct {
	name      string // labels problems with the document's root
	col       *collector
	src       *sources
	nodes     int
	exhausted bool
	merging   map[*yaml.Node]bool // mappings whose merge keys are being resolved
}

// addf records a problem at path; problems at the root name the document.
func (d *decoder) addf(path string, line int, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if path == "" {
		msg = label(d.name) + msg
	}
	d.col.add(&FieldError{Path: path, Line: line, Msg: msg})
}

// visit counts one node against the budget and resolves aliases.
func (d *decoder) visit(n *yaml.Node, path string, depth int) (*yaml.Node, bool) {
	if d.exhausted {
		return nil, false
	}
	for hops := 0; n != nil && n.Kind == yaml.AliasNode; hops++ {
		if hops > maxDepth {
			n = nil
			break
		}
		n = n.Alias
	}
	d.nodes++
	if n == nil || d.nodes > maxNodes || depth > maxDepth {
		d.exhausted = true
		line := 0
		if n != nil {
			line = n.Line
		}
		d.addf(path, line, "document too large, too deeply nested or too heavily aliased")
		return nil, false
	}
	return n, true
}

// value decodes node n into v, whose YAML path is path.
func (d *decoder) value(n *yaml.Node, v reflect.Value, path string, depth int) {
	n, ok := d.visit(n, path, depth)
	if !ok || isNull(n) {
		return
	}
	t := v.Type()
	switch {
	case isScalar(t):
		if n.Kind != yaml.ScalarNode {
			d.addf(path, n.Line, "want %s, got %s", want(t), got(n))
			return
		}
		if err := setYAMLScalar(v, n); err != nil {
			d.addf(path, n.Line, "%s", err.Error())
		}
	case t.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			d.addf(path, n.Line, "want %s, got %s", want(t), got(n))
			return
		}
		known := keysOf(t)
		for _, p := range d.pairs(n, path, depth) {
			kp := joinKey(path, p.key.Value)
			f, ok := fieldByKey(v, p.key.Value)
			if !ok {
				if msg, removed := removedKeyMsg(kp); removed {
					d.addf(kp, p.key.Line, "%s", msg)
					continue
				}
				d.addf(kp, p.key.Line, "unknown key %q%s", p.key.Value, didYouMean(p.key.Value, known))
				continue
			}
			d.src.lines[kp] = p.key.Line
			d.value(p.val, f, kp, depth+1)
		}
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
		if v.IsNil() {
			v.Set(newBlock(t.Elem()))
		}
		d.value(n, v.Elem(), path, depth)
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.addf(path, n.Line, "want %s, got %s", want(t), got(n))
			return
		}
		var s reflect.Value
		if len(n.Content) > 0 {
			s = reflect.MakeSlice(t, len(n.Content), len(n.Content))
		} else {
			s = reflect.Zero(t) // empty lists are nil, so that round trips compare equal
		}
		for i, item := range n.Content {
			ip := joinIndex(path, i)
			d.src.lines[ip] = item.Line
			d.value(item, s.Index(i), ip, depth+1)
		}
		v.Set(s)
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
		if n.Kind != yaml.MappingNode {
			d.addf(path, n.Line, "want %s, got %s", want(t), got(n))
			return
		}
		for _, p := range d.pairs(n, path, depth) {
			kp := joinKey(path, p.key.Value)
			d.src.lines[kp] = p.key.Line
			if val, ok := d.visit(p.val, kp, depth+1); !ok || isNull(val) {
				continue // null leaves the map as it is
			}
			if v.IsNil() {
				v.Set(reflect.MakeMap(t))
			}
			k := reflect.ValueOf(p.key.Value).Convert(t.Key())
			elem := reflect.New(t.Elem()).Elem()
			if cur := v.MapIndex(k); cur.IsValid() {
				elem.Set(cur)
			} else if def, ok := elem.Addr().Interface().(defaulted); ok {
				def.fillDefaults() // a new entry starts from its defaults, as the document does
			}
			d.value(p.val, elem, kp, depth+1)
			v.SetMapIndex(k, elem)
		}
	default:
		d.addf(path, n.Line, "internal error: cannot decode into %s", t)
	}
}

// newBlock returns a new value of t, an optional block's type (a field
// that is a pointer), from its defaults when it has some.
func newBlock(t reflect.Type) reflect.Value {
	nv := reflect.New(t)
	if def, ok := nv.Interface().(defaulted); ok {
		def.fillDefaults()
	}
	return nv
}

// defaulted is a map entry or optional block type with defaults of its
// own (a service's health check and outlier ejection, its tls block): a
// new one starts from them.
type defaulted interface{ fillDefaults() }

// pair is one key/value entry of a mapping.
type pair struct{ key, val *yaml.Node }

// pairs lists the entries of mapping n with merge keys ("<<") resolved:
// explicit keys win over merged ones, and earlier merged mappings win over
// later ones. Duplicate explicit keys are problems.
func (d *decoder) pairs(n *yaml.Node, path string, depth int) []pair {
	if d.merging[n] {
		d.addf(path, n.Line, "merge key \"<<\" merges a mapping into itself")
		return nil
	}
	if d.merging == nil {
		d.merging = map[*yaml.Node]bool{}
	}
	d.merging[n] = true
	defer delete(d.merging, n)
	var out []pair
	seen := map[string]int{}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, ok := d.visit(n.Content[i], path, depth+1)
		if !ok {
			return out
		}
		if k.Kind != yaml.ScalarNode {
			d.addf(path, k.Line, "mapping keys must be plain strings, got %s", got(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			merges = append(merges, n.Content[i+1])
			continue
		}
		if line, dup := seen[k.Value]; dup {
			d.addf(joinKey(path, k.Value), k.Line, "key %q given twice (first on line %d)", k.Value, line)
			continue
		}
		seen[k.Value] = k.Line
		out = append(out, pair{k, n.Content[i+1]})
	}
	for _, m := range merges {
		m, ok := d.visit(m, path, depth+1)
		if !ok {
			return out
		}
		var srcs []*yaml.Node
		switch m.Kind {
		case yaml.MappingNode:
			srcs = []*yaml.Node{m}
		case yaml.SequenceNode:
			srcs = m.Content
		default:
			d.addf(path, m.Line, "merge key \"<<\" wants a mapping or a sequence of mappings, got %s", got(m))
			continue
		}
		for _, s := range srcs {
			s, ok := d.visit(s, path, depth+1)
			if !ok {
				return out
			}
			if s.Kind != yaml.MappingNode {
				d.addf(path, s.Line, "merge key \"<<\" wants a mapping or a sequence of mappings, got %s", got(s))
				continue
			}
			for _, p := range d.pairs(s, path, depth+1) {
				if _, dup := seen[p.key.Value]; !dup {
					seen[p.key.Value] = p.key.Line
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// isNull reports whether n is a null scalar (~, null, or nothing).
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// setYAMLScalar decodes scalar node n into v. Strings, durations and
// text types take the scalar's text whatever its YAML type; integers and
// booleans must be YAML integers and booleans.
func setYAMLScalar(v reflect.Value, n *yaml.Node) error {
	t := v.Type()
	switch {
	case isText(t), t == durationType, t.Kind() == reflect.String:
		return parseText(v, n.Value)
	case t.Kind() == reflect.Bool:
		if n.ShortTag() != "!!bool" {
			return fmt.Errorf("want a boolean (true or false), got %s", got(n))
		}
		return parseText(v, n.Value)
	default: // integers
		if n.ShortTag() != "!!int" {
			if n.ShortTag() == "!!float" && strings.Trim(n.Value, "+-0123456789_") == "" {
				return fmt.Errorf("integer %s is out of range", n.Value)
			}
			return fmt.Errorf("want an integer, got %s", got(n))
		}
		var i int64
		if err := decodeNode(n, &i); err != nil {
			return fmt.Errorf("integer %s is out of range", n.Value)
		}
		if v.OverflowInt(i) {
			return fmt.Errorf("integer %d is out of range", i)
		}
		v.SetInt(i)
		return nil
	}
}

// decodeNode is n.Decode with yaml.v3 panics turned into errors.
func decodeNode(n *yaml.Node, out any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return n.Decode(out)
}

// parseText sets scalar v from its text form; it is also how environment
// variables are read. Integers are decimal; booleans are anything
// strconv.ParseBool accepts; durations are time.ParseDuration's form and
// may not be negative.
func parseText(v reflect.Value, s string) error {
	t := v.Type()
	switch {
	case isText(t):
		p := reflect.New(t)
		if err := p.Interface().(interface{ UnmarshalText([]byte) error }).UnmarshalText([]byte(s)); err != nil {
			return err
		}
		v.Set(p.Elem())
	case t == durationType:
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("want a duration such as 10s, 250ms or 1m30s, got %q", s)
		}
		if d < 0 {
			return fmt.Errorf("duration %s must not be negative", d)
		}
		v.SetInt(int64(d))
	case t.Kind() == reflect.String:
		v.SetString(s)
	case t.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("want a boolean (true or false), got %q", s)
		}
		v.SetBool(b)
	default: // integers
		i, err := strconv.ParseInt(strings.TrimSpace(s), 10, t.Bits())
		if err != nil {
			if errors.Is(err, strconv.ErrRange) {
				return fmt.Errorf("integer %s is out of range", strings.TrimSpace(s))
			}
			return fmt.Errorf("want an integer, got %q", s)
		}
		v.SetInt(i)
	}
	return nil
}

// want describes what a value of type t is written as.
func want(t reflect.Type) string {
	switch t {
	case reflect.TypeFor[Rate]():
		return "a rate (N/period)"
	case reflect.TypeFor[Match]():
		return "a route match"
	case reflect.TypeFor[ByteSize]():
		return "a size"
	case reflect.TypeFor[URL]():
		return "a URL"
	case reflect.TypeFor[Prefix]():
		return "an IP address or CIDR prefix"
	case durationType:
		return "a duration"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.Struct, reflect.Map:
		return "a mapping"
	case reflect.Slice:
		return "a sequence"
	}
	if isScalar(t) {
		return "an integer"
	}
	return t.String()
}

// got describes node n for a type mismatch.
func got(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a sequence"
	case yaml.DocumentNode:
		return "a document"
	case yaml.AliasNode:
		return "an alias"
	}
	v := n.Value
	if len(v) > 40 {
		v = v[:40] + "..."
	}
	switch n.ShortTag() {
	case "!!null":
		return "null"
	case "!!str":
		return "the string " + strconv.Quote(v)
	case "!!int":
		return "the integer " + v
	case "!!float":
		return "the number " + v
	case "!!bool":
		return "the boolean " + v
	}
	return strconv.Quote(v)
}
