package config

import (
	"reflect"
	"strings"
)

// Reload modes of a setting, from its field's reload tag: "live" settings
// take effect on a reload (SIGHUP or a watched file changing); "restart"
// settings are read once at start. A field without the tag has its
// section's mode.
const (
	ReloadLive    = "live"
	ReloadRestart = "restart"
)

// Reloaded returns the configuration in force after reloading from old
// (the one in force) to new (the one just read): new's live settings with
// old's restart-only ones. live and restart list, by YAML path, the
// settings that differ between the two: those now in force, and those
// that take effect only when the process starts again.
func Reloaded(old, new *Config) (eff *Config, live, restart []string) {
	e := *new // maps and slices are shared: a loaded Config is not modified
	eff = &e
	ch := changes{}
	merge(reflect.ValueOf(old).Elem(), reflect.ValueOf(new).Elem(), reflect.ValueOf(eff).Elem(), "", ReloadRestart, &ch)
	return eff, ch.live, ch.restart
}

// changes are the settings that differ, by reload mode.
type changes struct{ live, restart []string }

// ReloadModes returns the reload mode of every setting that a reload
// considers as one unit, by YAML path: the fields of the configuration's
// sections down to values (a route table, a tier map, a URL).
func ReloadModes() map[string]string {
	modes := map[string]string{}
	var walk func(t reflect.Type, path, mode string)
	walk = func(t reflect.Type, path, mode string) {
		if !isSection(t) {
			modes[path] = mode
			return
		}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, m := fieldMode(f, mode)
			walk(f.Type, joinPath(path, name), m)
		}
	}
	walk(reflect.TypeOf(Config{}), "", ReloadRestart)
	return modes
}

// merge writes into eff, field by field, old's value of restart-only
// settings, and records the settings that differ between old and new.
func merge(old, new, eff reflect.Value, path, mode string, ch *changes) {
	t := old.Type()
	if !isSection(t) {
		differ := !reflect.DeepEqual(old.Interface(), new.Interface())
		switch {
		case mode != ReloadLive:
			if differ {
				ch.restart = append(ch.restart, path)
			}
			eff.Set(old)
		case differ:
			ch.live = append(ch.live, path)
		}
		return
	}
	for i := 0; i < t.NumField(); i++ {
		name, m := fieldMode(t.Field(i), mode)
		merge(old.Field(i), new.Field(i), eff.Field(i), joinPath(path, name), m, ch)
	}
}

// isSection reports whether t is a configuration section, a struct with
// YAML keys of its own, as opposed to a value such as a URL or a rate.
func isSection(t reflect.Type) bool {
	if t.Kind() != reflect.Struct {
		return false
	}
	for i := 0; i < t.NumField(); i++ {
		if _, ok := t.Field(i).Tag.Lookup("yaml"); ok {
			return true
		}
	}
	return false
}

// fieldMode returns f's YAML key and reload mode, inherited when f has no
// reload tag.
func fieldMode(f reflect.StructField, inherited string) (string, string) {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if m, ok := f.Tag.Lookup("reload"); ok {
		return name, m
	}
	return name, inherited
}

// joinPath appends a key to a YAML path.
func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
