package mcpconfig

import (
	"fmt"
	"regexp"
	"strings"
)

var varNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// expand replaces ${VAR} and ${VAR:-default} in s using lookup. ${VAR:-default} uses the
// default when VAR is unset or empty, as in POSIX shells; ${env:VAR} (VS Code) and
// ${env://VAR} (mcphost) are accepted as spellings of ${VAR}; $${ is a literal "${".
// Errors name the variable but never contain an expanded value.
func expand(s string, lookup func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		if i > 0 && s[i-1] == '$' { // $${ → literal ${
			b.WriteString(s[:i-1])
			b.WriteString("${")
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		j := strings.IndexByte(s[i+2:], '}')
		if j < 0 {
			return "", fmt.Errorf(`unterminated "${" (write $${ for a literal "${")`)
		}
		ref := s[i+2 : i+2+j]
		s = s[i+2+j+1:]
		v, err := resolve(ref, lookup)
		if err != nil {
			return "", err
		}
		b.WriteString(v)
	}
}

func resolve(ref string, lookup func(string) (string, bool)) (string, error) {
	if strings.HasPrefix(ref, "input:") {
		return "", fmt.Errorf("${%s}: VS Code input prompts are not supported; use an environment variable, ${VAR}", ref)
	}
	name := strings.TrimPrefix(strings.TrimPrefix(ref, "env://"), "env:")
	name, def, hasDef := strings.Cut(name, ":-")
	if !varNamePattern.MatchString(name) {
		return "", fmt.Errorf("invalid variable reference %q; want ${NAME} or ${NAME:-default}", "${"+ref+"}")
	}
	if strings.Contains(def, "${") {
		return "", fmt.Errorf("${%s}: nested variable references are not supported", name)
	}
	if v, ok := lookup(name); ok && (v != "" || !hasDef) {
		return v, nil
	}
	if hasDef {
		return def, nil
	}
	return "", fmt.Errorf("environment variable %q is not set (write ${%s:-default} to give a default)", name, name)
}
