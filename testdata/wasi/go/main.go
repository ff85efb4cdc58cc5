// Command guest is a WASI preview1 program for sandboxd's tests, built with
// GOOS=wasip1 GOARCH=wasm (make wasi-guests). argv[1] picks what it does;
// the modes are a subset of guest.c's:
//
//	hello           print "hello from Go"
//	echo            copy stdin to stdout
//	args            print each argument after argv[1], one per line
//	env             print the environment, one NAME=value per line
//	cat PATH...     print the files
//	exit N          exit with status N
//	tick N MS       print "tick <i>" N times, MS milliseconds apart
//	sleep MS        sleep MS milliseconds, then print "woke"
//	hog             keep 1 MiB blocks until the runtime runs out of memory
package main

import (
	"io"
	"os"
	"strconv"
	"time"
)

func say(s string) { os.Stdout.WriteString(s + "\n") }

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(2)
	}
	return n
}

func main() {
	args := append(os.Args, "", "", "")
	switch args[1] {
	case "hello":
		say("hello from Go")
	case "echo":
		io.Copy(os.Stdout, os.Stdin)
	case "args":
		for _, a := range os.Args[2:] {
			say(a)
		}
	case "env":
		for _, kv := range os.Environ() {
			say(kv)
		}
	case "cat":
		for _, p := range os.Args[2:] {
			b, err := os.ReadFile(p)
			if err != nil {
				os.Stderr.WriteString(err.Error() + "\n")
				os.Exit(1)
			}
			os.Stdout.Write(b)
		}
	case "exit":
		os.Exit(atoi(args[2]))
	case "tick":
		n, ms := atoi(args[2]), atoi(args[3])
		for i := 1; i <= n; i++ {
			say("tick " + strconv.Itoa(i))
			if i < n {
				time.Sleep(time.Duration(ms) * time.Millisecond)
			}
		}
	case "sleep":
		time.Sleep(time.Duration(atoi(args[2])) * time.Millisecond)
		say("woke")
	case "hog":
		var blocks [][]byte
		for {
			b := make([]byte, 1<<20)
			for i := range b {
				b[i] = 1
			}
			blocks = append(blocks, b)
		}
	default:
		os.Stderr.WriteString("usage: guest hello|echo|args|env|cat|exit|tick|sleep|hog ...\n")
		os.Exit(2)
	}
}
