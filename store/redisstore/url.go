package redisstore

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// clientOption parses a store URL: redis:// or rediss:// for a standalone
// server, redis-cluster:// or rediss-cluster:// for a Cluster.
func clientOption(raw string) (rueidis.ClientOption, bool, error) {
	if raw == "" {
		return rueidis.ClientOption{}, false, errors.New("redisstore: open: no URL (want redis://host:port/db or redis-cluster://host:port,host:port,...)")
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return rueidis.ClientOption{}, false, fmt.Errorf("redisstore: open %s: not a URL (want redis://host:port/db or redis-cluster://host:port,...)", redactURL(raw))
	}
	switch scheme {
	case "redis", "rediss":
		u, err := url.Parse(raw)
		if err != nil {
			return rueidis.ClientOption{}, false, fmt.Errorf("redisstore: open %s: %w", redactURL(raw), errors.Unwrap(err))
		}
		if u.Hostname() == "" {
			return rueidis.ClientOption{}, false, fmt.Errorf("redisstore: open %s: no host", redactURL(raw))
		}
		if p := strings.TrimPrefix(u.Path, "/"); p != "" {
			if db, err := strconv.Atoi(p); err != nil || db < 0 {
				return rueidis.ClientOption{}, false, fmt.Errorf("redisstore: open %s: database %q is not a number", redactURL(raw), p)
			}
		}
		co, err := rueidis.ParseURL(raw)
		if err != nil {
			return rueidis.ClientOption{}, false, fmt.Errorf("redisstore: open %s: %w", redactURL(raw), err)
		}
		return co, false, nil
	case "redis-cluster", "rediss-cluster":
	default:
		return rueidis.ClientOption{}, false, fmt.Errorf("redisstore: open %s: scheme %q is not redis, rediss, redis-cluster or rediss-cluster", redactURL(raw), scheme)
	}
	var co rueidis.ClientOption
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		if p := strings.Trim(rest[i:], "/"); p != "" && p != "0" {
			return co, false, fmt.Errorf("redisstore: open %s: a Redis Cluster has only database 0 and takes no options", redactURL(raw))
		}
		rest = rest[:i]
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		info, err := url.Parse("redis://" + rest[:at+1] + "x")
		if err != nil || info.User == nil {
			return co, false, fmt.Errorf("redisstore: open %s: malformed user information", redactURL(raw))
		}
		co.Username = info.User.Username()
		co.Password, _ = info.User.Password()
		rest = rest[at+1:]
	}
	if rest == "" {
		return co, false, fmt.Errorf("redisstore: open %s: no hosts (want redis-cluster://host:port,host:port,...)", redactURL(raw))
	}
	for _, addr := range strings.Split(rest, ",") {
		if err := checkAddr(addr); err != nil {
			return co, false, fmt.Errorf("redisstore: open %s: %w", redactURL(raw), err)
		}
		co.InitAddress = append(co.InitAddress, addr)
	}
	if scheme == "rediss-cluster" {
		co.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return co, true, nil
}

// checkAddr requires host:port with a port number.
func checkAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q is not host:port", addr)
	}
	if host == "" {
		return fmt.Errorf("address %q has no host", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return fmt.Errorf("address %q has no valid port", addr)
	}
	return nil
}

// redactURL hides a URL's password in messages.
func redactURL(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		if len(raw) > 64 {
			raw = raw[:64] + "..."
		}
		return strconv.Quote(raw)
	}
	host := rest
	if i := strings.IndexAny(host, "/?#"); i >= 0 {
		host = host[:i]
	}
	if at := strings.LastIndexByte(host, '@'); at >= 0 {
		user := host[:at]
		if i := strings.IndexByte(user, ':'); i >= 0 {
			user = user[:i] + ":xxxxx"
		}
		rest = user + rest[at:]
	}
	return scheme + "://" + rest
}
