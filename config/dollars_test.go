package config

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestParseDollars(t *testing.T) {
	tests := []struct {
		in      string
		want    Dollars
		wantErr string
	}{
		{in: "0.15", want: 150_000},
		{in: "3", want: 3_000_000},
		{in: "15.00", want: 15_000_000},
		{in: "15.000001", want: 15_000_001},
		{in: "0.000001", want: 1},
		{in: "0", want: 0},
		{in: "0.60", want: 600_000},
		{in: "007.5", want: 7_500_000},
		{in: "9223372036854.775807", want: 1<<63 - 1},
		{in: "1e3", wantErr: "only digits and one point"},
		{in: "-1", wantErr: "negative"},
		{in: "-0.5", wantErr: "negative"},
		{in: "+1", wantErr: "only digits and one point"},
		{in: "0.1234567", wantErr: "more than 6 decimal places"},
		{in: "abc", wantErr: "only digits and one point"},
		{in: "", wantErr: "no digits before the point"},
		{in: ".5", wantErr: "no digits before the point"},
		{in: "5.", wantErr: "no digits after the point"},
		{in: "1.2.3", wantErr: "only digits and one point"},
		{in: "1_000", wantErr: "only digits and one point"},
		{in: " 1", wantErr: "only digits and one point"},
		{in: "0x10", wantErr: "only digits and one point"},
		{in: "9223372036854.775808", wantErr: "too large"},
		{in: "9223372036855", wantErr: "too large"},
		{in: "99999999999999999999", wantErr: "too large"},
	}
	for _, tt := range tests {
		got, err := ParseDollars(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseDollars(%q) = %d, %v; want error containing %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseDollars(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

// TestDollars_UnmarshalYAML reads prices from YAML scalars of every tag: the
// text as written decides, never a float.
func TestDollars_UnmarshalYAML(t *testing.T) {
	tests := []struct {
		yaml    string
		want    Dollars
		wantErr string
	}{
		{yaml: "v: 0.15", want: 150_000},
		{yaml: "v: 3", want: 3_000_000},
		{yaml: `v: "3"`, want: 3_000_000},
		{yaml: "v: 15.000001", want: 15_000_001},
		{yaml: "v: 0.30", want: 300_000},
		{yaml: "v: 1e3", wantErr: `line 1: "1e3" is not an amount in dollars`},
		{yaml: "v: -1", wantErr: "negative"},
		{yaml: "v: 0.1234567", wantErr: "more than 6 decimal places"},
		{yaml: `v: "abc"`, wantErr: "only digits"},
		{yaml: "v: .inf", wantErr: "no digits before the point"},
		{yaml: "v: {a: 1}", wantErr: "must be a number"},
	}
	for _, tt := range tests {
		var got struct{ V Dollars }
		err := yaml.Unmarshal([]byte(tt.yaml), &got)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: got %d, %v; want error containing %q", tt.yaml, got.V, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got.V != tt.want {
			t.Errorf("%s: got %d, %v; want %d", tt.yaml, got.V, err, tt.want)
		}
	}
}

func TestDollars_String(t *testing.T) {
	for d, want := range map[Dollars]string{
		0: "0", 150_000: "0.15", 3_000_000: "3", 15_000_001: "15.000001", 1: "0.000001", -2_500_000: "-2.5",
	} {
		if got := d.String(); got != want {
			t.Errorf("Dollars(%d).String() = %q, want %q", int64(d), got, want)
		}
	}
}

func TestDollars_MarshalYAMLRoundTrip(t *testing.T) {
	for _, d := range []Dollars{0, 1, 150_000, 3_000_000, 15_000_001} {
		out, err := yaml.Marshal(struct{ V Dollars }{d})
		if err != nil {
			t.Fatal(err)
		}
		var back struct{ V Dollars }
		if err := yaml.Unmarshal(out, &back); err != nil || back.V != d {
			t.Errorf("%d: marshaled %q, read back %d, %v", int64(d), out, int64(back.V), err)
		}
	}
}

// FuzzParseDollars checks that whatever parses prints back to the same
// amount, and that nothing parses to a negative amount.
func FuzzParseDollars(f *testing.F) {
	for _, s := range []string{"0.15", "3", "15.000001", "1e3", "-1", "9223372036854.775807", ".5", "0.1234567"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDollars(s)
		if err != nil {
			return
		}
		if d < 0 {
			t.Fatalf("ParseDollars(%q) = %d, negative", s, d)
		}
		again, err := ParseDollars(d.String())
		if err != nil || again != d {
			t.Fatalf("ParseDollars(%q) = %d; its String %q reads back as %d, %v", s, d, d.String(), again, err)
		}
	})
}
