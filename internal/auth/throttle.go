package auth

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxTracked bounds the client addresses the failure throttle remembers. Past it, addresses
// it has not seen share one bucket, so many addresses cannot spend more than one address could.
const maxTracked = 10_000

// throttle counts failed authentication attempts per client address: each address may fail
// burst times at once and then once per interval. An address over its budget is refused before
// its token is looked at, so guessing goes no faster than the budget.
type throttle struct {
	burst    int
	interval time.Duration

	mu        sync.Mutex
	byAddr    map[string]*rate.Limiter
	overflow  *rate.Limiter
	lastSweep time.Time
}

// newThrottle allows perMinute failures at once and perMinute a minute after that; nil (no
// throttle) when perMinute is 0.
func newThrottle(perMinute int) *throttle {
	if perMinute <= 0 {
		return nil
	}
	t := &throttle{burst: perMinute, interval: time.Minute / time.Duration(perMinute), byAddr: map[string]*rate.Limiter{}}
	t.overflow = t.limiter()
	return t
}

func (t *throttle) limiter() *rate.Limiter { return rate.NewLimiter(rate.Every(t.interval), t.burst) }

// wait is how long addr must wait before its next attempt; 0 when it may try now.
func (t *throttle) wait(addr string, now time.Time) time.Duration {
	if t == nil || addr == "" {
		return 0
	}
	t.mu.Lock()
	l := t.byAddr[addr]
	if l == nil && len(t.byAddr) >= maxTracked {
		l = t.overflow
	}
	t.mu.Unlock()
	if l == nil {
		return 0
	}
	tokens := l.TokensAt(now)
	if tokens >= 1 {
		return 0
	}
	return time.Duration((1 - tokens) * float64(t.interval))
}

// fail spends one attempt of addr's budget.
func (t *throttle) fail(addr string, now time.Time) {
	if t == nil || addr == "" {
		return
	}
	t.mu.Lock()
	l := t.byAddr[addr]
	if l == nil {
		if len(t.byAddr) >= maxTracked {
			t.sweep(now)
		}
		if len(t.byAddr) < maxTracked {
			l = t.limiter()
			t.byAddr[addr] = l
		} else {
			l = t.overflow
		}
	}
	t.mu.Unlock()
	l.AllowN(now, 1)
}

// sweep forgets the addresses whose budget is whole again, at most once a second so that a
// flood from many addresses does not make every failure walk the whole map. t.mu is held.
func (t *throttle) sweep(now time.Time) {
	if now.Sub(t.lastSweep) < time.Second {
		return
	}
	t.lastSweep = now
	for addr, l := range t.byAddr {
		if l.TokensAt(now) >= float64(t.burst) {
			delete(t.byAddr, addr)
		}
	}
}

// clientKey is the address the throttle counts a client by: its IP, and for IPv6 its /64,
// since one host usually holds a whole /64.
func clientKey(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}
