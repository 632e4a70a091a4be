// Package secret declares the values a deployment provides in the environment, never as flags
// (flags show in ps, in shell history and in the config file): each component lists its own
// next to the config field that holds it, and the app reads them all in one place.
package secret

// Var is one secret: the environment variable it comes from and the config field it fills.
type Var struct {
	// Env is the variable's name, e.g. TOOLMESH_API_TOKENS.
	Env string
	// Value is the config field the variable fills.
	Value *string
	// Usage says what it is, for the configuration reference.
	Usage string
}

// Read fills every var from lookup (os.LookupEnv in production); an unset variable leaves its
// field empty.
func Read(vars []Var, lookup func(string) (string, bool)) {
	for _, v := range vars {
		val, _ := lookup(v.Env)
		*v.Value = val
	}
}
