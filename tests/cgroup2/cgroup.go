package main

import (
	"fmt"
	"os"
)

// cgroup: where the program runs, and whether it can reach its own limits
func main() {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		fmt.Println("read /proc/self/cgroup:", err)
	}
	fmt.Printf("cgroup: %s", b)
	err = os.WriteFile("/sys/fs/cgroup/memory.max", []byte("max\n"), 0)
	fmt.Printf("write memory.max: %v\n", err)
}
