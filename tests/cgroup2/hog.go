package main

import (
	"fmt"
	"os"
)

// hog: touch memory in 16 MiB chunks until the sandbox's limit stops it
func main() {
	b, _ := os.ReadFile("/proc/self/cgroup")
	fmt.Printf("cgroup: %s", b)
	var keep [][]byte
	for i := 1; i <= 128; i++ {
		c := make([]byte, 16<<20)
		for j := range c {
			c[j] = byte(j)
		}
		keep = append(keep, c)
		if i%16 == 0 {
			fmt.Printf("%d MiB\n", i*16)
		}
	}
	fmt.Println("allocated 2 GiB: no memory limit", len(keep))
}
