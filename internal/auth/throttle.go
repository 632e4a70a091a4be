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

// knownFor is how long after its last success from an address a token is still let through
// while that address is throttled: a working day and its night, so that a person's token used
// yesterday evening is not locked out this morning by a guesser on the same host.
const knownFor = 24 * time.Hour

// knownRefresh is how stale a known token's last-seen time may get before a success writes it
// again: most successes then only read, under a shared lock.
const knownRefresh = time.Hour

// throttle counts failed authentication attempts per client address: each address may fail
// burst times at once and then once per interval. An address over its budget is refused without
// learning whether its token is right, so guessing goes no faster than the budget; only a token
// that has authenticated from that address before (known) is let through, so that someone
// else's failures never lock out a token that was already in use there.
type throttle struct {
	burst    int
	interval time.Duration

	mu        sync.Mutex
	byAddr    map[string]*rate.Limiter
	overflow  *rate.Limiter
	lastSweep time.Time

	// known holds, per address, the tokens (by index) that authenticated from it and when
	// they last did; at most maxTracked addresses.
	knownMu        sync.RWMutex
	known          map[string][]seen
	lastKnownSweep time.Time
}

// seen is a token that authenticated from an address, and when it last did.
type seen struct {
	token int
	at    time.Time
}

// newThrottle allows perMinute failures at once and perMinute a minute after that; nil (no
// throttle) when perMinute is 0.
func newThrottle(perMinute int) *throttle {
	if perMinute <= 0 {
		return nil
	}
	t := &throttle{burst: perMinute, interval: time.Minute / time.Duration(perMinute), byAddr: map[string]*rate.Limiter{},
		known: map[string][]seen{}}
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

// succeed remembers that token authenticated from addr at now.
func (t *throttle) succeed(addr string, token int, now time.Time) {
	if t == nil || addr == "" || token < 0 {
		return
	}
	t.knownMu.RLock()
	fresh := false
	for _, s := range t.known[addr] {
		if s.token == token {
			fresh = now.Sub(s.at) < knownRefresh
			break
		}
	}
	t.knownMu.RUnlock()
	if fresh {
		return
	}
	t.knownMu.Lock()
	defer t.knownMu.Unlock()
	list, ok := t.known[addr]
	for i := range list {
		if list[i].token == token {
			list[i].at = now
			return
		}
	}
	if !ok && len(t.known) >= maxTracked {
		t.sweepKnown(now)
		if len(t.known) >= maxTracked {
			// Full of addresses in use: this one's token is not remembered, and waits like a
			// guess should its address be throttled. Evicting instead would let whoever holds
			// a token and many addresses push everyone else's out.
			return
		}
	}
	t.known[addr] = append(list, seen{token: token, at: now})
}

// knows reports whether token (-1: none) authenticated from addr within knownFor before now.
// It takes as long for a token that is not known as for no token at all, so a throttled
// address learns nothing from how long its refusal took.
func (t *throttle) knows(addr string, token int, now time.Time) bool {
	if t == nil || addr == "" {
		return false
	}
	t.knownMu.RLock()
	defer t.knownMu.RUnlock()
	found := false
	for _, s := range t.known[addr] {
		found = found || s.token == token && now.Sub(s.at) < knownFor
	}
	return found
}

// sweepKnown forgets the tokens not seen within knownFor, and the addresses left with none, at
// most once a second. t.knownMu is held.
func (t *throttle) sweepKnown(now time.Time) {
	if now.Sub(t.lastKnownSweep) < time.Second {
		return
	}
	t.lastKnownSweep = now
	for addr, list := range t.known {
		kept := list[:0]
		for _, s := range list {
			if now.Sub(s.at) < knownFor {
				kept = append(kept, s)
			}
		}
		if len(kept) == 0 {
			delete(t.known, addr)
		} else {
			t.known[addr] = kept
		}
	}
}

// knownAddrs is how many addresses have a known token, for tests.
func (t *throttle) knownAddrs() int {
	t.knownMu.RLock()
	defer t.knownMu.RUnlock()
	return len(t.known)
}
