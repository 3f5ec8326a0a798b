// Command nodetest serves HTTP for the real-node tests, or fetches a URL.
//
//	nodetest serve [ADDR]  serve on ADDR (default :8080): /healthz answers 200, / answers
//	                       "hello from HOSTNAME"; exits on SIGTERM
//	nodetest get URL [CA]  GET URL (retrying for 60s; HTTPS verified with the CA file if given),
//	                       print the body, exit 0 on a 200
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func serve(addr string) error {
	host, _ := os.Hostname()
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "hello from %s\n", host)
	})
	server := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdown)
	}()
	fmt.Printf("serving on %s\n", addr)
	if err := server.ListenAndServe(); err != http.ErrServerClosed {
		return err
	}
	return nil
}

func get(url, caFile string) error {
	client := &http.Client{Timeout: 5 * time.Second}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("no certificate in %s", caFile)
		}
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		response, err := client.Get(url)
		if err == nil {
			body, readErr := io.ReadAll(response.Body)
			response.Body.Close()
			if readErr == nil && response.StatusCode == http.StatusOK {
				fmt.Print(string(body))
				return nil
			}
			err = fmt.Errorf("status %d, read error %v", response.StatusCode, readErr)
		}
		if time.Now().After(deadline) {
			return err
		}
		fmt.Fprintf(os.Stderr, "retrying %s: %v\n", url, err)
		time.Sleep(time.Second)
	}
}

func main() {
	args := os.Args[1:]
	var err error
	switch {
	case len(args) == 0 || args[0] == "serve":
		addr := ":8080"
		if len(args) > 1 {
			addr = args[1]
		}
		err = serve(addr)
	case args[0] == "get" && len(args) == 2:
		err = get(args[1], "")
	case args[0] == "get" && len(args) == 3:
		err = get(args[1], args[2])
	default:
		err = fmt.Errorf("usage: nodetest serve [ADDR] | nodetest get URL [CAFILE]")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
