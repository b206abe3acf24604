package main

import (
	"fmt"
	"os"
	"os/exec"
	"time"
)

// spread: four processes of 100 MiB each; under a 256 MiB limit the kernel OOM-kills one of
// them, none of which comes near the limit alone, and the program exits 1
func main() {
	if len(os.Args) > 1 {
		b := make([]byte, 100<<20)
		for i := range b {
			b[i] = 1
		}
		time.Sleep(time.Hour)
	}
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		go func() { errs <- exec.Command(os.Args[0], "child").Run() }()
	}
	fmt.Fprintln(os.Stderr, "child:", <-errs)
	os.Exit(1)
}
