package sluice

import (
	"cmp"
	"fmt"
	"math/bits"
	"strconv"
	"time"
)

// Identity is who a request is charged to. It must come from a trusted
// record (an API key, a verified header from a trusted proxy, a session),
// never from the request body.
type Identity struct {
	Org       string
	Workspace string
	Team      string
	User      string
	Key       string
	IP        string
	Session   string
	Model     string
	Route     string
	Tier      string
	// Class is the request's priority class on rules with classes (see
	// Class); empty, or a class a rule does not list, is the rule's
	// DefaultClass.
	Class string
	// Tags attribute a request to cooperating groups; a rule on "tag"
	// charges one counter per distinct tag.
	Tags []string
}

// attribute returns the value of attribute a in id; tag, global and
// server have none of their own ("").
func (id *Identity) attribute(a attribute) string {
	return [...]string{attrOrg: id.Org, attrWorkspace: id.Workspace, attrTeam: id.Team, attrUser: id.User,
		attrKey: id.Key, attrIP: id.IP, attrSession: id.Session, attrModel: id.Model, attrRoute: id.Route,
		attrTier: id.Tier, attrServer: ""}[a]
}

// subjectSeparator joins the parts of a composite subject.
const subjectSeparator = "\x1f"

// qualifierSeparator joins an attribute value to the parent it is
// qualified by (an org, or a session's key) in a counter's subject.
const qualifierSeparator = "\x1e"

// DefaultOrg is the org of an identity that names none. Its attribute
// values are counted bare, as they were before values were qualified by
// their org, so that a deployment with one org keeps its counters.
const DefaultOrg = "default"

// inDefaultOrg reports whether org is the default org ("" or DefaultOrg).
func inDefaultOrg(org string) bool { return org == "" || org == DefaultOrg }

// qualified returns attribute a of id as a counter counts it: a
// workspace, a team, a user and a tag within their org, a session within
// its key; an org, a key (unique on its own), an ip, a model, a route and
// a tier as they are. So two tenants that use the same names never share
// a counter. tag is the tag counted, for attrTag.
func (id *Identity) qualified(a attribute, tag string) string {
	switch a {
	case attrWorkspace, attrTeam, attrUser:
		return id.qualifiedValue(id.attribute(a))
	case attrTag:
		return id.qualifiedValue(tag)
	case attrSession:
		if id.Key == "" {
			return id.Session
		}
		return id.Key + qualifierSeparator + id.Session
	}
	return id.attribute(a)
}

// qualifiedValue returns v, a workspace, team, user or tag of id.s org,
// qualified by that org.
func (id *Identity) qualifiedValue(v string) string {
	if inDefaultOrg(id.Org) {
		return v
	}
	return id.Org + qualifierSeparator + v
}

// subjectValue builds the counter subject of r for id. A missing attribute
// counts as the empty value, so requests without it share one counter
// rather than escaping the rule; tag and session are the exceptions: a rule
// on them applies only to requests with a tag, or made in a session.
func subjectValue(r *compiledRule, id *Identity, tag, serverID string) string {
	if len(r.attrs) == 1 {
		switch a := r.attrs[0]; a {
		case attrGlobal:
			return ""
		case attrServer:
			return serverID
		default:
			return id.qualified(a, tag)
		}
	}
	// The subject is the one allocation for a subject of up to 64 bytes.
	b := make([]byte, 0, 64)
	for i, a := range r.attrs {
		if i > 0 {
			b = append(b, subjectSeparator...)
		}
		b = append(b, id.qualified(a, tag)...)
	}
	return string(b)
}

// Usage is what a call consumed, as the provider reported it, or a bound on
// it before the call.
type Usage struct {
	// InputTokens counts every input token, cached or not.
	InputTokens int64
	// OutputTokens counts the output tokens of every completion.
	OutputTokens int64
	// CachedInputTokens is the part of InputTokens read from a cache.
	CachedInputTokens int64
	// CacheWriteTokens is the part of InputTokens written to a cache.
	CacheWriteTokens int64
	// AudioInputTokens is the part of InputTokens that is audio, not read
	// from a cache; AudioOutputTokens the part of OutputTokens. Both are
	// priced at the audio rates of a Price that has them (a live session's
	// speech), and count as tokens for every token metric.
	AudioInputTokens  int64
	AudioOutputTokens int64
	// Cost is the price of the call in micro-dollars.
	Cost int64
	// Custom holds custom metrics by name (audio seconds, sandbox seconds).
	// A rule on a custom metric applies only to requests whose Max (or
	// Expected) names it, if only with 0.
	Custom map[string]int64
}

// IsZero reports whether u reports nothing at all.
func (u *Usage) IsZero() bool {
	return u.InputTokens == 0 && u.OutputTokens == 0 && u.CachedInputTokens == 0 &&
		u.CacheWriteTokens == 0 && u.AudioInputTokens == 0 && u.AudioOutputTokens == 0 && u.Cost == 0 && len(u.Custom) == 0
}

// MaxTokens is the ceiling on every token count of a Usage, and on the
// amount of every custom metric: 2^40, about 1.1 trillion, far more than
// any one call produces. An amount above it, like a negative one, is no
// usage at all but a provider's (or caller's) error: Admit refuses such an
// estimate, and Settle charges the reservation what it reserved instead
// (see Reservation.Settle). So no counter is ever given a figure that
// could wrap it.
const MaxTokens = 1 << 40

// MaxCost is the ceiling on a Usage's Cost in micro-dollars: 2^50, about
// $1.1 billion, the price of MaxTokens tokens at $1,024 per million.
const MaxCost = 1 << 50

// validate refuses amounts that are negative or above their ceiling.
func (u *Usage) validate() error {
	for _, f := range [...]struct {
		name    string
		v, most int64
	}{
		{"input_tokens", u.InputTokens, MaxTokens}, {"output_tokens", u.OutputTokens, MaxTokens},
		{"cached_input_tokens", u.CachedInputTokens, MaxTokens}, {"cache_write_tokens", u.CacheWriteTokens, MaxTokens},
		{"audio_input_tokens", u.AudioInputTokens, MaxTokens}, {"audio_output_tokens", u.AudioOutputTokens, MaxTokens},
		{"cost", u.Cost, MaxCost},
	} {
		if err := checkAmount(f.name, f.v, f.most); err != nil {
			return err
		}
	}
	for name, v := range u.Custom {
		if err := checkAmount("custom metric "+strconv.Quote(name), v, MaxTokens); err != nil {
			return err
		}
	}
	return nil
}

func checkAmount(name string, v, most int64) error {
	switch {
	case v < 0:
		return fmt.Errorf("%w: %s is negative (%d)", ErrInvalidUsage, name, v)
	case v > most:
		return fmt.Errorf("%w: %s is %d, above the ceiling of %d", ErrInvalidUsage, name, v, most)
	}
	return nil
}

// amountOf returns how much of metric u holds.
func (u *Usage) amountOf(metric Metric) int64 {
	switch metric {
	case MetricRequests, MetricConcurrency:
		return 1
	case MetricInputTokens:
		return u.InputTokens
	case MetricUncachedInputTokens:
		return max(0, u.InputTokens-u.CachedInputTokens)
	case MetricOutputTokens:
		return u.OutputTokens
	case MetricTokens:
		return saturatingAdd(u.InputTokens, u.OutputTokens)
	case MetricCost:
		return u.Cost
	}
	return u.Custom[string(metric)]
}

func saturatingAdd(a, b int64) int64 {
	s := a + b
	if s < a {
		return 1<<63 - 1
	}
	return s
}

// Request is one admission: who pays and what the call may cost.
type Request struct {
	Identity Identity
	// Max bounds the call: the input estimate plus the output bound (output
	// cap times n), and the cost of both. Worst-case reservations charge it.
	Max Usage
	// Expected is the likely usage, reserved by rules with ReserveEstimate.
	// Zero means Max.
	Expected Usage
	// OutputPrice is the price of one million output tokens in
	// micro-dollars; Fit uses it to turn a cost budget's room into tokens.
	OutputPrice int64
	// Timeout is the model deadline; leases and reservations expire at
	// Timeout plus Options.ExpirySlack at the latest (sooner, with
	// Options.LeaseTimeout, when their Limiter stops renewing them). Zero
	// means Options.DefaultTimeout.
	Timeout time.Duration
	// Turn, when set, groups the calls of one turn of an agent (several
	// model calls answering one user message): a rate rule on requests
	// charges the turn's first call and not the next ones, per API key,
	// within the rule's window and for at most MaxTurnCalls calls. Token and
	// cost rules count every call. The Limiter remembers turns itself, so
	// over several replicas a turn is charged once by each replica it
	// reaches.
	Turn string
	// CacheHit marks a call answered from a cache: no model works for it,
	// so concurrency rules hold no place for it, rules counting requests
	// count it, and every other rule charges it what its CacheHits says
	// (Max being the usage of the call whose answer is replayed). Settle
	// it with a zero Usage: it is charged what it reserved.
	CacheHit bool
	// MaxWait lets the admission wait for rate and concurrency rules (never
	// budgets), in arrival order per subject. Zero refuses at once.
	MaxWait time.Duration
	// InFlight marks a call made inside one already counted in flight (a
	// response of a live connection, whose connection holds the lease):
	// concurrency rules do not count it again.
	InFlight bool
	// NamedMetricsOnly limits the admission to the rules on the custom
	// metrics Max (or Expected) names: no request is counted, no place on
	// a concurrency rule taken, no token or cost charged. It tops up what
	// an admitted call meters as it goes (the next slice of a live
	// connection's seconds).
	NamedMetricsOnly bool
}

// usesMetric reports whether an admission of req is charged by rule: every
// rule but one on a custom metric that req does not name in Max.Custom
// (nor Expected.Custom), which neither charges nor refuses a call that
// does not meter it (a chat call, by a budget of a live connection's
// seconds). A call that reports a custom metric only at settlement names
// it with 0 to be counted. With NamedMetricsOnly, only the rules on the
// custom metrics it names charge it.
func (req *Request) usesMetric(rule *compiledRule) bool {
	if rule.metric.builtin() {
		return !req.NamedMetricsOnly
	}
	if !rule.amountOfRequest && !req.NamedMetricsOnly {
		return true
	}
	_, inMax := req.Max.Custom[string(rule.metric)]
	_, inExpected := req.Expected.Custom[string(rule.metric)]
	return inMax || inExpected
}

// builtin reports a metric the library counts from Usage's own fields.
func (m Metric) builtin() bool {
	switch m {
	case MetricRequests, MetricConcurrency, MetricInputTokens, MetricUncachedInputTokens, MetricOutputTokens, MetricTokens, MetricCost:
		return true
	}
	return false
}

// Price is a model's price list in micro-dollars per million tokens.
// AudioInput and AudioOutput price audio tokens; zero prices them as text.
type Price struct {
	Input       int64
	CachedInput int64
	CacheWrite  int64
	Output      int64
	AudioInput  int64
	AudioOutput int64
}

// Cost prices u in micro-dollars, rounded up. Cached and cache-write tokens
// are priced apart from the rest of the input, audio tokens apart from text
// (at most the input and output they are part of).
func (p Price) Cost(u Usage) int64 {
	plain := max(0, u.InputTokens-u.CachedInputTokens-u.CacheWriteTokens)
	audioIn := min(max(0, u.AudioInputTokens), plain)
	plain -= audioIn
	audioOut := min(max(0, u.AudioOutputTokens), max(0, u.OutputTokens))
	textOut := u.OutputTokens - audioOut
	var hi, lo uint64
	add := func(tokens, price int64) {
		if tokens <= 0 || price <= 0 {
			return
		}
		h, l := bits.Mul64(uint64(tokens), uint64(price))
		var carry uint64
		lo, carry = bits.Add64(lo, l, 0)
		hi += h + carry
	}
	add(plain, p.Input)
	add(u.CachedInputTokens, p.CachedInput)
	add(u.CacheWriteTokens, p.CacheWrite)
	add(textOut, p.Output)
	add(audioIn, cmp.Or(p.AudioInput, p.Input))
	add(audioOut, cmp.Or(p.AudioOutput, p.Output))
	const million = 1_000_000
	if hi >= million {
		return 1<<63 - 1
	}
	q, r := bits.Div64(hi, lo, million)
	if r > 0 {
		q++
	}
	return int64(min(q, 1<<63-1))
}
