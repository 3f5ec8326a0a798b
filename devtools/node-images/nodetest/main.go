// Command nodetest serves HTTP for the real-node tests, or fetches a URL.
//
//	nodetest serve [ADDR]  serve on ADDR (default :8080): /healthz answers 200, / answers
//	                       "hello from HOSTNAME"; exits on SIGTERM
//	nodetest get URL [CA]  GET URL (retrying for 60s; HTTPS verified with the CA file if given),
//	                       print the body, exit 0 on a 200
//	nodetest kafka HOST:PORT
//	                       ask the broker for its metadata (Kafka protocol, Metadata v4), then
//	                       ask every broker it advertises again at the advertised address; print
//	                       "broker ID at HOST:PORT" for each, exit 0 when all answered
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
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

type broker struct {
	id   int32
	host string
	port int32
}

// metadata sends a Metadata v4 request (no topics) to addr and returns the brokers it lists.
func metadata(addr string) ([]broker, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	client := "nodetest"
	body := make([]byte, 0, 64)
	body = binary.BigEndian.AppendUint16(body, 3) // api key: Metadata
	body = binary.BigEndian.AppendUint16(body, 4) // api version
	body = binary.BigEndian.AppendUint32(body, 1) // correlation id
	body = binary.BigEndian.AppendUint16(body, uint16(len(client)))
	body = append(body, client...)
	body = binary.BigEndian.AppendUint32(body, 0) // topics: an empty array
	body = append(body, 0)                        // allow_auto_topic_creation: false
	request := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	if _, err := conn.Write(append(request, body...)); err != nil {
		return nil, err
	}
	reader := bufio.NewReader(conn)
	var size, correlation, throttle, count int32
	for _, field := range []*int32{&size, &correlation, &throttle, &count} {
		if err := binary.Read(reader, binary.BigEndian, field); err != nil {
			return nil, err
		}
	}
	if correlation != 1 || count < 0 || count > 1000 {
		return nil, fmt.Errorf("unexpected metadata response (correlation %d, %d brokers)", correlation, count)
	}
	brokers := make([]broker, 0, count)
	for i := int32(0); i < count; i++ {
		var b broker
		var length, rack int16
		if err := binary.Read(reader, binary.BigEndian, &b.id); err != nil {
			return nil, err
		}
		if err := binary.Read(reader, binary.BigEndian, &length); err != nil {
			return nil, err
		}
		host := make([]byte, length)
		if _, err := io.ReadFull(reader, host); err != nil {
			return nil, err
		}
		b.host = string(host)
		if err := binary.Read(reader, binary.BigEndian, &b.port); err != nil {
			return nil, err
		}
		if err := binary.Read(reader, binary.BigEndian, &rack); err != nil {
			return nil, err
		}
		if rack > 0 {
			if _, err := reader.Discard(int(rack)); err != nil {
				return nil, err
			}
		}
		brokers = append(brokers, b)
	}
	return brokers, nil
}

// kafka checks the bootstrap address and every advertised broker address (retrying for 60s).
func kafka(bootstrap string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := func() error {
			brokers, err := metadata(bootstrap)
			if err != nil {
				return fmt.Errorf("bootstrap %s: %w", bootstrap, err)
			}
			if len(brokers) == 0 {
				return fmt.Errorf("bootstrap %s lists no broker", bootstrap)
			}
			for _, b := range brokers {
				advertised := net.JoinHostPort(b.host, strconv.Itoa(int(b.port)))
				if _, err := metadata(advertised); err != nil {
					return fmt.Errorf("broker %d advertised as %s: %w", b.id, advertised, err)
				}
				fmt.Printf("broker %d at %s\n", b.id, advertised)
			}
			return nil
		}()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		fmt.Fprintf(os.Stderr, "retrying: %v\n", err)
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
	case args[0] == "kafka" && len(args) == 2:
		err = kafka(args[1])
	default:
		err = fmt.Errorf("usage: nodetest serve [ADDR] | nodetest get URL [CAFILE] | nodetest kafka HOST:PORT")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
