package seenset

// UseScriptsOnly makes r run every transition as a script, as it does
// once a Redis older than 7.0 refused SET … NX … GET; the machine's Redis
// is newer, so this is how the tests reach that path.
func UseScriptsOnly(r *Redis) { r.scriptsOnly.Store(true) }

// PrefixOf is the store's key prefix, so tests can find its keys.
func PrefixOf(r *Redis) string { return r.prefix }
