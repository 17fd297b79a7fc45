// Package webhook delivers Sluice's events to HTTP receivers, off the
// request's path: each event is queued (a bounded queue; a full one drops
// the event and counts it) and posted as a JSON body signed the Standard
// Webhooks way (https://www.standardwebhooks.com): headers webhook-id,
// webhook-timestamp (Unix seconds) and webhook-signature ("v1," and the
// base64 HMAC-SHA256 of "{id}.{timestamp}.{body}" under the endpoint's
// secret). A delivery that fails (a connection error or a status other
// than 2xx) is retried with exponential backoff, under the same id, a
// bounded number of times.
package webhook

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Endpoint is a receiver and the events it is sent.
type Endpoint struct {
	URL string
	// Events names the event types posted to it.
	Events []string
	// Secret signs the bodies: a Standard Webhooks secret ("whsec_"
	// then base64) is decoded, any other string used as it is.
	Secret string
}

// Options configures a Dispatcher. Zero values are the defaults.
type Options struct {
	Endpoints []Endpoint
	// QueueSize bounds the deliveries waiting (1024).
	QueueSize int
	// MaxAttempts bounds the attempts of one delivery (5).
	MaxAttempts int
	// RetryBase is the pause after a first failed attempt (1 s), doubling
	// up to RetryMax (1 minute).
	RetryBase, RetryMax time.Duration
	// Timeout bounds one attempt (10 s).
	Timeout time.Duration
	// Workers is how many deliveries are made at once (2).
	Workers int
	// Client posts the bodies (nil: a client with no redirects followed).
	Client *http.Client
	// OnFailure, if set, is told of every delivery given up: "queue_full"
	// when the queue had no room, "attempts" when every attempt failed.
	// It must not block.
	OnFailure func(reason string)
	Logger    *slog.Logger
}

// Event is what a receiver is sent: {"type", "timestamp", "data"}.
type Event struct {
	Type string    `json:"type"`
	At   time.Time `json:"timestamp"`
	Data any       `json:"data"`
}

// Dispatcher queues and delivers events. Send is safe for concurrent use;
// Run delivers.
type Dispatcher struct {
	opts      Options
	endpoints []endpoint
	queue     chan delivery
	log       *slog.Logger
}

type endpoint struct {
	Endpoint
	signer *standardwebhooks.Webhook
}

// delivery is one event for one endpoint.
type delivery struct {
	to   *endpoint
	id   string
	body []byte
}

// New checks the endpoints' secrets and returns a Dispatcher.
func New(opts Options) (*Dispatcher, error) {
	if opts.QueueSize <= 0 {
		opts.QueueSize = 1024
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 5
	}
	if opts.RetryBase <= 0 {
		opts.RetryBase = time.Second
	}
	if opts.RetryMax <= 0 {
		opts.RetryMax = time.Minute
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	if opts.Client == nil {
		opts.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	d := &Dispatcher{opts: opts, queue: make(chan delivery, opts.QueueSize), log: opts.Logger}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	for i, e := range opts.Endpoints {
		if e.Secret == "" {
			return nil, fmt.Errorf("webhook: endpoint %d (%s): no secret", i, e.URL)
		}
		var signer *standardwebhooks.Webhook
		var err error
		if len(e.Secret) > len("whsec_") && e.Secret[:len("whsec_")] == "whsec_" {
			signer, err = standardwebhooks.NewWebhook(e.Secret)
		} else {
			signer, err = standardwebhooks.NewWebhookRaw([]byte(e.Secret))
		}
		if err != nil {
			return nil, fmt.Errorf("webhook: endpoint %d (%s): secret: %w", i, e.URL, err)
		}
		d.endpoints = append(d.endpoints, endpoint{Endpoint: e, signer: signer})
	}
	return d, nil
}

// Wants reports whether any endpoint is sent events of type typ.
func (d *Dispatcher) Wants(typ string) bool {
	if d == nil {
		return false
	}
	for i := range d.endpoints {
		if slices.Contains(d.endpoints[i].Events, typ) {
			return true
		}
	}
	return false
}

// Send queues e for every endpoint that is sent its type, without
// waiting: when the queue is full the delivery is dropped and counted. A
// nil Dispatcher sends nothing.
func (d *Dispatcher) Send(e Event) {
	if !d.Wants(e.Type) {
		return
	}
	body, err := json.Marshal(e)
	if err != nil {
		d.log.Error("webhook: event not encodable", "type", e.Type, "err", err)
		return
	}
	for i := range d.endpoints {
		to := &d.endpoints[i]
		if !slices.Contains(to.Events, e.Type) {
			continue
		}
		select {
		case d.queue <- delivery{to: to, id: newID(), body: body}:
		default:
			d.failed("queue_full")
			d.log.Warn("webhook queue full: event dropped", "type", e.Type, "url", to.URL)
		}
	}
}

// Run delivers queued events until ctx ends; what is still queued then is
// dropped.
func (d *Dispatcher) Run(ctx context.Context) {
	done := make(chan struct{})
	for range d.opts.Workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				select {
				case <-ctx.Done():
					return
				case dl := <-d.queue:
					d.deliver(ctx, dl)
				}
			}
		}()
	}
	for range d.opts.Workers {
		<-done
	}
}

// deliver makes up to MaxAttempts attempts, backing off between them.
func (d *Dispatcher) deliver(ctx context.Context, dl delivery) {
	wait := d.opts.RetryBase
	var err error
	for attempt := 1; attempt <= d.opts.MaxAttempts; attempt++ {
		if err = d.attempt(ctx, dl); err == nil {
			return
		}
		if attempt == d.opts.MaxAttempts {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, d.opts.RetryMax)
	}
	d.failed("attempts")
	d.log.Error("webhook delivery failed; given up", "url", dl.to.URL, "id", dl.id, "attempts", d.opts.MaxAttempts, "err", err)
}

// attempt posts dl once, signed now.
func (d *Dispatcher) attempt(ctx context.Context, dl delivery) error {
	now := time.Now()
	sig, err := dl.to.signer.Sign(dl.id, now, dl.body)
	if err != nil {
		return fmt.Errorf("sign: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, dl.to.URL, bytes.NewReader(dl.body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sluice-webhooks")
	req.Header.Set(standardwebhooks.HeaderWebhookID, dl.id)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, fmt.Sprint(now.Unix()))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	resp, err := d.opts.Client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return errors.New("receiver answered " + resp.Status)
	}
	return nil
}

func (d *Dispatcher) failed(reason string) {
	if d.opts.OnFailure != nil {
		d.opts.OnFailure(reason)
	}
}

// newID names a delivery; retries keep it, so a receiver can drop the
// copies of one it already has.
func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "msg_" + hex.EncodeToString(b[:])
}
