package admin

import "net/http"

type console struct{ h *Handler }

func newConsole(h *Handler) (*console, error) { return &console{h: h}, nil }

func (c *console) routes(m *http.ServeMux) {}
