// Test-mode warm-up: prepare.sh runs `go test -c` on this package with the agent's flags, so
// the testing packages, the generated test main and vet's facts for what this package imports
// are in the build cache before a sandbox's first test call (see runtime/README.md).
package main

import "testing"

func TestWarmup(t *testing.T) {}

func BenchmarkWarmup(b *testing.B) {}

func FuzzWarmup(f *testing.F) { f.Fuzz(func(t *testing.T, s string) {}) }
