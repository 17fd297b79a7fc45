package redisstore_test

import (
	"context"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// delayProxy forwards TCP connections to a Redis server, requests at once;
// while its delay is set, it holds the server's replies that long: Redis
// applies an operation whose answer comes too late for its caller.
type delayProxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64
	mu     sync.Mutex
	conns  []net.Conn
}

func startDelayProxy(t testing.TB, target string) *delayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &delayProxy{ln: ln, target: target}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	return p
}

func (p *delayProxy) addr() string { return p.ln.Addr().String() }

// hold makes the proxy hold replies for d (0: forward them at once).
func (p *delayProxy) hold(d time.Duration) { p.delay.Store(int64(d)) }

func (p *delayProxy) serve(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, client, server)
	p.mu.Unlock()
	go func() {
		_, _ = io.Copy(server, client)
		server.Close()
	}()
	type chunk struct {
		data []byte
		due  time.Time
	}
	replies := make(chan chunk, 1024)
	go func() {
		defer close(replies)
		buf := make([]byte, 32<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 {
				replies <- chunk{append([]byte(nil), buf[:n]...), time.Now().Add(time.Duration(p.delay.Load()))}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range replies {
		time.Sleep(time.Until(c.due))
		if _, err := client.Write(c.data); err != nil {
			break
		}
	}
	client.Close()
	server.Close()
}

// pipelinedClient connects to a standalone server as a Store would, but
// over one connection and writing every command at once, without waiting
// for the answers before:
// behind a delayProxy, the admission reaches Redis while earlier answers
// are held. The test closes it.
func pipelinedClient(t testing.TB, url string) rueidis.Client {
	t.Helper()
	co, err := rueidis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	co.ForceSingleClient, co.DisableCache, co.AlwaysPipelining = true, true, true
	// One connection, opened before the replies are held (a connection
	// dialled while they are would wait for its handshake).
	co.PipelineMultiplex = -1
	c, err := rueidis.NewClient(co)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// holds returns what the store's keys under prefix hold on every server
// behind url: budget reservations (the sum of every budget's r) and
// leases.
func holds(t *testing.T, url, prefix string) (reserved, leases int64) {
	t.Helper()
	c := rawClient(t, url)
	defer c.Close()
	ctx := context.Background()
	for _, node := range c.Nodes() {
		for key, kind := range keysOf(t, node, prefix) {
			if kind == "c" {
				n, err := node.Do(ctx, node.B().Zcard().Key(key).Build()).AsInt64()
				if err != nil {
					t.Fatalf("zcard %s: %v", key, err)
				}
				leases += n
				continue
			}
			v, err := node.Do(ctx, node.B().Hget().Key(key).Field("r").Build()).ToString()
			if err != nil {
				t.Fatalf("hget %s r: %v", key, err)
			}
			r, _ := strconv.ParseInt(v, 10, 64)
			reserved += r
		}
	}
	return reserved, leases
}

// keysOf returns the budget ("b") and concurrency ("c") keys under prefix
// on one server, with their kind.
func keysOf(t *testing.T, node rueidis.Client, prefix string) map[string]string {
	t.Helper()
	keys := map[string]string{}
	for _, kind := range []string{"b", "c"} {
		var cursor uint64
		for {
			e, err := node.Do(context.Background(), node.B().Scan().Cursor(cursor).Match(prefix+":*}:"+kind+":*").Count(1000).Build()).AsScanEntry()
			if err != nil {
				t.Fatalf("scan: %v", err)
			}
			for _, k := range e.Elements {
				keys[k] = kind
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return keys
}

// waitFor polls cond every 10ms until it holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// busyRedis keeps the server behind url busy in a script for d, from now;
// the channel is closed when the script has ended.
func busyRedis(t *testing.T, url string, d time.Duration) <-chan struct{} {
	t.Helper()
	c := rawClient(t, url)
	started, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		defer c.Close()
		const spin = `local t = redis.call('TIME')
local stop = t[1] * 1000000 + t[2] + tonumber(ARGV[1])
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] >= stop
return 1`
		close(started)
		err := c.Do(context.Background(), c.B().Eval().Script(spin).Numkeys(0).Arg(strconv.FormatInt(d.Microseconds(), 10)).Build()).Error()
		if err != nil {
			t.Errorf("busy script: %v", err)
		}
	}()
	<-started
	// Let the script reach the server first.
	time.Sleep(50 * time.Millisecond)
	return done
}

// freePrefixForCluster returns a fresh prefix whose keys are deleted from
// every master at the end.
func freePrefixForCluster(t *testing.T, url string) string {
	p := freshPrefix()
	t.Cleanup(func() {
		c := rawClient(t, url)
		defer c.Close()
		for _, node := range c.Nodes() {
			for k := range keysOf(t, node, p) {
				node.Do(context.Background(), node.B().Unlink().Key(k).Build())
			}
		}
	})
	return p
}
