#!/usr/bin/env bash
# demo.sh - the main job, once: a Go snippet through kode-gopher's full path (master, worker,
# sandbox agent, real go build against the warm cache). Run by `make demo`.
set -euo pipefail
cd "$(dirname "$0")"
snippet=$(mktemp --suffix=.go)
trap 'rm -f "$snippet"' EXIT
cat >"$snippet" <<'GO'
package demo

import (
	"context"
	"runtime"

	"cloud.google.com/go/storage"
	"google.golang.org/api/option"
)

// run is what kode-gopher calls; whatever it returns comes back as JSON.
func run(ctx context.Context) (any, error) {
	client, err := storage.NewClient(ctx, option.WithoutAuthentication())
	if err != nil {
		return nil, err
	}
	defer client.Close()
	return map[string]any{
		"go":             runtime.Version(),
		"storage_client": client != nil,
		"message":        "hello from a kode-gopher sandbox",
	}, nil
}
GO
echo "== kode-gopher exec $snippet" >&2
./kode-gopher exec "$snippet"
