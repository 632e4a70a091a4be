package llamaserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolmesh/toolmesh/internal/llamaserver"
)

// Environment of the test binary run as a child process.
const (
	// envDouble makes the test binary a llama-server double: "serve" (loads for
	// envLoadMS, then answers /health and /completion), "crash" (logs an error and exits 1)
	// or "hang" (never ready).
	envDouble = "LLAMASERVER_TEST_DOUBLE"
	envLoadMS = "LLAMASERVER_TEST_LOAD_MS"
	envGPU    = "LLAMASERVER_TEST_GPU"
	envArgs   = "LLAMASERVER_TEST_ARGS" // a file each start appends its arguments to
	// envParent makes the test binary a toolmesh stand-in that supervises a double and prints
	// its pid, so a test can kill the parent and watch the child.
	envParent = "LLAMASERVER_TEST_PARENT"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envDouble); mode != "" && os.Getenv(envParent) == "" {
		os.Exit(runDouble(mode, os.Args[1:]))
	}
	if os.Getenv(envParent) != "" {
		os.Exit(runParent())
	}
	goleak.VerifyTestMain(m)
}

// runDouble is a protocol-faithful stand-in for llama-server: --list-devices, explicit
// --host/--port, a 503 {"error":{"message":"Loading model"}} while loading, then 200s; its
// log lines have llama-server's prefix ("0.00.001.000 I ...").
func runDouble(mode string, args []string) int {
	if len(args) == 1 && args[0] == "--list-devices" {
		fmt.Println("Available devices:")
		if os.Getenv(envGPU) != "" {
			fmt.Println("  CUDA0: Test GPU (24000 MiB, 23000 MiB free)")
		} else {
			fmt.Println("  (none)")
		}
		return 0
	}
	if f := os.Getenv(envArgs); f != "" {
		fh, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintln(fh, strings.Join(args, " "))
			fh.Close()
		}
	}
	port, host := "", ""
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--port":
			port = args[i+1]
		case "--host":
			host = args[i+1]
		}
	}
	fmt.Fprintln(os.Stderr, "0.00.000.100 I main: loading model")
	fmt.Fprintln(os.Stderr, "0.00.000.200 W main: this is a warning")
	if mode == "crash" {
		fmt.Fprintln(os.Stderr, "0.00.000.300 E main: failed to load model")
		return 1
	}
	if host == "" || port == "" {
		fmt.Fprintln(os.Stderr, "0.00.000.300 E main: no --host/--port")
		return 1
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		fmt.Fprintln(os.Stderr, "0.00.000.300 E main: couldn't bind:", err)
		return 1
	}
	load, _ := strconv.Atoi(os.Getenv(envLoadMS))
	readyAt := time.Now().Add(time.Duration(load) * time.Millisecond)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if mode == "hang" || time.Now().Before(readyAt) {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`))
			return
		}
		switch r.URL.Path {
		case "/health":
			_, _ = w.Write([]byte(`{"status":"ok"}`))
		case "/completion":
			_ = json.NewEncoder(w).Encode(map[string]any{"content": "pid " + strconv.Itoa(os.Getpid()), "stop": true})
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	})
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	go func() { <-stop; ln.Close() }()
	_ = http.Serve(ln, mux)
	return 0
}

// runParent supervises a double and prints "pid N" once it is ready, then runs until killed.
func runParent() int {
	os.Unsetenv(envParent)
	os.Setenv(envDouble, "serve")
	s, err := llamaserver.New(llamaserver.Config{Bin: os.Args[0]}, func(context.Context, func(string)) (string, error) {
		return "/model.gguf", nil
	}, nil)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	go func() { _ = s.Run(context.Background()) }()
	for s.Status().State != llamaserver.Ready {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("pid", s.Status().PID)
	select {}
}
