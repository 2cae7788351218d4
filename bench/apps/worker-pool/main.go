// An application for bench/admission-plain-app.sh: Go's net/http with a pool of W workers, each
// request holding one for D (an application that serves several at once, as most do).
// Usage: worker-pool PORT W D, e.g. worker-pool 28480 4 20ms.
package main

import (
	"log"
	"net/http"
	"os"
	"strconv"
	"time"
)

func main() {
	if len(os.Args) != 4 {
		log.Fatal("usage: worker-pool PORT WORKERS DURATION")
	}
	workers, err := strconv.Atoi(os.Args[2])
	if err != nil || workers < 1 {
		log.Fatalf("workers: want a positive integer, got %q", os.Args[2])
	}
	hold, err := time.ParseDuration(os.Args[3])
	if err != nil {
		log.Fatalf("duration: %v", err)
	}
	pool := make(chan struct{}, workers)
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		pool <- struct{}{}
		time.Sleep(hold)
		<-pool
		w.Write([]byte("ok\n"))
	})
	log.Fatal(http.ListenAndServe("127.0.0.1:"+os.Args[1], nil))
}
