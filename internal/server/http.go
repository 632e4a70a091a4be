package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// HTTP is one HTTP listener with graceful stop.
type HTTP struct {
	srv    *http.Server
	lis    net.Listener
	logger *slog.Logger
	drain  time.Duration
	force  <-chan struct{}
}

// ForceOn makes a drain end at once when force is closed (a second stop signal).
func (h *HTTP) ForceOn(force <-chan struct{}) { h.force = force }

// NewHTTP binds addr at once; h serves every request.
func NewHTTP(addr string, h http.Handler, logger *slog.Logger, drain time.Duration) (*HTTP, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen http %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	return &HTTP{srv: srv, lis: lis, logger: logger, drain: drain}, nil
}

// Addr is the bound address.
func (h *HTTP) Addr() string { return h.lis.Addr().String() }

// Run serves until ctx ends, then stops taking requests and drains for at most the drain deadline.
func (h *HTTP) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- h.srv.Serve(h.lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve http %s: %w", h.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.drain)
	defer cancel()
	go func() {
		select {
		case <-h.force:
			cancel()
		case <-sctx.Done():
		}
	}()
	if err := h.srv.Shutdown(sctx); err != nil {
		h.logger.Warn("http drain deadline passed, closing connections", "addr", h.Addr(), "err", err)
		_ = h.srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve http %s: %w", h.Addr(), err)
	}
	return nil
}
