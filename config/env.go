package config

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// envApplier applies EXGATE_<PATH> overrides. The variable of a value is
// "EXGATE_" followed by its YAML path upper-cased, with "." and list
// indexes written as "_": upstream.url is EXGATE_UPSTREAM_URL,
// routes[0].timeout is EXGATE_ROUTES_0_TIMEOUT, and
// tiers.vip.place_order.rate is EXGATE_TIERS_VIP_PLACE_ORDER_RATE. Only
// values that exist after the file is read can be overridden: list
// elements by index and map entries by key; an optional block (a
// service's tls) is made by a variable under it. A list of scalars
// (limiter.redis.addrs, client_ip.trusted_proxies) is one variable holding
// a comma-separated list; the empty string means the empty list. Other
// EXGATE_* variables are ignored, since other tools may share the prefix.
type envApplier struct {
	getenv func(string) (string, bool)
	col    *collector
	src    *sources
}

// walk applies overrides to v, whose YAML path is path and whose variable
// name (or name prefix) is env.
func (e *envApplier) walk(v reflect.Value, path, env string) {
	t := v.Type()
	switch {
	case isScalar(t):
		s, ok := e.getenv(env)
		if !ok {
			return
		}
		e.set(path, env)
		if err := parseText(v, s); err != nil {
			e.col.add(&FieldError{Path: path, Env: env, Msg: err.Error()})
		}
	case t.Kind() == reflect.Slice && isScalar(t.Elem()):
		s, ok := e.getenv(env)
		if !ok {
			return
		}
		e.set(path, env)
		list := reflect.Zero(t)
		i := 0
		for item := range strings.SplitSeq(s, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue // "" is the empty list; a trailing comma is harmless
			}
			elem := reflect.New(t.Elem()).Elem()
			if err := parseText(elem, item); err != nil {
				e.col.add(&FieldError{Path: joinIndex(path, i), Env: env, Msg: err.Error()})
			}
			list = reflect.Append(list, elem)
			i++
		}
		v.Set(list)
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
		if !v.IsNil() {
			e.walk(v.Elem(), path, env)
			return
		}
		set := len(e.src.envs)
		block := newBlock(t.Elem())
		if e.walk(block.Elem(), path, env); len(e.src.envs) > set {
			v.Set(block) // a variable under it makes an optional block
			e.src.envs[path] = e.firstWithin(path)
		}
	case t.Kind() == reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			e.walk(v.Index(i), joinIndex(path, i), env+"_"+strconv.Itoa(i))
		}
	case t.Kind() == reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if k := yamlName(t.Field(i)); k != "" {
				e.walk(v.Field(i), joinKey(path, k), env+"_"+envSegment(k))
			}
		}
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		for _, k := range keys {
			elem := reflect.New(t.Elem()).Elem()
			elem.Set(v.MapIndex(k))
			e.walk(elem, joinKey(path, k.String()), env+"_"+envSegment(k.String()))
			v.SetMapIndex(k, elem)
		}
	}
}

// firstWithin returns the first by name of the variables that supplied
// values within path: a problem of an optional block the environment made
// names it.
func (e *envApplier) firstWithin(path string) string {
	first := ""
	for p, name := range e.src.envs {
		if within(p, path) && (first == "" || name < first) {
			first = name
		}
	}
	return first
}

// set records that the environment supplied path, replacing whatever
// line the file gave it (and, for lists, its elements).
func (e *envApplier) set(path, env string) {
	e.src.envs[path] = env
	for p := range e.src.lines {
		if within(p, path) {
			delete(e.src.lines, p)
		}
	}
}
