// kg-peer-go - the one-process reference for mcpbench's stdio ping row: an MCP server written
// with the official Go SDK (github.com/modelcontextprotocol/go-sdk), over stdio, with one
// trivial tool so that it looks like a real server to a client. The SDK answers `ping` itself,
// in the same process that reads stdin: no hop to another process, which is what kode-gopher's
// master→worker channel adds. Built by bench/run.sh into $BUILD/kg-peer-go; not part of
// kode-gopher.
package main

import (
	"context"
	"log"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type echoIn struct {
	Text string `json:"text" jsonschema:"the text to send back"`
}

type echoOut struct {
	Text string `json:"text"`
}

func main() {
	srv := mcp.NewServer(&mcp.Implementation{Name: "kg-peer-go", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "Returns its text."},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, echoOut, error) {
			return nil, echoOut{Text: in.Text}, nil
		})
	if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatalf("kg-peer-go: %v", err)
	}
}
