package gateway

import (
	"bytes"
	"net"
	"net/netip"

	"github.com/valyala/fasthttp"
)

// clientIP returns the address a request came from, for rules on the ip
// subject: the peer's address, or, when the peer is a trusted proxy, the
// nearest address in X-Forwarded-For that is not itself a trusted proxy
// (read right to left, the order in which proxies append). A client can
// write anything in the header; only what trusted proxies appended after
// it is believed. An entry that does not parse ends the walk at the last
// trusted address, so a broken chain counts against the proxy, never
// against an address of the client's choosing.
func clientIP(ctx *fasthttp.RequestCtx, trusted []netip.Prefix) string {
	peer := addrOf(ctx.RemoteIP())
	if len(trusted) == 0 || !isTrusted(peer, trusted) {
		return peer.String()
	}
	last := peer
	headers := ctx.Request.Header.PeekAll(fasthttp.HeaderXForwardedFor)
	for h := len(headers) - 1; h >= 0; h-- {
		list := headers[h]
		for len(list) > 0 {
			i := bytes.LastIndexByte(list, ',')
			entry := bytes.TrimSpace(list[i+1:])
			list = list[:max(i, 0)]
			a, err := netip.ParseAddr(string(entry))
			if err != nil {
				return last.String()
			}
			a = a.Unmap()
			if !isTrusted(a, trusted) {
				return a.String()
			}
			last = a
		}
	}
	return last.String()
}

func addrOf(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
