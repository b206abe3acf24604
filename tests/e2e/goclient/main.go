// kg-go-client - a second MCP client implementation for kode-gopher's end-to-end tests: the
// official Go SDK (github.com/modelcontextprotocol/go-sdk), over stdio (it starts `serve`) or
// Streamable HTTP. tests/e2e/live-go.test.mjs builds it (go build, through the module proxy)
// and runs one scenario per process; it prints one JSON object a line on stdout (log,
// progress, result, error, mark) for the test to check, and exits 0 unless the scenario
// could not be run at all.
//
//	kg-go-client -bin PATH            stdio: start PATH serve
//	kg-go-client -url URL             Streamable HTTP
//	-scenario cancel|logs|progress|call   -level LEVEL   -code FILE (the tool's code argument)
//	-tag NAME (cancel: when the program prints "started NAME"; without it, when the build starts)
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var (
	out   = json.NewEncoder(os.Stdout)
	outMu sync.Mutex
)

func emit(v map[string]any) {
	outMu.Lock()
	defer outMu.Unlock()
	out.Encode(v)
}

func main() {
	bin := flag.String("bin", "", "kode-gopher binary (stdio)")
	url := flag.String("url", "", "Streamable HTTP endpoint")
	scenario := flag.String("scenario", "call", "cancel, logs, progress or call")
	level := flag.String("level", "info", "logging/setLevel level")
	codeFile := flag.String("code", "", "file with the code argument")
	next := flag.String("next", "", "cancel: file with the next call's code")
	tag := flag.String("tag", "", "cancel: cancel when the program prints \"started TAG\" (\"\": when the build starts)")
	flag.Parse()

	code, err := os.ReadFile(*codeFile)
	if err != nil {
		fail("read -code: %v", err)
	}
	started := make(chan struct{})
	var once sync.Once
	opts := &mcp.ClientOptions{
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
			emit(map[string]any{"event": "log", "level": r.Params.Level, "data": r.Params.Data})
			d, _ := r.Params.Data.(map[string]any)
			if d != nil && ((*tag != "" && d["text"] == "started "+*tag) ||
				(*tag == "" && d["stream"] == "step" && d["phase"] == "build")) {
				once.Do(func() { close(started) })
			}
		},
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			emit(map[string]any{"event": "progress", "progress": r.Params.Progress,
				"total": r.Params.Total, "message": r.Params.Message})
		},
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "kg-go-client", Version: "1.0.0"}, opts)
	var transport mcp.Transport
	if *bin != "" {
		transport = &mcp.CommandTransport{Command: exec.Command(*bin, "serve", "--log-level", "debug")}
	} else {
		transport = &mcp.StreamableClientTransport{Endpoint: *url, MaxRetries: 10}
	}
	ctx := context.Background()
	session, err := client.Connect(ctx, transport, nil)
	if err != nil {
		fail("connect: %v", err)
	}
	defer session.Close()
	if err := session.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: mcp.LoggingLevel(*level)}); err != nil {
		fail("setLevel: %v", err)
	}
	call := func(ctx context.Context, code string) (*mcp.CallToolResult, error) {
		p := &mcp.CallToolParams{Name: "execute_go_code", Arguments: map[string]any{"code": code}}
		if *scenario == "progress" {
			p.SetProgressToken("kg-go-progress")
		}
		return session.CallTool(ctx, p)
	}
	result := func(r *mcp.CallToolResult, err error) {
		if err != nil {
			emit(map[string]any{"event": "error", "error": err.Error()})
			return
		}
		emit(map[string]any{"event": "result", "isError": r.IsError, "structuredContent": r.StructuredContent})
	}
	switch *scenario {
	case "cancel":
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			result(call(cctx, string(code)))
		}()
		select {
		case <-started:
		case <-time.After(150 * time.Second):
			fail("the program never said it started")
		}
		t0 := time.Now()
		cancel() // the SDK sends notifications/cancelled
		<-done
		nextCode, err := os.ReadFile(*next)
		if err != nil {
			fail("read -next: %v", err)
		}
		r, err := call(ctx, string(nextCode))
		emit(map[string]any{"event": "mark", "what": "next call answered", "ms": time.Since(t0).Milliseconds()})
		result(r, err)
	default:
		result(call(ctx, string(code)))
	}
}

func fail(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "kg-go-client: "+f+"\n", a...)
	os.Exit(2)
}
