package config

import (
	"encoding"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Reflection helpers shared by the YAML decoder, the environment
// overrides and Marshal, so that all three see the same schema.

var (
	durationType        = reflect.TypeFor[time.Duration]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	textMarshalerType   = reflect.TypeFor[encoding.TextMarshaler]()
)

// isText reports whether t is decoded from text by its own UnmarshalText.
func isText(t reflect.Type) bool {
	return reflect.PointerTo(t).Implements(textUnmarshalerType)
}

// isScalar reports whether values of t are written as one YAML scalar.
func isScalar(t reflect.Type) bool {
	if isText(t) || t == durationType {
		return true
	}
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return true
	}
	return false
}

// yamlName returns the YAML key of a struct field, or "" when the field is
// not part of the schema.
func yamlName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" {
		return ""
	}
	return name
}

// fieldByKey returns the field of struct value v whose YAML key is key.
func fieldByKey(v reflect.Value, key string) (reflect.Value, bool) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		if yamlName(t.Field(i)) == key {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// keysOf lists the YAML keys of struct type t in declaration order.
func keysOf(t reflect.Type) []string {
	var ks []string
	for i := 0; i < t.NumField(); i++ {
		if k := yamlName(t.Field(i)); k != "" {
			ks = append(ks, k)
		}
	}
	return ks
}

// path is the YAML path of a value, as problems name it: "server.tls",
// "routes[2].limits[0].rate", `tiers.vip["a.b"]`. Checks build the paths
// of their keys from their section's path.
type path string

// key returns the path of the mapping key k below p.
func (p path) key(k string) path { return path(joinKey(string(p), k)) }

// index returns the path of element i of the sequence at p.
func (p path) index(i int) path { return path(joinIndex(string(p), i)) }

// joinKey appends a mapping key to a YAML path: "a.b" for plain keys,
// `a["x.y"]` for keys that are not made of letters, digits, "_" and "-".
func joinKey(path, key string) string {
	plain := key != ""
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			plain = false
			break
		}
	}
	if !plain {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// joinIndex appends a sequence index to a YAML path.
func joinIndex(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// parentPath strips the last element of a YAML path built by joinKey and
// joinIndex; the parent of a top-level key is "".
func parentPath(p string) string {
	if strings.HasSuffix(p, `"]`) {
		if i := strings.LastIndex(p, `["`); i >= 0 {
			return p[:i]
		}
	}
	if strings.HasSuffix(p, "]") {
		if i := strings.LastIndex(p, "["); i >= 0 {
			return p[:i]
		}
	}
	if i := strings.LastIndex(p, "."); i >= 0 {
		return p[:i]
	}
	return ""
}

// within reports whether path p is q or lies below q.
func within(p, q string) bool {
	if !strings.HasPrefix(p, q) {
		return false
	}
	if len(p) == len(q) || q == "" {
		return true
	}
	return p[len(q)] == '.' || p[len(q)] == '['
}

// envSegment turns one path element into its part of an EXGATE_ variable
// name: upper case, with anything but letters and digits as "_".
func envSegment(s string) string {
	b := []byte(strings.ToUpper(s))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b)
}

// isName reports whether s matches [a-z0-9_]+ (route and tier names).
func isName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// isEnvName reports whether s matches [A-Z_][A-Z0-9_]*.
func isEnvName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// suggest returns the candidate closest to s when it is close enough to be
// a likely typo, or "".
func suggest(s string, candidates []string) string {
	best, bestD := "", 3
	ls := strings.ToLower(s)
	for _, c := range candidates {
		d := editDistance(ls, strings.ToLower(c))
		if d < bestD && d <= max(1, len(c)/3) {
			best, bestD = c, d
		}
	}
	return best
}

// didYouMean formats a suggestion as a message suffix, or "".
func didYouMean(s string, candidates []string) string {
	if c := suggest(s, candidates); c != "" {
		return "; did you mean " + strconv.Quote(c) + "?"
	}
	return ""
}

// editDistance is the optimal-string-alignment distance between a and b
// (insertions, deletions, substitutions and swaps of neighbours), in bytes.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 30 // not a typo; keep the cost bounded
	}
	// rows[i][j] is the distance between a[:i] and b[:j]; three rows suffice.
	pp := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], pp[j-2]+1)
			}
		}
		pp, prev, cur = prev, cur, pp
	}
	return prev[len(b)]
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
