package main

import (
	"fmt"
	"os"
	"os/exec"
)

// forks: start sleepers until fork fails at the sandbox's process limit
func main() {
	b, _ := os.ReadFile("/proc/self/cgroup")
	fmt.Printf("cgroup: %s", b)
	for i := 0; i < 400; i++ {
		if err := exec.Command("/bin/sleep", "60").Start(); err != nil {
			fmt.Fprintf(os.Stderr, "child %d: %v\n", i, err)
			os.Exit(1)
		}
	}
	fmt.Println("started 400 processes: no process limit")
}
