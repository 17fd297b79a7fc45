package redisstore_test

import (
	"context"
	"errors"
	"fmt"
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

// freePort returns a loopback TCP port nobody listens on.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startRedis starts redis-server on port without persistence and stops it
// when the test ends.
func startRedis(t testing.TB, port int) *redisServer {
	t.Helper()
	needBinaries(t)
	s := newRedisServer(port, t.TempDir())
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.kill)
	return s
}

func newRedisServer(port int, dir string, extra ...string) *redisServer {
	s := &redisServer{port: port, dir: dir}
	s.args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log")}, extra...)
	return s
}

// start runs the server and waits until it accepts connections.
func (s *redisServer) start() error {
	s.cmd = exec.Command("redis-server", s.args...)
	// The server dies with the test binary, whatever happens to it.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.addr(), 100*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.kill()
			return fmt.Errorf("redis-server on %d did not start: %v\n%s", s.port, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill stops the server with SIGKILL and waits for it.
func (s *redisServer) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

func (s *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// The package's Redis Cluster: three masters on ports 7101 to 7103, started
// by the first test that needs it and stopped by TestMain.
var cluster struct {
	once    sync.Once
	url     string
	err     error
	servers []*redisServer
	dir     string
}

// clusterURL returns the URL of the package's Redis Cluster, starting it on
// first use.
func clusterURL(t testing.TB) string {
	t.Helper()
	redisURL(t)
	needBinaries(t)
	cluster.once.Do(func() { cluster.url, cluster.err = startCluster() })
	if cluster.err != nil {
		t.Fatal(cluster.err)
	}
	return cluster.url
}

func startCluster() (string, error) {
	dir, err := os.MkdirTemp("", "redisstore-cluster-")
	if err != nil {
		return "", err
	}
	cluster.dir = dir
	var addrs []string
	for _, port := range []int{7101, 7102, 7103} {
		nodeDir := filepath.Join(dir, strconv.Itoa(port))
		if err := os.Mkdir(nodeDir, 0o755); err != nil {
			return "", err
		}
		s := newRedisServer(port, nodeDir, "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(nodeDir, "nodes.conf"), "--cluster-node-timeout", "5000")
		if err := s.start(); err != nil {
			return "", err
		}
		cluster.servers = append(cluster.servers, s)
		addrs = append(addrs, s.addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	url := "redis-cluster://" + strings.Join(addrs, ",")
	return url, waitClusterReady(addrs)
}

// stopCluster stops the package's cluster, if it was started.
func stopCluster() {
	for _, s := range cluster.servers {
		s.kill()
	}
	if cluster.dir != "" {
		os.RemoveAll(cluster.dir)
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
