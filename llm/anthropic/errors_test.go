package anthropic

import "testing"

func TestErrorBody_Shape(t *testing.T) {
	cases := []struct{ got, want string }{
		{string(ErrorBody("rate_limit_error", "Slow down.", map[string]int{"retry_after_ms": 5})),
			`{"type":"error","error":{"type":"rate_limit_error","message":"Slow down.","limit":{"retry_after_ms":5}}}`},
		{string(ErrorBody("invalid_request_error", "Bad.", nil)),
			`{"type":"error","error":{"type":"invalid_request_error","message":"Bad."}}`},
		{string(ErrorBody("x", "y", func() {})), `{"type":"error","error":{"type":"x","message":"y"}}`},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s\nwant %s", c.got, c.want)
		}
	}
}
