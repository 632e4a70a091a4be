package secret

import "testing"

func TestRead(t *testing.T) {
	var a, b string
	b = "left over"
	env := map[string]string{"A": "secret-a"}
	Read([]Var{{Env: "A", Value: &a}, {Env: "B", Value: &b}}, func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	})
	if a != "secret-a" || b != "" {
		t.Errorf("a, b = %q, %q; want %q and empty", a, b, "secret-a")
	}
}
