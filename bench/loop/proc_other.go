//go:build !linux

package main

import (
	"errors"
	"os"
	"syscall"
	"time"
)

// The figures this bench reports come from Linux's /proc; elsewhere it runs, but CPU and
// load are unknown.

func selfCPU() time.Duration { return 0 }

func processCPU(int) (time.Duration, error) { return 0, errors.New("process CPU needs /proc") }

func childAttr() *syscall.SysProcAttr { return nil }

func signalProfile(*os.Process, bool) error { return errors.New("child profiles need Linux") }

func ctxSwitches(int) (int64, error) { return 0, errors.New("context switches need /proc") }
