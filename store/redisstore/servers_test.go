package redisstore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// redisServer is a redis-server process started by a test.
type redisServer struct {
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
	// exited is closed when cmd has exited and been waited for.
	exited chan struct{}
}

// needBinaries fails the test when redis-server or redis-cli is missing:
// tests that reach it have been told by SLUICE_TEST_REDIS_URL that Redis
// tests are to run.
func needBinaries(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is not installed: %v", bin, err)
		}
	}
}

// freePort returns a loopback TCP port nobody listened on a moment ago.
// The port is freed for redis-server to take, so another process may take
// it first: a server started on it fails to start, and startRedis retries.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startRedis starts redis-server on a free port without persistence and
// stops it when the test ends. A server that cannot take its port (taken
// between freePort and its bind, by a test running in parallel, say) is
// started again on another.
func startRedis(t testing.TB) *redisServer {
	t.Helper()
	needBinaries(t)
	var err error
	for range 5 {
		s := newRedisServer(freePort(t), t.TempDir())
		if err = s.start(); err == nil {
			t.Cleanup(s.kill)
			return s
		}
	}
	t.Fatal(err)
	return nil
}

func newRedisServer(port int, dir string, extra ...string) *redisServer {
	s := &redisServer{port: port, dir: dir}
	s.args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log")}, extra...)
	return s
}

// start runs the server and waits until it accepts connections. It fails
// when the server exits first (its port taken, say) or when another process
// answers on the port.
func (s *redisServer) start() error {
	s.cmd = exec.Command("redis-server", s.args...)
	// The server dies with the test binary, whatever happens to it.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	cmd, exited := s.cmd, make(chan struct{})
	s.exited = exited
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	fail := func(why string) error {
		log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
		s.kill()
		return fmt.Errorf("redis-server on %d did not start: %s\n%s", s.port, why, log)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-exited:
			return fail("it exited")
		default:
		}
		c, err := net.DialTimeout("tcp", s.addr(), 100*time.Millisecond)
		if err == nil {
			c.Close()
			if pid, err := s.pid(); err != nil || pid != s.cmd.Process.Pid {
				return fail(fmt.Sprintf("another process answers on its port (pid %d, %v)", pid, err))
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fail(err.Error())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pid asks the server answering on s's port for its process id.
func (s *redisServer) pid() (int, error) {
	c, err := net.DialTimeout("tcp", s.addr(), time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "INFO server\r\n"); err != nil {
		return 0, err
	}
	r := bufio.NewReader(c)
	header, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(header, "$")))
	if err != nil {
		return 0, fmt.Errorf("INFO answered %q", header)
	}
	info := make([]byte, n)
	if _, err := io.ReadFull(r, info); err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(info)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO names no process_id")
}

// kill stops the server with SIGKILL and waits for it.
func (s *redisServer) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

func (s *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// redisCluster is a Redis Cluster of three masters on free loopback ports
// chosen when it starts.
type redisCluster struct {
	url     string
	servers []*redisServer
	dir     string
}

// The package's Redis Cluster, started by the first test that needs it and
// stopped by TestMain.
var cluster struct {
	once sync.Once
	err  error
	*redisCluster
}

// clusterURL returns the URL of the package's Redis Cluster, starting it on
// first use.
func clusterURL(t testing.TB) string {
	t.Helper()
	redisURL(t)
	needBinaries(t)
	cluster.once.Do(func() { cluster.redisCluster, cluster.err = startCluster() })
	if cluster.err != nil {
		t.Fatal(cluster.err)
	}
	return cluster.url
}

// ownCluster starts a Redis Cluster for t alone, stopped when t ends: for
// a test that stops a master, which the package's cluster cannot have while
// other tests use it.
func ownCluster(t testing.TB) *redisCluster {
	t.Helper()
	redisURL(t)
	needBinaries(t)
	c, err := startCluster()
	if c != nil {
		t.Cleanup(c.stop)
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startCluster starts a cluster; on an error, the cluster it returns (when
// not nil) holds what was started, for stop.
func startCluster() (*redisCluster, error) {
	dir, err := os.MkdirTemp("", "redisstore-cluster-")
	if err != nil {
		return nil, err
	}
	c := &redisCluster{dir: dir}
	var addrs []string
	for node := range 3 {
		s, err := startClusterNode(filepath.Join(dir, strconv.Itoa(node)))
		if err != nil {
			return c, err
		}
		c.servers = append(c.servers, s)
		addrs = append(addrs, s.addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		return c, fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c.url = "redis-cluster://" + strings.Join(addrs, ",")
	return c, waitClusterReady(addrs)
}

// stop kills the cluster's servers and removes their directory.
func (c *redisCluster) stop() {
	for _, s := range c.servers {
		s.kill()
	}
	os.RemoveAll(c.dir)
}

// clusterBusOffset is how far above its client port a cluster node listens
// for the other nodes.
const clusterBusOffset = 10000

// startClusterNode starts a cluster-enabled redis-server in dir on a free
// port whose bus port is free too. Another process may take either port
// between the check and the server's bind, so a node that fails to start is
// retried on other ports.
func startClusterNode(dir string) (*redisServer, error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	var err error
	for range 5 {
		var port int
		if port, err = clusterPort(); err != nil {
			continue
		}
		s := newRedisServer(port, dir, "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "5000")
		if err = s.start(); err == nil {
			return s, nil
		}
		os.Remove(filepath.Join(dir, "nodes.conf"))
	}
	return nil, fmt.Errorf("start a cluster node: %w", err)
}

// clusterPort returns a loopback port that is free, as is the port
// clusterBusOffset above it.
func clusterPort() (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		if port+clusterBusOffset > 65535 {
			l.Close()
			continue
		}
		bus, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+clusterBusOffset))
		l.Close()
		if err != nil {
			continue
		}
		bus.Close()
		return port, nil
	}
	return 0, errors.New("no free port with a free cluster bus port")
}

// stopCluster stops the package's cluster, if it was started.
func stopCluster() {
	if cluster.redisCluster != nil {
		cluster.stop()
	}
}

// waitClusterReady waits until every node reports the cluster up and a
// cluster client can write keys of many slots.
func waitClusterReady(addrs []string) error {
	deadline := time.Now().Add(30 * time.Second)
	for _, addr := range addrs {
		host, port, _ := net.SplitHostPort(addr)
		for {
			info, _ := exec.Command("redis-cli", "-h", host, "-p", port, "cluster", "info").Output()
			if strings.Contains(string(info), "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("cluster node %s never reached state ok: %s", addr, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for {
		err := tryClusterWrites(addrs)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster %v not ready: %w", addrs, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tryClusterWrites(addrs []string) error {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		return err
	}
	defer c.Close()
	if c.Mode() != rueidis.ClientModeCluster {
		return errors.New("not a cluster yet")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for i := range 64 {
		if err := c.Do(ctx, c.B().Set().Key(fmt.Sprintf("ready-%d", i)).Value("1").Px(time.Second).Build()).Error(); err != nil {
			return err
		}
	}
	return nil
}
