package config

import (
	"encoding"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// YAML paths, as problems name them, and the reflection helpers shared by
// the YAML decoder, the environment overrides and Marshal, so that all
// three see the same schema.

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
