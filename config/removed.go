package config

// removedKey is a key exgate once read and no longer does. A document or
// environment that still sets it is refused with the reason and what to
// do, rather than the bare "unknown key" a typo gets, so that an upgrade
// never silently changes what a configuration means.
type removedKey struct {
	path string // YAML path
	env  string // its EXGATE_* variable
	msg  string // why it went and what to do
}

// removedKeys lists the keys no longer read.
func removedKeys() []removedKey {
	return []removedKey{{
		path: "upstream.transport",
		env:  "EXGATE_UPSTREAM_TRANSPORT",
		msg: "removed: exgate always forwards through Go's net/http Transport " +
			"(its own HTTP/1.1 client is gone, it could hand a client a response a backend " +
			"sent unasked on a keep-alive connection); remove this key",
	}}
}

// removedKeyMsg returns the message for the removed key at path, if it is one.
func removedKeyMsg(path string) (string, bool) {
	for _, k := range removedKeys() {
		if k.path == path {
			return k.msg, true
		}
	}
	return "", false
}

// checkRemovedEnv reports every removed key still set in the environment.
func checkRemovedEnv(getenv func(string) (string, bool), col *collector) {
	for _, k := range removedKeys() {
		if _, ok := getenv(k.env); ok {
			col.add(&FieldError{Path: k.path, Env: k.env, Msg: k.msg})
		}
	}
}
