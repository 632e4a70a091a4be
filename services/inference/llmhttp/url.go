package llmhttp

import (
	"fmt"
	"net/url"
)

// ParseBaseURL checks a backend's base URL: absolute http or https with a host. Errors start
// with owner and never quote credentials.
func ParseBaseURL(owner, raw string) (*url.URL, error) {
	if raw == "" {
		return nil, fmt.Errorf("%s: URL: required", owner)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: URL: not a valid URL", owner) // url errors quote user:password
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%s: URL: scheme %q is not http or https", owner, u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%s: URL: %q has no host", owner, u.Redacted())
	}
	return u, nil
}
